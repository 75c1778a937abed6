"""Beside a busy thread: W1 while another thread of the process computes in Python.

A service runs more than workflows: a handler of another session that computes, a
web framework's worker, a parser. Such a thread holds the GIL until the interpreter
makes it let go, every ``sys.getswitchinterval()`` seconds (5 ms by default). A
thread that blocked (a host waiting for its next batch, a supervisor waiting at
its barrier) and is woken must wait for that, so every thread hand-off of a
superstep can cost up to one interval: the convoy effect. Hosts that are Ray
processes do not share the GIL and do not pay it.

Workload: W1 (``bench.w1``) started at n = 950, so a run is its last 101
supersteps (one executor each), while one thread runs ``sum(range(1000))`` in a
loop. Floor: the tell floor (two bare pykka actors passing a msgpack payload on with ``tell``) beside the same
busy thread, sampled in turn. Two figures: at the default switch interval, and at
0.5 ms (``sys.setswitchinterval(0.0005)``, a process-wide setting an application
may choose; the library never changes it). Target: W1's, >= 0.6x the floor.
Each record's details give the time a superstep takes and, for the short interval,
how many times faster than at the default one, and the busy thread's own work
rate (loop iterations/s) while the workflow ran beside it: what the workflow's
more frequent turns took from it.

Run: ``python -m bench.busy_thread [--quick]`` (``--quick``: runs of 21 supersteps, 2 samples).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import actorflow as af
from bench._common import TellFloor, alternate, median, parse_options, report
from bench.w1 import LIMIT, build_w1

SUPERSTEPS = 101
"""Supersteps a run takes (21 with ``--quick``): W1 started near its end."""
SHORT_INTERVAL = 0.0005
"""The switch interval of the second figure, seconds."""


class Busy:
    """One thread computing in Python until stopped; counts its loop iterations."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="busy", daemon=True)
        self.iterations = 0
        self.seconds = 0.0

    def _work(self) -> None:
        started = time.perf_counter()
        n = 0
        while not self._stop.is_set():
            sum(range(1000))
            n += 1
        self.iterations, self.seconds = n, time.perf_counter() - started

    def __enter__(self) -> Busy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def rate(self) -> float:
        """Loop iterations/s over the thread's life."""
        return self.iterations / self.seconds if self.seconds else 0.0


@contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    """Run the block with the GIL switch interval set to ``seconds``, then restore it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def measure(
    wf: af.Workflow, interval: float, repeats: int, supersteps: int
) -> tuple[list[float], list[float], float]:
    """(floor hops/s samples, W1 supersteps/s samples, busy thread iterations/s) at
    ``interval``, each run the last ``supersteps`` of W1."""
    start = LIMIT - supersteps // 2

    def one() -> float:
        started = time.perf_counter()
        result = wf.run(start)
        elapsed = time.perf_counter() - started
        if result.outputs != [LIMIT] or result.supersteps != supersteps:
            raise AssertionError(f"W1 gave {result.outputs} in {result.supersteps} supersteps")
        return supersteps / elapsed

    with switch_interval(interval), TellFloor(hops=supersteps) as tell, Busy() as busy:
        floors, rates = alternate(tell.sample, one, repeats, warmup=1, warmup_s=0.0)
    return floors, rates, busy.rate


def bench_busy_thread(quick: bool) -> None:
    """W1 beside a busy thread at the default switch interval and at a short one."""
    repeats, supersteps = (2, 21) if quick else (7, SUPERSTEPS)
    default = sys.getswitchinterval()
    with build_w1() as wf:
        results = {
            interval: measure(wf, interval, repeats, supersteps)
            for interval in (default, SHORT_INTERVAL)
        }
    slow = median(results[default][1])
    for name, interval in (("busy_w1", default), ("busy_w1_short_interval", SHORT_INTERVAL)):
        floors, rates, busy_rate = results[interval]
        rate = median(rates)
        report(
            name,
            "supersteps_per_s",
            rate,
            "supersteps/s",
            floor=median(floors),
            floor_unit="hops/s",
            floor_name="the tell floor beside the same busy thread",
            target_op=">=",
            target_value=0.6,
            samples=rates,
            quick=quick,
            floor_samples=floors,
            switch_interval_ms=interval * 1e3,
            us_per_superstep=1e6 / rate,
            times_faster_than_default_interval=rate / slow,
            busy_thread_iterations_per_s=busy_rate,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the busy-thread benchmark."""
    options = parse_options(__doc__ or "", argv)
    bench_busy_thread(options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
