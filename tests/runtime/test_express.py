"""Express supersteps: one-executor supersteps handed from host to host.

A run without a restart policy or tracing hands a superstep of one executor, whose
barrier no cut is due at, straight from the host that finished the last one to the
next (see ``runtime/supervisor/_express.py``). Every test here runs the same workflow both
ways, the express way and the supervisor's way (a session with a restart policy never
goes express: it keeps every executor's state at each barrier), and expects the
same outputs, the same events in the same order, and the same state: the chain
changes who hands a batch on, never what a run does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import actorflow as af

BOUND = 10.0
"""Seconds any wait in these tests is bounded by."""

SUPERVISED = af.RestartPolicy(max_restarts=0)
"""A session with this policy keeps every barrier's state: its supersteps never go express."""


class Ping(af.Executor):
    """Counts what it saw; passes n on until ``limit``, then outputs its count."""

    def __init__(self, id: str, limit: int = 300) -> None:
        super().__init__(id)
        self.limit = limit
        self.seen = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        if n >= self.limit:
            ctx.output(["done", n, self.seen])
        else:
            ctx.send(n + 1)


class Pong(af.Executor):
    """Counts what it saw and sends n back; outputs every 50th n on the way."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        if n % 50 == 0:
            ctx.output(["pong", n, self.seen])
        ctx.send(n)


def _cycle(name: str, limit: int = 300) -> af.Workflow:
    builder = af.WorkflowBuilder(name, start=Ping("ping", limit), max_supersteps=10_000)
    builder.add_edge("ping", Pong("pong")).add_edge("pong", "ping")
    return builder.build()


def _shape(events: list[af.Event]) -> list[tuple[Any, ...]]:
    """What a run did, without times or run ids: each event's kind and its facts."""
    shape: list[tuple[Any, ...]] = []
    for event in events:
        facts: tuple[Any, ...] = (type(event).__name__, event.superstep, event.seq)
        for name in ("executor", "executors", "value", "status", "error_type"):
            if hasattr(event, name):
                facts += (getattr(event, name),)
        shape.append(facts)
    return shape


def _both(wf: af.Workflow, input: Any, **run: Any) -> tuple[af.RunResult, af.RunResult]:
    """The run express, and the same run on a supervised session."""
    with wf.session() as express, wf.session(restart=SUPERVISED) as supervised:
        return express.run(input, **run), supervised.run(input, **run)


def test_an_express_run_does_what_a_supervised_run_does() -> None:
    with _cycle("express-same") as wf:
        fast, slow = _both(wf, 0)
    assert fast.outputs == slow.outputs
    assert fast.outputs[0] == ["pong", 50, 50]
    assert fast.outputs[-1] == ["done", 300, 301]
    assert fast.supersteps == slow.supersteps == 601
    assert _shape(fast.events) == _shape(slow.events)


def test_state_carries_over_from_an_express_run() -> None:
    """A second run continues from the state the chain left in each actor."""
    with _cycle("express-state") as wf, wf.session() as session:
        session.run(0)
        again = session.run(299)
    assert again.outputs == [["pong", 300, 301], ["done", 300, 303]]


def test_the_superstep_limit_holds_inside_a_chain() -> None:
    with _cycle("express-limit", limit=10**9) as wf:
        for policy in (None, SUPERVISED):
            with wf.session(restart=policy) as session:
                with pytest.raises(af.SuperstepLimitExceeded) as caught:
                    session.run(0, max_supersteps=77)
                assert caught.value.superstep == 77


class Flaky(af.Executor):
    """Passes n on; fails on ``FAIL_AT`` (after changing its state)."""

    FAIL_AT = 123

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        if n == self.FAIL_AT:
            raise RuntimeError(f"flaky at {n}")
        if n % 40 == 0:
            ctx.output(n)
        ctx.send(n + 1)


def _flaky_cycle(name: str) -> af.Workflow:
    builder = af.WorkflowBuilder(name, start=Flaky("a"), max_supersteps=10_000)
    builder.add_edge("a", Flaky("b")).add_edge("b", "a")
    return builder.build()


def test_a_handler_that_fails_mid_chain_fails_its_own_superstep() -> None:
    events: list[af.Event] = []
    with _flaky_cycle("express-fail") as wf, wf.session() as session:
        stream = session.stream(0)
        with pytest.raises(af.ExecutorFailed) as caught:
            events.extend(stream)
    failure = caught.value
    assert failure.executor == "b"  # 123 is odd: b's
    assert failure.superstep == 124  # input 0 is superstep 1
    assert [e.value for e in events if isinstance(e, af.OutputEvent)] == [0, 40, 80, 120]
    failed = [e for e in events if isinstance(e, af.ExecutorFailedEvent)]
    assert [(e.executor, e.superstep) for e in failed] == [("b", 124)]
    completed = [e.superstep for e in events if isinstance(e, af.SuperstepCompletedEvent)]
    assert completed == list(range(1, 124))
    started = [e.superstep for e in events if isinstance(e, af.SuperstepStartedEvent)]
    assert started == list(range(1, 125))


class Fork(af.Executor):
    """Sends n to both branches every tenth n, else to the next hop only."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        if n >= 100:
            ctx.output(n)
            return
        ctx.send(n + 1, to="hop")
        if n % 10 == 0:
            ctx.send(n, to="side")


class Hop(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n)


class Side(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.total = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        self.total += n
        ctx.output(["side", self.total])


def test_a_superstep_of_two_executors_ends_the_chain_and_the_supervisor_runs_it() -> None:
    builder = af.WorkflowBuilder("express-fork", start=Fork("fork"), max_supersteps=10_000)
    builder.add_edge("fork", Hop("hop")).add_edge("hop", "fork").add_edge("fork", Side("side"))
    with builder.build() as wf:
        fast, slow = _both(wf, 0)
    assert fast.outputs == slow.outputs
    assert fast.outputs[-1] == 100
    assert ["side", sum(range(0, 100, 10))] in fast.outputs
    assert _shape(fast.events) == _shape(slow.events)


class Twice(af.Executor):
    """Sends what it gets twice: a fan-in after it buffers two groups at once."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n)
        ctx.send(n + 1)


class Joined(af.Executor):
    """Takes one fan-in group at a time and passes its sum on."""

    @af.handler
    def on_all(self, values: list[int], ctx: af.Context[int]) -> None:
        ctx.send(sum(values))


class Last(af.Executor):
    """Outputs what it gets."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output([self.id, n])


def test_a_fan_in_group_still_buffered_joins_the_superstep_after_its_barrier() -> None:
    """Two groups wait at the fan-in: the first runs the join alone, and the barrier
    after it hands the join the second group beside the join's own send. A chain
    must not run the next superstep without it (found by the torture harness)."""
    builder = af.WorkflowBuilder("express-fan-in", start=Fork2("fork"), max_supersteps=100)
    builder.add_fan_out("fork", [Twice("a"), Twice("b")])
    builder.add_fan_in(["a", "b"], Joined("join"))
    builder.add_edge("join", Hop("t1")).add_edge("t1", Hop("t2")).add_edge("t2", Last("t3"))
    with builder.build() as wf:
        fast, slow = _both(wf, 1)
    assert sorted(fast.outputs) == [["t3", 2], ["t3", 4]]
    assert fast.outputs == slow.outputs
    assert _shape(fast.events) == _shape(slow.events)


class Fork2(af.Executor):
    """Sends its input on to every branch of its fan-out."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n)


class Asker(af.Executor):
    """Passes n on; asks the caller once, at ``ASK_AT``, and goes on with the answer."""

    ASK_AT = 31

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        if n == self.ASK_AT:
            ctx.request(n, int)
        elif n >= 60:
            ctx.output(n)
        else:
            ctx.send(n + 1)

    @af.response_handler
    def on_answer(self, asked: int, answer: int, ctx: af.Context[int]) -> None:
        ctx.send(answer)


def test_a_request_in_a_chain_leaves_the_run_idle_with_it_pending() -> None:
    builder = af.WorkflowBuilder("express-ask", start=Asker("a"), max_supersteps=10_000)
    builder.add_edge("a", Hop("hop")).add_edge("hop", "a")
    with builder.build() as wf:
        for policy in (None, SUPERVISED):
            with wf.session(restart=policy) as session:
                idle = session.run(0)
                assert idle.status is af.RunStatus.IDLE_WITH_PENDING_REQUESTS
                [pending] = idle.pending_requests
                assert pending.value == Asker.ASK_AT
                done = session.respond({pending.request_id: 50})
                assert done.outputs == [60]


class Slow(af.Executor):
    """Passes n on; sleeps past its time limit on ``SLOW_AT``."""

    SLOW_AT = 41

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        if n == self.SLOW_AT:
            RELEASE.wait(BOUND)
        ctx.send(n + 1)


RELEASE = threading.Event()


@pytest.fixture
def release() -> Iterator[None]:
    RELEASE.clear()
    yield
    RELEASE.set()


@pytest.mark.usefixtures("release")
def test_an_executor_with_a_time_limit_is_watched_inside_a_cycle() -> None:
    builder = af.WorkflowBuilder("express-limit-time", start=Hop("hop"), max_supersteps=10_000)
    builder.add_edge("hop", Slow("slow", timeout=0.3)).add_edge("slow", "hop")
    with builder.build() as wf, wf.session() as session, pytest.raises(af.ExecutorFailed) as caught:
        session.run(0)
    assert caught.value.executor == "slow"
    assert isinstance(caught.value.__cause__, af.ExecutorTimedOut)
    assert caught.value.superstep == 2 * (Slow.SLOW_AT + 1)  # hop runs the odd supersteps


class Endless(af.Executor):
    """Passes n on forever, noting each n it handles; signals once it passed ``SIGNAL_AT``."""

    SIGNAL_AT = 500
    PASSED = threading.Event()
    HANDLED: list[int] = []  # noqa: RUF012 - the test's record of what the actors handled

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.HANDLED.append(n)
        if n == self.SIGNAL_AT:
            self.PASSED.set()
        ctx.send(n + 1)


def test_a_cancel_stops_a_chain_at_a_barrier_with_nothing_lost_or_doubled() -> None:
    """The run stops at a barrier; the message in flight stays in flight, and the next
    run carries on from it: every number handled exactly once, in order."""
    Endless.PASSED.clear()
    Endless.HANDLED.clear()
    builder = af.WorkflowBuilder("express-cancel", start=Endless("a"), max_supersteps=10**9)
    builder.add_edge("a", Endless("b")).add_edge("b", "a")
    with builder.build() as wf, wf.session() as session:
        stream = session.stream(0)
        steps: list[int] = []
        for event in stream:
            if isinstance(event, af.SuperstepCompletedEvent):
                steps.append(event.superstep)
            if Endless.PASSED.is_set():
                break
        stream.close()  # type: ignore[attr-defined]  # an EventStream
        assert steps == list(range(1, len(steps) + 1))
        with pytest.raises(af.SuperstepLimitExceeded):
            session.run(max_supersteps=5)
    handled = Endless.HANDLED
    assert len(handled) > Endless.SIGNAL_AT + 5
    assert handled == list(range(len(handled)))


# --- with a store: supersteps whose barrier is not checkpointed go express too ----------


def _cuts(store: af.CheckpointStore, session: str) -> list[tuple[str, int]]:
    return [(cp.kind.value, cp.superstep) for cp in store.list(session=session)]


@pytest.mark.parametrize(
    "policy",
    [af.CheckpointPolicy(every=7), af.CheckpointPolicy(on_idle_only=True)],
    ids=["every-7", "idle-only"],
)
def test_a_session_with_a_store_checkpoints_the_same_cuts_either_way(
    policy: af.CheckpointPolicy, tmp_path: Any
) -> None:
    store = af.SQLiteStore(str(tmp_path / "cuts.db"))
    with store, _cycle("express-store") as wf:
        with wf.session("fast", store=store, checkpoint=policy) as fast:
            fast_result = fast.run(0)
        with wf.session("slow", store=store, checkpoint=policy, restart=SUPERVISED) as slow:
            slow_result = slow.run(0)
        assert fast_result.outputs == slow_result.outputs
        assert _shape(fast_result.events) == _shape(slow_result.events)
        assert _cuts(store, "fast") == _cuts(store, "slow")
        fast_last = store.latest(session="fast")
        slow_last = store.latest(session="slow")
        assert fast_last is not None and slow_last is not None
        assert fast_last.superstep == slow_last.superstep == 601


class FailsOnce(af.Executor):
    """Passes n on; fails the first time it meets ``FAIL_AT`` (in this process)."""

    FAIL_AT = 33
    failed: list[int] = []  # noqa: RUF012 - once per test (reset by it)

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.seen.append(n)
        if n == self.FAIL_AT and not self.failed:
            self.failed.append(n)
            raise RuntimeError("once")
        if n >= 60:
            ctx.output(self.seen)
        else:
            ctx.send(n + 1)


def test_a_failure_mid_chain_resumes_from_the_last_cut_with_nothing_lost_or_doubled(
    tmp_path: Any,
) -> None:
    """Cuts every 5 supersteps, a handler fails between two of them: the session resumed
    from the store replays from the last cut, and every executor's state ends as if
    nothing had failed."""
    FailsOnce.failed.clear()
    builder = af.WorkflowBuilder("express-resume", start=FailsOnce("a"), max_supersteps=1000)
    builder.add_edge("a", FailsOnce("b")).add_edge("b", "a")
    store = af.SQLiteStore(str(tmp_path / "resume.db"))
    policy = af.CheckpointPolicy(every=5)
    with store, builder.build() as wf:
        with (
            wf.session("s", store=store, checkpoint=policy) as session,
            pytest.raises(af.ExecutorFailed) as caught,
        ):
            session.run(0)
        assert caught.value.superstep == FailsOnce.FAIL_AT + 1
        with wf.resume(store, session="s", checkpoint=policy) as resumed:
            result = resumed.run()
    # a handled the even numbers (b the odd ones) up to 60, each exactly once.
    assert result.outputs == [list(range(0, 61, 2))]


# --- hosts in other processes are never chained --------------------------------------


class _Waiting:
    """A host's answer that waits together with others (``wait_any``), as a Ray host's
    does; a callback on it would cost a thread hop, so nothing may ask for one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.landed = threading.Event()
        inner.add_done_callback(self.landed.set)

    def get(self, *, timeout: float | None = None) -> Any:
        return self.inner.get(timeout=timeout)

    def add_done_callback(self, callback: Any) -> None:
        raise AssertionError("an answer that waits together was given a callback")

    @staticmethod
    def wait_any(futures: Any, count: int, timeout: float | None) -> list[int]:
        landed = [f.landed for f in futures]
        waiting = [e for e in landed if not e.is_set()]
        for event in waiting[: max(count - (len(landed) - len(waiting)), 0)]:
            event.wait(timeout)
        return [i for i, e in enumerate(landed) if e.is_set()]


class _WaitingHost(af.actors.HostProxy):
    def call(self, method: str, payload: bytes) -> Any:
        return _Waiting(super().call(method, payload))

    def load_call(self, factory: Any, method: str, payload: bytes) -> Any:
        return _Waiting(super().load_call(factory, method, payload))


class _WaitingBackend:
    """Thread hosts whose answers wait together, like those of another process."""

    def __init__(self) -> None:
        self._threads = af.actors.ThreadBackend()

    def spawn(self, executor: str) -> Any:
        return _WaitingHost(self._threads.spawn(executor))

    def placement(self, executor: str) -> Any:
        return None

    def check(self, factories: Any) -> None:
        pass


def test_hosts_whose_answers_wait_together_are_never_chained() -> None:
    """A Ray host's answer calls back through a thread hop (more than the call itself):
    its supersteps stay the supervisor's, which waits for them with ``wait_any``."""
    with _cycle("express-remote") as threads:
        expected = threads.run(0)
    builder = af.WorkflowBuilder("express-remote", start=Ping("ping"), max_supersteps=10_000)
    builder.add_edge("ping", Pong("pong")).add_edge("pong", "ping")
    with builder.build(backend=_WaitingBackend()) as remote:
        result = remote.run(0)
    assert result.outputs == expected.outputs
    assert _shape(result.events) == _shape(expected.events)
