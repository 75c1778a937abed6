"""The async API never blocks the caller's event loop."""

from __future__ import annotations

import _thread
import asyncio
import threading
import time
from typing import Any

import pytest

import actorflow as af
from tests.support.signals import sigint_handled


class Blocker(af.Executor):
    """Blocks its own actor for 200 ms (a blocking client call), then outputs."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        time.sleep(0.2)  # the workload: a handler that blocks, not a synchronization
        ctx.output(n)


async def _largest_tick_gap(work: asyncio.Future[object] | asyncio.Task[object]) -> float:
    """Tick every 10 ms until ``work`` is done; return the largest gap between ticks."""
    loop = asyncio.get_running_loop()
    last = loop.time()
    gap = 0.0
    while not work.done():
        await asyncio.sleep(0.01)
        now = loop.time()
        gap, last = max(gap, now - last), now
    return gap


@pytest.mark.timeout(30)
def test_arun_keeps_a_ticking_coroutine_ticking_while_a_handler_blocks() -> None:
    """While a handler blocks its actor for 200 ms, a coroutine on the caller's loop keeps ticking."""

    async def scenario() -> tuple[float, list[object]]:
        with af.WorkflowBuilder("block", start=Blocker("b")).build() as wf:
            run = asyncio.ensure_future(wf.arun(7))
            gap = await _largest_tick_gap(run)
            return gap, (await run).outputs

    gap, outputs = asyncio.run(scenario())
    assert outputs == [7]
    assert gap < 0.1, f"the event loop stalled for {gap:.3f} s"


@pytest.mark.timeout(30)
def test_astream_yields_events_without_blocking_the_loop() -> None:
    """astream delivers every event while the loop stays responsive."""

    async def scenario() -> tuple[float, list[str]]:
        with af.WorkflowBuilder("block2", start=Blocker("b")).build() as wf:

            async def collect() -> list[str]:
                return [type(e).__name__ async for e in wf.astream(3)]

            task: asyncio.Task[list[str]] = asyncio.create_task(collect())
            gap = await _largest_tick_gap(task)
            return gap, await task

    gap, kinds = asyncio.run(scenario())
    assert kinds[0] == "RunStartedEvent" and kinds[-1] == "RunCompletedEvent"
    assert "OutputEvent" in kinds
    assert gap < 0.1, f"the event loop stalled for {gap:.3f} s"


class Fails(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        raise ValueError(f"no {n}")


@pytest.mark.timeout(30)
def test_arun_raises_the_runs_failure() -> None:
    """A failed run raises ExecutorFailed from the awaited arun, cause chained."""

    async def scenario() -> None:
        with af.WorkflowBuilder("fails", start=Fails("f")).build() as wf:
            await wf.arun(1)

    with pytest.raises(af.ExecutorFailed) as info:
        asyncio.run(scenario())
    assert isinstance(info.value.__cause__, ValueError)


ENTERED = threading.Event()
RELEASE = threading.Event()


class Holds(af.Executor):
    """Signals that it started, then waits (bounded) for the test to release it."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ENTERED.set()
        RELEASE.wait(10)
        ctx.output(n)


@pytest.mark.timeout(30)
def test_keyboard_interrupt_during_run_stops_the_run_and_leaks_nothing() -> None:
    """Ctrl-C in the caller while a handler runs: run() raises KeyboardInterrupt, the run is
    cancelled at the next barrier, the workflow stays usable, and no actor thread is left."""
    ENTERED.clear()
    RELEASE.clear()

    def interrupt() -> None:
        assert ENTERED.wait(10)
        _thread.interrupt_main()
        RELEASE.set()

    # interrupt_main() does nothing while SIGINT is ignored (``nohup make test &``).
    with af.WorkflowBuilder("ctrl-c", start=Holds("h")).build() as wf, sigint_handled():
        helper = threading.Thread(target=interrupt)
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            wf.run(1)
        helper.join(10)
        assert wf.run(2).outputs == [2]
