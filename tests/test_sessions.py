"""Sessions: state across runs, one thing at a time, many at once, cancel, reset, close.

Runs are held open at a chosen superstep by ``graphs.HOOK`` blocking on a
threading.Event the test controls (bounded waits everywhere, never a sleep).
Reset cases reproduce Microsoft Agent Framework #7347 review findings; the
failed-superstep case reproduces MAF #7859.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode_state
from actorflow.testing import inject_fault, run_to_idle

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphs  # tests/ is on sys.path

WAIT = 10.0
"""Bound on every wait for another thread."""


@dataclass
class Gate:
    """Holds the first handler that runs in ``superstep`` until released."""

    superstep: int = -1
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def __call__(self, executor: str, superstep: int) -> None:
        if superstep == self.superstep and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT), "the test never released the gate"

    def wait_entered(self) -> None:
        assert self.entered.wait(WAIT), "the run never reached the gate"


@pytest.fixture
def gate() -> Iterator[Gate]:
    """A gate installed as the corpus graphs' handler hook (call ``gate.superstep = n``)."""
    held = Gate()
    graphs.HOOK = held
    try:
        yield held
    finally:
        held.release.set()
        graphs.HOOK = None


def states_of(store: af.MemoryStore, session: str) -> dict[str, dict[str, Any]]:
    """Executor states in the session's latest checkpoint."""
    latest = store.latest(session=session)
    assert latest is not None
    return {
        eid: decode_state([store.load_blob(d) for d in digests])
        for eid, digests in latest.executors.items()
    }


def uninterrupted(family: str, *params: int) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """Outputs and final states of one uninterrupted run in a fresh session."""
    case = graphs.build(family, *params)
    store = af.MemoryStore()
    with case.workflow as wf, wf.session("ref", store=store) as s:
        outputs = s.run(case.input).outputs
    return outputs, states_of(store, "ref")


def in_thread(target: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``target(*args)`` in a thread; its result or error lands in the returned dict."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = target(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    return thread, box


def joined(thread: threading.Thread, box: dict[str, Any]) -> Any:
    thread.join(timeout=WAIT)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    return box["result"]


# --- state across runs, and one thing at a time -------------------------------------------


@pytest.mark.timeout(30)
def test_state_carries_over_between_runs_of_a_session() -> None:
    """Each run of a session continues from the state the previous run left; a new session starts fresh."""
    case = graphs.build("chain", 1)
    store = af.MemoryStore()
    with case.workflow as wf:
        with wf.session("s", store=store) as s:
            first = s.run(3).outputs
            second = s.run(4).outputs
            third = s.run(5).outputs
        assert [o[3] for o in first + second + third] == [6, 14, 24]  # the sink's running total
        states = states_of(store, "s")
        assert states["a0"]["count"] == 3 and states["a0"]["seen"] == [3, 4, 5]
        assert states["sink"]["got"] == [6, 8, 10]
        with wf.session() as fresh:
            assert fresh.run(4).outputs[0][3] == 8
        assert wf.run(4).outputs[0][3] == 8


@pytest.mark.timeout(30)
def test_a_second_call_from_another_thread_gets_session_busy(gate: Gate) -> None:
    """While a run is active, run, stream and reset from another thread raise SessionBusy."""
    case = graphs.build("ring", 3, 2)
    expected, _ = uninterrupted("ring", 3, 2)
    gate.superstep = 2
    with case.workflow as wf, wf.session() as s:
        thread, box = in_thread(s.run, case.input)
        gate.wait_entered()
        with pytest.raises(af.SessionBusy):
            s.run(case.input)
        with pytest.raises(af.SessionBusy):
            s.stream(case.input)
        with pytest.raises(af.SessionBusy):
            s.reset()
        gate.release.set()
        assert joined(thread, box).outputs == expected
        assert s.run(1).status is af.RunStatus.COMPLETED  # free again


@pytest.mark.timeout(30)
def test_a_second_run_from_another_asyncio_task_gets_session_busy(gate: Gate) -> None:
    """While arun() is active in one task, arun() and astream() in another raise SessionBusy."""
    case = graphs.build("ring", 3, 2)
    expected, _ = uninterrupted("ring", 3, 2)
    gate.superstep = 2

    async def scenario(s: af.Session) -> af.RunResult:
        first = asyncio.create_task(s.arun(case.input))
        await asyncio.to_thread(gate.wait_entered)
        with pytest.raises(af.SessionBusy):
            await s.arun(case.input)
        with pytest.raises(af.SessionBusy):
            async for _ in s.astream(case.input):
                pass
        gate.release.set()
        return await asyncio.wait_for(first, WAIT)

    with case.workflow as wf, wf.session() as s:
        assert asyncio.run(scenario(s)).outputs == expected


@pytest.mark.timeout(60)
def test_many_sessions_run_at_once_in_one_process() -> None:
    """20 sessions running at once on 20 threads each get exactly what one session running alone gets."""
    case = graphs.build("fan_burst", 3, 2)
    inputs = [2, 5, 9]
    with case.workflow as wf:
        with wf.session() as alone:
            expected = [alone.run(n).outputs for n in inputs]
        start = threading.Barrier(20, timeout=WAIT)

        def one_session(k: int) -> list[list[Any]]:
            with wf.session(f"s{k}", store=af.MemoryStore() if k % 2 else None) as s:
                start.wait()
                return [s.run(n).outputs for n in inputs]

        workers = [in_thread(one_session, k) for k in range(20)]
        results = [joined(thread, box) for thread, box in workers]
    assert results == [expected] * 20


# --- cancel -------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_cancel_from_another_thread_stops_at_the_barrier_and_a_later_run_continues(
    gate: Gate,
) -> None:
    """cancel() from another thread ends the run CANCELLED at the barrier; a later run() finishes it as if uninterrupted."""
    case = graphs.build("ring", 3, 4)
    expected, expected_states = uninterrupted("ring", 3, 4)
    gate.superstep = 5
    store = af.MemoryStore()
    with case.workflow as wf, wf.session("s", store=store) as s:
        thread, box = in_thread(s.run, case.input)
        gate.wait_entered()
        s.cancel()
        gate.release.set()
        cancelled = joined(thread, box)
        assert cancelled.status is af.RunStatus.CANCELLED
        assert isinstance(cancelled.events[-1], af.RunCancelledEvent)
        assert cancelled.events[-1].superstep == 5
        assert cancelled.supersteps == 5
        assert states_of(store, "s") != expected_states
        rest = s.run()
    assert rest.status is af.RunStatus.COMPLETED
    assert rest.events[0].superstep == 5
    assert cancelled.outputs + rest.outputs == expected
    assert states_of(store, "s") == expected_states


@pytest.mark.timeout(30)
def test_cancelling_the_arun_task_cancels_the_run(gate: Gate) -> None:
    """Cancelling an arun() task stops the run at the next barrier, raises CancelledError, and frees the session."""
    case = graphs.build("ring", 3, 4)
    _, expected_states = uninterrupted("ring", 3, 4)
    gate.superstep = 3
    store = af.MemoryStore()

    async def scenario(s: af.Session) -> af.RunResult:
        task = asyncio.create_task(s.arun(case.input))
        await asyncio.to_thread(gate.wait_entered)
        task.cancel()
        # FIFO ready queue: the task handles its cancellation (and tells the run to stop)
        # before this callback releases the held superstep.
        asyncio.get_running_loop().call_soon(gate.release.set)
        with pytest.raises(asyncio.CancelledError):
            await task
        return await s.arun()

    with case.workflow as wf, wf.session("s", store=store) as s:
        rest = asyncio.run(scenario(s))
    assert rest.status is af.RunStatus.COMPLETED
    assert rest.events[0].superstep == 3, "the cancelled run stopped at the barrier after step 3"
    assert states_of(store, "s") == expected_states


# --- reset (MAF #7347 review) -----------------------------------------------------------------


class Forward(af.Executor):
    """Forwards numbers."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        ctx.send(n)


class Scale(af.Executor):
    """Sends n * 10."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        ctx.send(n * 10)


class Pair(af.Executor):
    """Fan-in target: outputs each pair it gets."""

    @af.handler
    def on_pair(self, values: list[int], ctx: af.Context) -> None:
        ctx.output(values)


def _half_fan_in() -> af.Workflow:
    """A positive input fills only the ``pos`` half of the fan-in; a negative one the other."""
    builder = af.WorkflowBuilder("half", start=Forward("src"))
    builder.add_switch("src", [af.Case(_positive, Scale("pos")), af.Default(Scale("neg"))])
    builder.add_fan_in(["pos", "neg"], Pair("pair"))
    return builder.build()


def _positive(n: int) -> bool:
    return n > 0


@pytest.mark.timeout(30)
def test_a_half_filled_fan_in_never_combines_with_values_after_reset() -> None:
    """pos delivers, the run goes idle half-filled; after reset() neg's value is not paired with it."""
    with _half_fan_in() as wf:
        with wf.session() as control:
            assert control.run(1).outputs == []
            assert control.run(-1).outputs == [[10, -10]], "the fan-in was half-filled"
        with wf.session() as s:
            assert s.run(1).outputs == []
            s.reset()
            assert s.run(-1).outputs == []
            assert s.run(2).outputs == [[20, -10]], "only values of runs after the reset pair"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("reset", [False, True], ids=["continue", "reset"])
def test_events_of_an_abandoned_stream_never_appear_in_the_next_run(reset: bool) -> None:
    """Break out of a stream mid-run; the next run (after reset() or not) yields only its own events."""
    case = graphs.build("ring", 3, 30)
    with case.workflow as wf, wf.session() as s:
        stream = s.stream(case.input)
        seen = []
        for event in stream:
            seen.append(event)
            if isinstance(event, af.SuperstepCompletedEvent) and event.superstep == 3:
                break
        stream.close()  # type: ignore[attr-defined]  # a generator: close() abandons the run
        abandoned = seen[0].run_id
        if reset:
            s.reset()
        events = list(s.stream(case.input) if reset else s.stream())
    assert events[0].run_id != abandoned
    assert {e.run_id for e in events} == {events[0].run_id}
    assert isinstance(events[0], af.RunStartedEvent) and isinstance(
        events[-1], af.RunCompletedEvent
    )
    if reset:
        assert events[0].superstep == 0
        fresh_outputs, _ = uninterrupted("ring", 3, 30)
        assert [e.value for e in events if isinstance(e, af.OutputEvent)] == fresh_outputs
    else:
        assert events[0].superstep >= 3


@pytest.mark.timeout(30)
def test_reset_during_a_run_raises_session_busy(gate: Gate) -> None:
    """reset() while a run is active raises SessionBusy and changes nothing of the run."""
    case = graphs.build("ring", 3, 2)
    expected, _ = uninterrupted("ring", 3, 2)
    gate.superstep = 3
    with case.workflow as wf, wf.session() as s:
        thread, box = in_thread(s.run, case.input)
        gate.wait_entered()
        with pytest.raises(af.SessionBusy, match="reset"):
            s.reset()
        gate.release.set()
        assert joined(thread, box).outputs == expected


_UNLOADING = Gate()


class _SlowToRelease:
    """A resource whose release (when its actor's executor is dropped) blocks on a gate."""

    def __del__(self) -> None:
        _UNLOADING("resource", 0)


class HoldsResource(af.Executor):
    """Outputs numbers; its resource holds reset() open while it is released."""

    conn = af.resource(_SlowToRelease)

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        ctx.output(n)


@pytest.mark.timeout(30)
def test_a_run_during_reset_raises_session_busy() -> None:
    """While reset() is rebuilding (held open in a resource release), run() and reset() raise SessionBusy."""
    global _UNLOADING  # noqa: PLW0603  # one gate per test, read by the resource's __del__
    _UNLOADING = Gate(superstep=0)
    try:
        workflow = af.WorkflowBuilder("held", start=HoldsResource("h")).build()
        with workflow as wf, wf.session() as s:
            assert s.run(1).outputs == [1]
            thread, box = in_thread(s.reset)
            _UNLOADING.wait_entered()
            with pytest.raises(af.SessionBusy, match="start a run"):
                s.run(2)
            with pytest.raises(af.SessionBusy):
                s.reset()
            _UNLOADING.release.set()
            joined(thread, box)
            assert s.run(3).outputs == [3]
    finally:
        _UNLOADING.release.set()


@pytest.mark.timeout(30)
def test_reset_starts_a_new_lineage_from_blueprint_state() -> None:
    """After reset() the next run starts at superstep 0 from blueprint state, under a new lineage."""
    case = graphs.build("chain", 1)
    store = af.MemoryStore()
    with case.workflow as wf, wf.session("s", store=store) as s:
        s.run(3)
        before = {cp.id for cp in store.list(session="s")}
        s.reset()
        result = s.run(4)
    assert result.outputs == [["sink", 2, 8, 8]]
    after = [cp for cp in store.list(session="s") if cp.id not in before]
    assert after[0].kind is af.storage.CheckpointKind.ENTRY and after[0].parent_id is None
    assert states_of(store, "s")["a0"]["seen"] == [4]


# --- failed supersteps (MAF #7859) -----------------------------------------------------------


class Last(af.Executor):
    """Remembers every number and outputs what it has seen."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        self.seen.append(n)
        ctx.output([self.id, list(self.seen)])


class Keep(Last):
    """Like :class:`Last`, and forwards the number."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        super().on_num(n, ctx)
        ctx.send(n)


def _two_branches(restart: af.RestartPolicy | None = None) -> af.Workflow:
    """``src`` fans out to ``a`` and ``c`` (superstep 2), both feed ``z`` (superstep 3)."""
    builder = af.WorkflowBuilder("branches", start=Keep("src"), restart=restart)
    builder.add_fan_out("src", [Keep("a"), Keep("c")])
    builder.add_edge("a", Last("z")).add_edge("c", "z")
    return builder.build()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("policy", ["store", "restart"])
def test_nothing_of_a_failed_superstep_leaks_into_the_next_run(policy: str) -> None:
    """After a fail-fast superstep the next run sees none of its sends or state changes (MAF #7859)."""
    with _two_branches() as wf, wf.session("ref") as reference:
        with pytest.raises(af.SuperstepLimitExceeded):
            reference.run(1, max_supersteps=1)
        expected = reference.run(5).outputs
    # Fail-fast either way: a store, or a policy that allows no restart (both keep the
    # last good state the supervisor rolls back to).
    restart = af.RestartPolicy(max_restarts=0) if policy == "restart" else None
    with _two_branches(restart) as wf:
        store = af.MemoryStore() if policy == "store" else None
        with wf.session("s", store=store) as s:
            inject_fault(s, "c", 2)
            with pytest.raises(af.ExecutorFailed):
                s.run(1)
            got = s.run(5).outputs
    assert got == expected


@pytest.mark.timeout(30)
def test_without_snapshots_a_failed_superstep_breaks_the_session_until_reset() -> None:
    """Without store or restart policy a failed superstep makes the session refuse runs (SessionBroken) until reset()."""
    with _two_branches() as wf:
        fresh = wf.run(5).outputs
        with wf.session("s") as s:
            inject_fault(s, "c", 2)
            with pytest.raises(af.ExecutorFailed):
                s.run(1)
            with pytest.raises(af.SessionBroken, match="reset"):
                s.run(5)
            s.reset()
            assert s.run(5).outputs == fresh


@pytest.mark.timeout(30)
def test_a_failed_superstep_routes_none_of_its_sends() -> None:
    """The superstep that failed delivered nothing: ``z`` never saw a value in the failed run."""
    with _two_branches() as wf, wf.session() as s:
        inject_fault(s, "c", 2)
        outcome = run_to_idle(s, 1)
    assert isinstance(outcome.error, af.ExecutorFailed)
    events = outcome.events
    invoked = {e.executor for e in events if isinstance(e, af.ExecutorInvokedEvent)}
    assert invoked == {"src", "a", "c"}
    assert [e.value for e in events if isinstance(e, af.OutputEvent)] == [["src", [1]]]


# --- close and exit ---------------------------------------------------------------------------


def _new_threads(before: set[threading.Thread]) -> list[str]:
    deadline = time.monotonic() + 5
    leftover = [t for t in threading.enumerate() if t not in before]
    for thread in leftover:
        thread.join(timeout=max(deadline - time.monotonic(), 0))
    return [t.name for t in leftover if t.is_alive()]


@pytest.mark.timeout(30)
def test_close_leaves_no_actor_thread() -> None:
    """Sessions that ran (and one closed mid-run from another thread) leave no thread after close()."""
    before = set(threading.enumerate())
    gate = Gate()
    graphs.HOOK = gate
    try:
        case = graphs.build("fan_burst", 3, 2)
        with case.workflow as wf:
            for k in range(3):
                with wf.session(store=af.MemoryStore()) as s:
                    s.run(k)
            gate.superstep = 2
            busy = wf.session()
            thread, box = in_thread(busy.run, 1)
            gate.wait_entered()
            closer, closed = in_thread(busy.close)  # waits for the run to stop at a barrier
            gate.release.set()
            assert joined(thread, box).status is af.RunStatus.CANCELLED
            joined(closer, closed)
            with pytest.raises(af.SessionClosed):
                busy.run(1)
    finally:
        gate.release.set()
        graphs.HOOK = None
    assert _new_threads(before) == []


@pytest.mark.timeout(60)
def test_interpreter_exit_never_hangs_with_sessions_left_open(tmp_path: Path) -> None:
    """A process that leaves sessions open (one idle, one mid-run, one blocked in a handler) exits."""
    code = f"""
import sys, threading
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import graphs
import actorflow as af

case = graphs.build("ring", 3, 50)
idle = case.workflow.session("idle", store=af.SQLiteStore({str(tmp_path / "s.db")!r}))
idle.run(case.input)
streaming = case.workflow.session("streaming")
events = streaming.stream(case.input)
next(events)
blocked = graphs.build("ring", 3, 50)
graphs.HOOK = lambda executor, superstep: superstep == 2 and threading.Event().wait()
stuck = blocked.workflow.session("stuck")
stuck_events = stuck.stream(blocked.input)
next(stuck_events)
print("leaving")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "leaving"


@pytest.mark.timeout(60)
def test_interpreter_exit_does_not_wait_for_a_stream_blocked_in_a_handler() -> None:
    """A stream left blocked in a handler is collected at exit without its 30 s abandon wait.

    Deterministic form of the test above, whose outcome depended on timing: there,
    a handler already blocked in the ``__main__`` lambda keeps the main module's
    globals (and so the iterators) alive until the runtime's modules are torn down,
    and the iterators' ``finally`` fails without waiting; a child that left before
    that handler was reached had its iterators collected while those modules still
    worked, and each waited 30 s for an answer no daemon thread could give. Here
    the hook lives in ``graphs`` and the child leaves once the handler is blocked.
    """
    code = f"""
import faulthandler, sys, threading
faulthandler.dump_traceback_later(15, exit=True)  # a hang fails with its stack, well before 30 s
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import graphs
entered = threading.Event()
graphs.HOOK = graphs.hang_at(2, entered)
blocked = graphs.build("ring", 3, 50)
stuck = blocked.workflow.session("stuck")
stuck_events = stuck.stream(blocked.input)
next(stuck_events)
assert entered.wait(30)
print("leaving")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "leaving"


@pytest.mark.timeout(30)
def test_cancel_during_a_restart_backoff_ends_the_run_cancelled() -> None:
    """cancel() during a restart backoff ends the run CANCELLED (no exception); a later run() finishes it as if uninterrupted."""
    expected, expected_states = uninterrupted("ring", 3, 4)
    policy = af.RestartPolicy(max_restarts=3, backoff=af.Backoff(initial=WAIT))
    case = graphs.build("ring", 3, 4, restart=policy)
    store = af.MemoryStore()
    with case.workflow as wf, wf.session("s", store=store) as s:
        inject_fault(s, "r1", 5)
        events: list[af.Event] = []
        error: BaseException | None = None
        try:
            for event in s.stream(case.input):
                events.append(event)
                if isinstance(event, af.ExecutorFailedEvent):
                    s.cancel()  # the supervisor now waits out the backoff before restarting
        except af.ActorflowError as exc:
            error = exc
        rest = s.run()
    outputs = [e.value for e in events if isinstance(e, af.OutputEvent)]
    assert outputs + rest.outputs == expected
    assert states_of(store, "s") == expected_states
    assert error is None
    assert isinstance(events[-1], af.RunCancelledEvent)
