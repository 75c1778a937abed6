"""W2 and W2-io: fan-out to 8 workers and fan-in to an aggregator, three supersteps per run.

W2: source -> 8 workers (worker i sends i * 2) -> fan-in aggregator, which outputs
the sum (56) in one invocation. Metric: runs/s over 200 runs (after a warm-up),
against 8 bare pykka actors asked at once and gathered, per run. Target: >= 0.9x.
Reported beside it (``details``): the same shape on bare actors, three rounds a run
(one ask, eight at once, one ask: :class:`ThreeRounds`), and the ratio to it.

W2-io: the same, every worker blocking 20 ms in its handler (the I/O stand-in).
Metric: median latency per run over ~30 runs, against 8 bare pykka actors that
each block 20 ms, asked in parallel. Target: <= 1.15x.

Run: ``python -m bench.w2 [--quick]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Never

import actorflow as af
from bench._common import (
    GatherFloor,
    alternate,
    alternate_all,
    median,
    parse_options,
    report,
    time_call,
)

WIDTH = 8
EXPECTED = sum(i * 2 for i in range(WIDTH))
IO_DELAY = 0.02


class Source(af.Executor):
    """Sends its input to every worker."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n)


class Worker(af.Executor):
    """Worker i sends i * 2 (after blocking ``delay`` seconds, for W2-io)."""

    def __init__(self, id: str, index: int, delay: float = 0.0) -> None:
        super().__init__(id)
        self.index = index
        self.delay = delay

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        if self.delay:
            time.sleep(self.delay)  # the workload: a blocking call
        ctx.send(self.index * 2)


class Aggregate(af.Executor):
    """Outputs the sum of the fan-in list."""

    @af.handler
    def on_all(self, values: list[int], ctx: af.Context[Never]) -> None:
        ctx.output(sum(values))


def build(
    width: int = WIDTH,
    delay: float = 0.0,
    name: str = "w2",
    backend: af.ActorBackend | None = None,
) -> af.Workflow:
    """source -> ``width`` workers -> fan-in aggregator (hosted on ``backend``)."""
    workers = [Worker(f"w{i}", i, delay) for i in range(width)]
    builder = af.WorkflowBuilder(name, start=Source("src"))
    builder.add_fan_out("src", workers)
    builder.add_fan_in([w.id for w in workers], Aggregate("agg"))
    return builder.build(backend=backend)


def check(result: af.RunResult, expected: int) -> None:
    """Raise unless the run produced exactly ``[expected]`` in three supersteps."""
    if result.outputs != [expected] or result.supersteps != 3:
        raise AssertionError(
            f"expected [{expected}] in 3 supersteps, got {result.outputs} in {result.supersteps}"
        )


class ThreeRounds:
    """W2's shape on bare actors: one asked, then ``width`` at once, then one: the
    three supersteps of a run with nothing of a workflow around them. Reported beside
    the target's floor (one round), which a run of three supersteps, each a round of
    hand-offs between threads, cannot reach by construction."""

    def __init__(self, width: int = WIDTH) -> None:
        self._rounds = (GatherFloor(1), GatherFloor(width), GatherFloor(1))

    def __enter__(self) -> ThreeRounds:
        for one in self._rounds:
            one.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for one in self._rounds:
            one.__exit__()

    def rate(self, runs: int) -> float:
        """Runs/s over ``runs`` runs of three rounds."""

        def batch() -> None:
            for _ in range(runs):
                for one in self._rounds:
                    one.run_once()

        return runs / time_call(batch)


def bench_w2(quick: bool) -> None:
    """Measure W2 (runs/s over batches of runs) against the gather floor."""
    runs = 50 if quick else 200
    repeats = 2 if quick else 5
    with build() as wf, GatherFloor(WIDTH) as floor, ThreeRounds() as shaped:

        def batch() -> float:
            def go() -> None:
                for _ in range(runs):
                    check(wf.run(1), EXPECTED)

            return runs / time_call(go)

        floors, three_rounds, rates = alternate_all(
            [lambda: floor.rate(runs), lambda: shaped.rate(runs), batch], repeats
        )
    rate, floor_rate = median(rates), median(floors)
    report(
        "w2",
        "runs_per_s",
        rate,
        "runs/s",
        floor=floor_rate,
        floor_unit="runs/s",
        floor_name=f"{WIDTH} bare pykka actors asked at once, then get all",
        target_op=">=",
        target_value=0.9,
        samples=rates,
        quick=quick,
        floor_samples=floors,
        runs_per_sample=runs,
        ms_per_run=1e3 / rate,
        floor_ms_per_run=1e3 / floor_rate,
        three_round_floor_per_s=median(three_rounds),
        three_round_floor_samples=three_rounds,
        ratio_vs_three_round_floor=round(rate / median(three_rounds), 4),
    )


def bench_w2_io(quick: bool) -> None:
    """Measure W2-io (median latency per run) against bare actors blocking in parallel."""
    runs = 8 if quick else 30
    with build(delay=IO_DELAY, name="w2-io") as wf, GatherFloor(WIDTH, delay=IO_DELAY) as floor:

        def one() -> float:
            started = time.perf_counter()
            result = wf.run(1)
            elapsed = time.perf_counter() - started
            check(result, EXPECTED)
            return elapsed

        floors, latencies = alternate(floor.latency, one, runs)
    latency, floor_latency = median(latencies), median(floors)
    report(
        "w2_io",
        "latency_ms",
        latency * 1e3,
        "ms",
        floor=floor_latency * 1e3,
        floor_unit="ms",
        floor_name=f"{WIDTH} bare pykka actors each blocking {IO_DELAY * 1e3:g} ms, asked at once",
        target_op="<=",
        target_value=1.15,
        samples=[s * 1e3 for s in latencies],
        quick=quick,
        floor_samples=[s * 1e3 for s in floors],
        overhead_ms=(latency - floor_latency) * 1e3,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run W2 then W2-io."""
    options = parse_options(__doc__ or "", argv)
    bench_w2(options.quick)
    bench_w2_io(options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
