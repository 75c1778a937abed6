"""Stop time: how long one Ctrl-C takes to end a process whose run hangs in a handler.

A child process starts a run whose only handler never returns (no ``timeout=``):
``wf.run``, ``for e in wf.stream(...)`` or ``asyncio.run(wf.arun(...))``. Once
the handler is entered, the parent sends one SIGINT and measures the time until
the child has exited. Floor: the same for a child blocked in
``threading.Event().wait()`` with no actorflow run (interpreter exit alone).
Target: <= 1,000 ms (the run stops within a second, on the first Ctrl-C).

Run: ``python -m bench.stop_time [--quick]``.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench._common import parse_options, report

ROOT = Path(__file__).resolve().parent.parent

# The child installs Python's SIGINT handler itself: started from a shell's background
# job (``nohup ... &``), it would inherit SIGINT ignored and never see the Ctrl-C.
_CHILD = """
import signal; signal.signal(signal.SIGINT, signal.default_int_handler)
import asyncio, sys, threading
import actorflow as af

entered = threading.Event()

class Hangs(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        entered.set()
        threading.Event().wait()

mode = sys.argv[1]
threading.Thread(
    target=lambda: (entered.wait(30), print("ENTERED", flush=True)), daemon=True
).start()
if mode == "floor":
    entered.set()
    threading.Event().wait(30)
wf = af.WorkflowBuilder("stop", start=Hangs("h")).build()
if mode == "run":
    wf.run(1)
elif mode == "stream":
    for event in wf.stream(1):
        pass
elif mode == "arun":
    asyncio.run(wf.arun(1))
"""


def stop_once(mode: str) -> float:
    """Seconds from the SIGINT to the child's exit."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ENTERED":
            raise RuntimeError(f"the {mode} child never entered its handler")
        started = time.perf_counter()
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
        return time.perf_counter() - started
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def bench_stop_time(quick: bool) -> None:
    """Measure each mode's stop time against the floor."""
    repeats = 1 if quick else 5
    floors = [stop_once("floor") for _ in range(repeats)]
    floor = statistics.median(floors)
    for mode in ("run", "stream", "arun"):
        samples = [stop_once(mode) for _ in range(repeats)]
        report(
            f"stop_{mode}",
            "ctrl_c_to_exit_ms",
            statistics.median(samples) * 1e3,
            "ms",
            floor=floor * 1e3,
            floor_unit="ms",
            floor_name="a child blocked in Event.wait() with no run, interrupted the same way",
            target_op="<=",
            target_value=1000.0,
            target_on="value",
            samples=[s * 1e3 for s in samples],
            quick=quick,
            floor_samples=[s * 1e3 for s in floors],
            worst_ms=max(samples) * 1e3,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stop-time benchmark."""
    options = parse_options(__doc__ or "", argv)
    bench_stop_time(options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
