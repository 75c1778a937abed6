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


class _CountsGrants(af.MemoryStore):
    """A MemoryStore that counts the leases it grants (a semaphore released per grant)."""

    def __init__(self) -> None:
        super().__init__()
        self.granted = threading.Semaphore(0)

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        lease = super().acquire_lease(session, owner, ttl, lock_wait=lock_wait)
        self.granted.release()
        return lease


def test_asession_cancelled_while_waiting_leaves_no_session_open() -> None:
    """A task cancelled while its open waits for the lease: the open completes in its
    thread, and that session is closed, so the lease is free for the next opener (not
    left to the garbage collector: disabled here, as a reference cycle would delay it)."""
    store = _CountsGrants()

    async def scenario() -> af.RunResult:
        async with _asks() as wf:
            held = wf.session("s", store=store)
            assert store.granted.acquire(timeout=0)  # held's grant
            opening = asyncio.create_task(wf.asession("s", store=store, wait=BOUND / 2))
            await asyncio.sleep(0)
            opening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await opening
            await held.aclose()
            # The cancelled open now gets the lease; it must give it back.
            assert await asyncio.to_thread(store.granted.acquire, timeout=BOUND / 2)
            async with await wf.asession("s", store=store, wait=BOUND / 4) as s:
                return await s.arun("y")

    gc.disable()
    try:
        result = asyncio.run(asyncio.wait_for(scenario(), BOUND))
    finally:
        gc.enable()
    assert result.status is af.RunStatus.IDLE_WITH_PENDING_REQUESTS


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
