"""Sessions: state across runs, one thing at a time, many at once, cancel, close
(reset and failed supersteps: ``test_session_reset``).

Runs are held open at a chosen superstep by ``graphs.HOOK`` blocking on a
threading.Event the test controls (bounded waits everywhere, never a sleep).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.testing import inject_fault
from tests.support import ROOT, graphs
from tests.support.held_runs import WAIT, Gate, in_thread, joined, states_of, uninterrupted

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
import threading
from tests.support import graphs
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
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,  # `-c` code imports tests.support from its working folder
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
    code = """
import faulthandler, threading
faulthandler.dump_traceback_later(15, exit=True)  # a hang fails with its stack, well before 30 s
from tests.support import graphs
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
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,  # `-c` code imports tests.support from its working folder
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
