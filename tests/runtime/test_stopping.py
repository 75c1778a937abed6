"""A run stops when asked, whatever its handlers do.

Each test hangs a handler for good (it returns only when the test has finished,
so no thread outlives the test) and then asks the run to stop: Ctrl-C (a real
SIGINT sent to a child process), a cancelled task, ``cancel()``, ``close()``,
leaving a stream early. The stop must come back within ``STOP_WAIT`` (under a
second), leaving the session at its last barrier or broken with a clear error.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

import actorflow as af
from tests.support import ROOT, Closeable
from tests.support.signals import CHILD_PRELUDE, sigint_ignored

BOUND = 10.0
"""Seconds any waiting in these tests is bounded by (far above STOP_WAIT, far below the
30 s the old abandon wait took)."""

ENTERED = threading.Event()
RELEASE = threading.Event()
HANG_ON = 13
_hung_once: list[int] = []


class Total(af.Executor):
    """Adds every number to a running total and outputs it; hangs, once, on ``HANG_ON``."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.total = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        if n == HANG_ON and not _hung_once:
            _hung_once.append(n)
            ENTERED.set()
            RELEASE.wait()  # never returns while the test runs: released at teardown
        self.total += n
        ctx.output(self.total)


@pytest.fixture
def hang() -> Iterator[None]:
    """Arm the one-shot hang; release the abandoned handler once the test is over."""
    ENTERED.clear()
    RELEASE.clear()
    _hung_once.clear()
    yield
    RELEASE.set()


def _workflow(name: str) -> af.Workflow:
    return af.WorkflowBuilder(name, start=Total("t")).build()


def _in_thread(target: object) -> tuple[threading.Thread, dict[str, object]]:
    box: dict[str, object] = {}

    def main() -> None:
        try:
            box["value"] = target()  # type: ignore[operator]
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=main)
    thread.start()
    return thread, box


@pytest.mark.usefixtures("hang")
def test_cancel_stops_a_run_whose_handler_never_returns_and_the_session_resumes() -> None:
    """cancel() ends a run hung in a handler as CANCELLED; the session stays at its last
    barrier, and a later run() delivers the interrupted message again."""
    store = af.MemoryStore()
    with _workflow("cancel-hung") as wf, wf.session("s", store=store) as s:
        assert s.run(1).outputs == [1]
        thread, box = _in_thread(lambda: s.run(HANG_ON))
        assert ENTERED.wait(BOUND)
        s.cancel()
        thread.join(BOUND)
        assert not thread.is_alive(), "cancel() did not stop a run hung in a handler"
        result = box["value"]
        assert isinstance(result, af.RunResult)
        assert result.status is af.RunStatus.CANCELLED
        assert result.outputs == []
        continued = s.run()
        assert continued.outputs == [1 + HANG_ON]


@pytest.mark.usefixtures("hang")
def test_without_snapshots_an_interrupted_superstep_breaks_the_session_clearly() -> None:
    """No store and no restart policy: the state before the hung superstep is unknown, so
    the session refuses later runs with SessionBroken naming the cancel and the fix."""
    with _workflow("broken-hung") as wf, wf.session("s") as s:
        thread, box = _in_thread(lambda: s.run(HANG_ON))
        assert ENTERED.wait(BOUND)
        s.cancel()
        thread.join(BOUND)
        assert not thread.is_alive()
        assert box["value"].status is af.RunStatus.CANCELLED  # type: ignore[attr-defined]
        with pytest.raises(af.SessionBroken, match=r"interrupted by a cancel.*reset\(\)"):
            s.run(1)
        s.reset()
        assert s.run(2).outputs == [2]


@pytest.mark.usefixtures("hang")
def test_close_returns_while_a_handler_never_returns() -> None:
    """close() from another thread stops a hung run and returns; the run's caller gets
    its result (CANCELLED) and the session refuses further runs."""
    wf = _workflow("close-hung")
    s = wf.session("s", store=af.MemoryStore())
    thread, box = _in_thread(lambda: s.run(HANG_ON))
    assert ENTERED.wait(BOUND)
    closer, closed = _in_thread(s.close)
    closer.join(BOUND)
    assert not closer.is_alive(), "close() did not return"
    assert "error" not in closed
    thread.join(BOUND)
    assert not thread.is_alive()
    assert box["value"].status is af.RunStatus.CANCELLED  # type: ignore[attr-defined]
    with pytest.raises(af.SessionClosed):
        s.run(1)
    wf.close()


@pytest.mark.usefixtures("hang")
def test_leaving_a_stream_early_returns_and_frees_the_session() -> None:
    """Closing a stream whose run is hung returns, and the session takes the next call."""
    with _workflow("stream-hung") as wf, wf.session("s", store=af.MemoryStore()) as s:
        events = s.stream(HANG_ON)
        assert isinstance(events, Closeable)
        assert isinstance(next(events), af.RunStartedEvent)
        assert ENTERED.wait(BOUND)
        closer, _ = _in_thread(events.close)
        closer.join(BOUND)
        assert not closer.is_alive(), "closing the stream did not return"
        assert s.run().outputs == [HANG_ON]


@pytest.mark.usefixtures("hang")
def test_closing_a_stream_before_its_first_event_stops_the_run() -> None:
    """A stream closed before anything was read still stops its (hung) run."""
    with _workflow("stream-unread") as wf, wf.session("s", store=af.MemoryStore()) as s:
        events = s.stream(HANG_ON)
        assert isinstance(events, Closeable)
        assert ENTERED.wait(BOUND)
        closer, _ = _in_thread(events.close)
        closer.join(BOUND)
        assert not closer.is_alive(), "closing the unread stream did not return"
        assert list(events) == []
        assert s.run().outputs == [HANG_ON]


@pytest.mark.usefixtures("hang")
def test_an_asyncio_timeout_bounds_a_run_whose_handler_never_returns() -> None:
    """asyncio.wait_for(arun(...)) raises TimeoutError (the task is cancelled, the run
    stopped); the session then continues from its last barrier."""

    async def scenario() -> list[object]:
        async with _workflow("wait-for") as wf, wf.session("s", store=af.MemoryStore()) as s:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(s.arun(HANG_ON), 0.2)
            return (await s.arun()).outputs

    assert asyncio.run(asyncio.wait_for(scenario(), BOUND)) == [HANG_ON]


@pytest.mark.usefixtures("hang")
def test_cancelling_the_task_of_a_one_off_arun_stops_it() -> None:
    """Cancelling the task awaiting wf.arun() stops a hung run: the task ends cancelled."""

    async def scenario() -> None:
        async with _workflow("task-cancel") as wf:
            task = asyncio.create_task(wf.arun(HANG_ON))
            await asyncio.to_thread(ENTERED.wait, BOUND)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await wf.arun(2)).outputs == [2]

    asyncio.run(asyncio.wait_for(scenario(), BOUND))


@pytest.mark.usefixtures("hang")
def test_astream_aclose_frees_the_session_at_once() -> None:
    """After ``await it.aclose()`` the session takes reset() and run() at once (no
    SessionBusy until the loop happens to collect an inner generator)."""

    async def scenario() -> list[object]:
        async with _workflow("aclose") as wf, wf.session("s", store=af.MemoryStore()) as s:
            events = s.astream(HANG_ON)
            assert isinstance(await anext(events), af.RunStartedEvent)
            await asyncio.to_thread(ENTERED.wait, BOUND)
            await events.aclose()
            s.reset()
            return (await s.arun(5)).outputs

    assert asyncio.run(asyncio.wait_for(scenario(), BOUND)) == [5]


@pytest.mark.usefixtures("hang")
def test_cancelling_the_task_consuming_an_astream_stops_the_run() -> None:
    """A task iterating astream over a hung run is cancelled: it ends, the session is free."""

    async def scenario() -> list[object]:
        async with _workflow("astream-cancel") as wf, wf.session("s", store=af.MemoryStore()) as s:

            async def consume() -> None:
                async for _ in s.astream(HANG_ON):
                    pass

            task = asyncio.create_task(consume())
            await asyncio.to_thread(ENTERED.wait, BOUND)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return (await s.arun()).outputs

    assert asyncio.run(asyncio.wait_for(scenario(), BOUND)) == [HANG_ON]


def test_astream_aclose_after_a_finished_event_frees_the_session() -> None:
    """Leaving an astream after its first event (the run still going) frees the session
    as soon as aclose() returns."""

    async def scenario() -> list[object]:
        async with _workflow("aclose-ok") as wf, wf.session("s") as s:
            events = s.astream(4)
            await anext(events)
            await events.aclose()
            s.reset()
            return (await s.arun(6)).outputs

    assert asyncio.run(asyncio.wait_for(scenario(), BOUND)) == [6]


# --- Ctrl-C: a real SIGINT sent to a child process --------------------------------

_CHILD = (
    CHILD_PRELUDE
    + """
import asyncio, sys, threading, time
import actorflow as af
import tests.runtime.test_stopping as t

mode = sys.argv[1]
wf = af.WorkflowBuilder("ctrl-c", start=t.Total("t")).build()
t.ENTERED.clear()
threading.Thread(
    target=lambda: (t.ENTERED.wait(30), print("ENTERED", flush=True)), daemon=True
).start()
interrupted = []
try:
    if mode == "run":
        wf.run(t.HANG_ON)
    elif mode == "session":
        with wf.session("s", store=af.MemoryStore()) as s:
            s.run(t.HANG_ON)
    elif mode == "stream":
        for event in wf.stream(t.HANG_ON):
            pass
    elif mode == "arun":
        asyncio.run(wf.arun(t.HANG_ON))
except KeyboardInterrupt:
    print("STOPPED", flush=True)
    raise
"""
)


def _interrupt(mode: str) -> subprocess.CompletedProcess[str]:
    """Start a child whose run hangs in a handler, send it one SIGINT, wait for its exit."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,  # `-c` code imports the tests package from its working folder
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until the handler is entered
        assert line.strip() == "ENTERED", child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=BOUND)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return subprocess.CompletedProcess(child.args, child.returncode, line + out, err)


@pytest.mark.parametrize("mode", ["run", "session", "stream", "arun"])
def test_one_ctrl_c_stops_a_run_hung_in_a_handler_and_the_process_exits(mode: str) -> None:
    """One SIGINT while a handler never returns: the call raises KeyboardInterrupt and the
    process exits (no second Ctrl-C, no 30 s wait)."""
    done = _interrupt(mode)
    assert "STOPPED" in done.stdout, done.stderr
    assert "KeyboardInterrupt" in done.stderr
    assert done.returncode != 0


def test_ctrl_c_reaches_the_child_when_the_tests_run_with_sigint_ignored() -> None:
    """Run as ``nohup make test &``, this process ignores SIGINT and its children
    inherit that; the child installs Python's handler itself, so one SIGINT still
    stops its run."""
    with sigint_ignored():
        done = _interrupt("run")
    assert "STOPPED" in done.stdout, done.stderr
    assert "KeyboardInterrupt" in done.stderr
