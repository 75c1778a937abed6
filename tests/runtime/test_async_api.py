"""The async API is complete: answering requests, closing and resuming never block the loop."""

from __future__ import annotations

import asyncio
import gc
import threading
from dataclasses import dataclass

import pytest

import actorflow as af
from actorflow.storage import Lease

BOUND = 10.0


@af.message
@dataclass
class NumberQuery:
    what: str


class Asks(af.Executor):
    """Asks for a number, then outputs what it was given plus one."""

    @af.handler
    def on_text(self, text: str, ctx: af.Context[None]) -> None:
        ctx.request(NumberQuery(text), int, request_id=f"ask-{text}")

    @af.response_handler
    def on_answer(self, request: NumberQuery, answer: int, ctx: af.Context[None]) -> None:
        ctx.output(f"{request.what}={answer + 1}")


def _asks() -> af.Workflow:
    return af.WorkflowBuilder("asks", start=Asks("a")).build()


def test_arespond_answers_pending_requests() -> None:
    """await session.arespond({...}) delivers answers and runs to idle, like respond()."""

    async def scenario() -> af.RunResult:
        async with _asks() as wf, wf.session("s") as s:
            first = await s.arun("x")
            assert first.status is af.RunStatus.IDLE_WITH_PENDING_REQUESTS
            assert [p.request_id for p in s.pending_requests] == ["ask-x"]
            with pytest.raises(af.RequestError):
                await s.arespond({"ask-x": "not an int"})
            return await s.arespond({"ask-x": 41})

    result = asyncio.run(asyncio.wait_for(scenario(), BOUND))
    assert result.outputs == ["x=42"]
    assert result.status is af.RunStatus.COMPLETED


def test_aresume_continues_a_stored_session() -> None:
    """await wf.aresume(store, ...) opens the session at its checkpoint, answers included."""
    store = af.MemoryStore()

    async def scenario() -> af.RunResult:
        async with _asks() as wf:
            async with wf.session("s", store=store) as s:
                await s.arun("y")
            async with await wf.aresume(store, session="s", responses={"ask-y": 1}) as s:
                return await s.arun()

    assert asyncio.run(asyncio.wait_for(scenario(), BOUND)).outputs == ["y=2"]


RELEASING = threading.Event()
RELEASE = threading.Event()


class _SlowToRelease:
    """A resource whose release (when its executor is dropped) waits for the test."""

    def __del__(self) -> None:
        RELEASING.set()
        RELEASE.wait(BOUND)


class Holds(af.Executor):
    conn = af.resource(_SlowToRelease)

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)


@pytest.mark.parametrize("what", ["session", "workflow"])
def test_aclose_waits_for_actors_to_stop_off_the_loop(what: str) -> None:
    """While aclose() waits for an executor's resources to be released, the loop runs:
    another coroutine sees the release under way and lets it finish."""
    RELEASING.clear()
    RELEASE.clear()

    async def scenario() -> None:
        wf = af.WorkflowBuilder(f"slow-release-{what}", start=Holds("h")).build()
        s = wf.session()
        assert (await s.arun(1)).outputs == [1]
        closing = asyncio.create_task(s.aclose() if what == "session" else _close_both(s, wf))
        assert await asyncio.to_thread(RELEASING.wait, BOUND)
        assert not closing.done(), "aclose() blocked the loop until the release finished"
        RELEASE.set()
        await closing
        with pytest.raises(af.SessionClosed):
            await s.arun(2)
        await wf.aclose()

    try:
        asyncio.run(asyncio.wait_for(scenario(), BOUND))
    finally:
        RELEASE.set()


async def _close_both(s: af.Session, wf: af.Workflow) -> None:
    async with wf, s:
        pass


def test_async_with_closes_session_and_workflow() -> None:
    """Leaving ``async with`` closes the session and the workflow."""

    async def scenario() -> tuple[af.Session, af.Workflow]:
        async with _asks() as wf, wf.session() as s:
            await s.arun("z")
        return s, wf

    s, wf = asyncio.run(scenario())
    with pytest.raises(af.SessionClosed):
        s.run("again")
    with pytest.raises(af.SessionClosed):
        wf.session()


def test_asession_waits_for_the_owner_off_the_loop() -> None:
    """await wf.asession(..., wait=) waits for another owner while the loop runs: the
    loop is what lets that owner go."""
    store = af.MemoryStore()

    async def scenario() -> list[str]:
        async with _asks() as wf:
            held = wf.session("s", store=store)
            opening = asyncio.create_task(wf.asession("s", store=store, wait=BOUND / 2))
            await asyncio.sleep(0)  # the open starts (and waits for the lease) first
            await held.aclose()  # on this loop: only possible while the open waits off it
            async with await opening as s:
                result = await s.arun("x")
            return [p.request_id for p in result.pending_requests]

    assert asyncio.run(asyncio.wait_for(scenario(), BOUND)) == ["ask-x"]


class _GrantsOnCue(af.MemoryStore):
    """A MemoryStore whose grants wait for ``proceed`` once ``hold`` is set, saying so
    (``granting``): a cancel can land in the middle of one."""

    def __init__(self) -> None:
        super().__init__()
        self.hold, self.granting, self.proceed = (threading.Event() for _ in range(3))

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        if self.hold.is_set():
            self.granting.set()
            assert self.proceed.wait(BOUND)
        return super().acquire_lease(session, owner, ttl, lock_wait=lock_wait)


def test_asession_cancelled_during_its_grant_leaves_no_session_open() -> None:
    """A task cancelled while the store grants its lease: the grant cannot be stopped,
    so the open completes in its thread, and that session is closed there, so the lease
    is free for the next opener (not left to the garbage collector: disabled here, as a
    reference cycle would delay it)."""
    store = _GrantsOnCue()

    async def scenario() -> af.RunResult:
        async with _asks() as wf:
            store.hold.set()
            opening = asyncio.create_task(wf.asession("s", store=store))
            assert await asyncio.to_thread(store.granting.wait, BOUND)
            opening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await opening
            store.hold.clear()
            store.proceed.set()  # the grant completes: the session opened is nobody's
            async with await wf.asession("s", store=store, wait=BOUND / 2) as s:
                return await s.arun("y")

    gc.disable()
    try:
        result = asyncio.run(asyncio.wait_for(scenario(), BOUND))
    finally:
        gc.enable()
    assert result.status is af.RunStatus.IDLE_WITH_PENDING_REQUESTS


class _CountsRefusals(af.MemoryStore):
    """A MemoryStore that counts the grants it refuses (a session another holds)."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        try:
            return super().acquire_lease(session, owner, ttl, lock_wait=lock_wait)
        except af.SessionOwned:
            self.refused += 1
            raise


def _open_threads() -> int:
    return sum(t.name == "actorflow-open" for t in threading.enumerate())


def test_opens_waiting_for_an_owner_hold_up_nothing_else_and_stop_when_cancelled() -> None:
    """Eight opens waiting (wait=) for a session another holds: the loop's other work,
    which runs on asyncio's default executor (arun, aclose, another open), goes on
    meanwhile; cancelled, each of them stops waiting at once and its thread ends."""
    store = _CountsRefusals()
    waiting = 8  # more than the default executor's workers on a small machine

    async def scenario() -> list[object]:
        async with _asks() as wf:
            held = await wf.asession("held", store=store)
            opens = [
                asyncio.create_task(wf.asession("held", store=store, wait=3 * BOUND))
                for _ in range(waiting)
            ]
            while store.refused < 2 * waiting:  # the opens are waiting, polling
                await asyncio.sleep(0.005)
            async with await wf.asession("other", store=store) as other:
                outputs: list[object] = [(await other.arun("x")).pending_requests[0].request_id]
                outputs.append((await other.arespond({"ask-x": 1})).outputs)
            for task in opens:
                task.cancel()
            await asyncio.gather(*opens, return_exceptions=True)
            while _open_threads():
                await asyncio.sleep(0.005)
            await held.aclose()
            async with await wf.asession("held", store=store) as again:
                outputs.append([again.id])
            return outputs

    assert asyncio.run(asyncio.wait_for(scenario(), BOUND)) == ["ask-x", ["x=2"], ["held"]]


def test_aresume_takes_every_argument_of_resume() -> None:
    """aresume forks with as_session=, like resume; the source lineage is untouched."""
    store = af.MemoryStore()

    async def scenario() -> tuple[af.RunResult, list[str]]:
        async with _asks() as wf:
            async with await wf.asession("s", store=store) as s:
                await s.arun("y")
            async with await wf.aresume(
                store, session="s", as_session="fork", responses={"ask-y": 1}, wait=1.0
            ) as fork:
                forked = await fork.arun()
            async with await wf.aresume(store, session="s") as s:
                return forked, [p.request_id for p in s.pending_requests]

    forked, still_pending = asyncio.run(asyncio.wait_for(scenario(), BOUND))
    assert forked.outputs == ["y=2"]
    assert still_pending == ["ask-y"]
