"""W1 and W1-1MB: two executors in a cycle, one message in flight, one executor per superstep.

W1: A gets 0; A receiving n >= 1000 outputs n, otherwise sends n to B; B sends n + 1
to A. One run is 2001 supersteps. Metric: supersteps/s (median of 5 runs after a
warm-up) against the tell floor (hops/s of two bare pykka actors passing a small
msgpack payload on with ``tell``, each decoding and re-encoding it: one thread
hand-off a hop, the limit for one thread per actor). Target: >= 0.6x. The ask floor
(asks/s of a bare actor asked in a row) is sampled in turn too, a detail.

W1 sustained: the same W1 samples against the tell floor's ring kept going for as
long as the W1 run before it took. On a small VM the kernel keeps two threads that
hand work back and forth on one CPU while they have been little busy, and spreads
them once they have been busy a while: 2001 hops (~30 ms) stay in the first regime,
a W1 run (~200 ms) spends most of its time in the second (bench/README.md, "W1:
the floor's two regimes"). Target: >= 0.6x.

W1-1MB: the same cycle up to n = 50 (101 supersteps), every message carrying a
~1 MB list of 10,000 dicts. Metric: supersteps/s and MB/s against the codec floor
(``msgpack.packb`` + ``msgpack.unpackb`` of the payload: the per-superstep work of
one executor decoding its message and encoding the next). Target: >= 0.8x.

Run: ``python -m bench.w1 [--quick]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

import actorflow as af
from bench._common import (
    AskFloor,
    TellFloor,
    alternate,
    alternate_all,
    codec_roundtrip,
    make_items,
    median,
    parse_options,
    report,
)

LIMIT = 1000
"""W1: A outputs once n reaches this (2 * LIMIT + 1 supersteps per run)."""
BIG_LIMIT = 50
"""W1-1MB: the same, with the payload (2 * BIG_LIMIT + 1 supersteps per run)."""
ITEMS = 10_000


class A(af.Executor):
    """Outputs n once it reaches ``LIMIT``, else passes it to B."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        if n >= LIMIT:
            ctx.output(n)
        else:
            ctx.send(n)


class B(af.Executor):
    """Sends n + 1 back to A."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n + 1)


@af.message
@dataclass
class Big:
    """W1-1MB's message: the counter and a ~1 MB payload."""

    n: int
    items: list[dict[str, Any]]


class BigA(af.Executor):
    """Outputs n once it reaches ``BIG_LIMIT``, else passes the whole message to BigB."""

    @af.handler
    def on_big(self, msg: Big, ctx: af.Context[Big]) -> None:
        if msg.n >= BIG_LIMIT:
            ctx.output(msg.n)
        else:
            ctx.send(msg)


class BigB(af.Executor):
    """Increments n and sends the whole message back to BigA."""

    @af.handler
    def on_big(self, msg: Big, ctx: af.Context[Big]) -> None:
        msg.n += 1
        ctx.send(msg)


def build_w1(backend: af.ActorBackend | None = None) -> af.Workflow:
    """The W1 cycle (hosted on ``backend``)."""
    builder = af.WorkflowBuilder("w1", start=A("a"), max_supersteps=5000)
    builder.add_edge("a", B("b")).add_edge("b", "a")
    return builder.build(backend=backend)


def build_w1_big() -> af.Workflow:
    """The W1-1MB cycle."""
    builder = af.WorkflowBuilder("w1-1mb", start=BigA("a"), max_supersteps=5000)
    builder.add_edge("a", BigB("b")).add_edge("b", "a")
    return builder.build()


def bench_w1(quick: bool) -> None:
    """Measure W1 against the tell floor and the ask floor (all sampled in turn)."""
    repeats = 3 if quick else 5
    steps: list[int] = []
    took: list[float] = []
    with (
        build_w1() as wf,
        TellFloor(hops=2001) as tell,
        TellFloor(hops=2001) as sustained,
        AskFloor(asks=2001) as ask,
    ):

        def one() -> float:
            started = time.perf_counter()
            result = wf.run(0)
            elapsed = time.perf_counter() - started
            if result.outputs != [LIMIT]:
                raise AssertionError(f"W1 produced {result.outputs}, expected [{LIMIT}]")
            steps.append(result.supersteps)
            took.append(elapsed)
            return result.supersteps / elapsed

        def as_long() -> float:
            return sustained.sample_for(took[-1])  # as long as the W1 run just before

        tells, asks, rates, longs = alternate_all([tell.sample, ask.sample, one, as_long], repeats)
    rate, tell_rate, ask_rate, long_rate = median(rates), median(tells), median(asks), median(longs)
    common: dict[str, Any] = {
        "target_op": ">=",
        "target_value": 0.6,
        "samples": rates,
        "quick": quick,
        "us_per_superstep": 1e6 / rate,
    }
    report(
        "w1",
        "supersteps_per_s",
        rate,
        "supersteps/s",
        floor=tell_rate,
        floor_unit="hops/s",
        floor_name="two bare pykka actors passing a msgpack payload on with tell (one hand-off a hop)",
        floor_samples=tells,
        supersteps_per_run=steps[0],
        us_per_hop_floor=1e6 / tell_rate,
        ask_floor_per_s=ask_rate,
        ask_floor_samples=asks,
        ratio_vs_ask_floor=rate / ask_rate,
        **common,
    )
    report(
        "w1_sustained",
        "supersteps_per_s",
        rate,
        "supersteps/s",
        floor=long_rate,
        floor_unit="hops/s",
        floor_name="the tell floor's ring kept going as long as the W1 run sampled before it",
        floor_samples=longs,
        us_per_hop_floor=1e6 / long_rate,
        run_seconds=took[-repeats:],
        **common,
    )


def bench_w1_big(quick: bool) -> None:
    """Measure W1-1MB against the codec floor and print its records (supersteps/s, MB/s)."""
    repeats = 3 if quick else 5
    payload = make_items(ITEMS)
    size = len(msgpack.packb(payload, use_bin_type=True))
    mb = size / 1e6
    steps: list[int] = []
    with build_w1_big() as wf:

        def one() -> float:
            started = time.perf_counter()
            result = wf.run(Big(0, payload))
            elapsed = time.perf_counter() - started
            if result.outputs != [BIG_LIMIT]:
                raise AssertionError(f"W1-1MB produced {result.outputs}, expected [{BIG_LIMIT}]")
            steps.append(result.supersteps)
            return result.supersteps / elapsed

        def codec() -> float:
            return 1 / codec_roundtrip(payload)

        floors, rates = alternate(codec, one, repeats)
    rate, floor_rate = median(rates), median(floors)
    common: dict[str, Any] = {
        "floor_name": "msgpack.packb + msgpack.unpackb of the payload (per superstep)",
        "target_op": ">=",
        "target_value": 0.8,
        "quick": quick,
        "payload_bytes": size,
        "supersteps_per_run": steps[0],
        "ms_per_superstep": 1e3 / rate,
        "floor_ms_per_roundtrip": 1e3 / floor_rate,
    }
    report(
        "w1_1mb",
        "supersteps_per_s",
        rate,
        "supersteps/s",
        floor=floor_rate,
        floor_unit="roundtrips/s",
        samples=rates,
        floor_samples=floors,
        **common,
    )
    report(
        "w1_1mb",
        "mb_per_s",
        rate * mb,
        "MB/s",
        floor=floor_rate * mb,
        floor_unit="MB/s",
        samples=[r * mb for r in rates],
        floor_samples=[f * mb for f in floors],
        **common,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run W1 then W1-1MB."""
    options = parse_options(__doc__ or "", argv)
    bench_w1(options.quick)
    bench_w1_big(options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
