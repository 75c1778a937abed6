"""Loop lag: how long the caller's event loop waits while many sessions run on it.

20 sessions share one asyncio loop; each is opened with ``await wf.asession(...)``
and does 10 short runs (a three-executor chain, checkpointed every superstep) with
``await session.arun(...)``, all at once, once with a ``SQLiteStore`` and once with
a ``MemoryStore``. Meanwhile a ticker task asks to wake every millisecond and
records how late each wake-up is (the loop lag). Figures: p50, p99 and max lag per store, against the same ticker
on an idle loop (the floor). Targets: p99 <= 5 ms, max <= 20 ms. Each record's
``details.with_switchinterval_1ms`` is the same figure measured again with
``sys.setswitchinterval(0.001)`` (the GIL hand-off interval, 5 ms by default).

Run: ``python -m bench.loop_lag [--quick]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import actorflow as af
from bench._common import parse_options, report

SESSIONS = 20
RUNS = 10
TICK = 0.001


class Step(af.Executor):
    """Adds one, keeps a count (state to checkpoint) and passes the number on."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.count = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.count += 1
        ctx.send(n + 1)


class Last(af.Executor):
    """Outputs what it gets."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)


def build() -> af.Workflow:
    """a -> b -> out: three supersteps per run."""
    return (
        af.WorkflowBuilder("loop-lag", start=Step("a"))
        .add_edge("a", Step("b"))
        .add_edge("b", Last("out"))
        .build()
    )


async def _tick(stop: asyncio.Event, lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + TICK
        await asyncio.sleep(TICK)
        lags.append(max(loop.time() - due, 0.0))


async def _session(wf: af.Workflow, sid: str, store: af.CheckpointStore, runs: int) -> None:
    async with await wf.asession(sid, store=store) as s:
        for n in range(runs):
            result = await s.arun(n)
            if result.outputs != [n + 2]:
                raise AssertionError(f"session {sid} run {n}: {result.outputs}")


async def _measure(
    store: af.CheckpointStore | None, sessions: int, runs: int, label: str = "s"
) -> list[float]:
    """Lags (s) of the ticker while the sessions run (or for 0.5 s idle: no store).

    Session ids start with ``label``: each measurement on one store opens new
    sessions (reopening a stored id for writing is refused, see ``SessionExists``).
    """
    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_tick(stop, lags))
    try:
        if store is None:
            await asyncio.sleep(0.5)
        else:
            async with build() as wf:
                await asyncio.gather(
                    *(_session(wf, f"{label}{i}", store, runs) for i in range(sessions))
                )
    finally:
        stop.set()
        await ticker
    return lags


def _quantile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q * 100) - 1]


def bench_loop_lag(quick: bool) -> None:
    """Measure the loop lag per store, against the idle loop."""
    sessions = 10 if quick else SESSIONS
    runs = 3 if quick else RUNS
    idle = asyncio.run(_measure(None, 0, 0))
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, af.CheckpointStore] = {
            "sqlite": af.SQLiteStore(Path(tmp) / "lag.db"),
            "memory": af.MemoryStore(),
        }
        for name, store in stores.items():
            lags = asyncio.run(_measure(store, sessions, runs))
            # For information: the same with a 1 ms GIL switch interval, a process-wide
            # setting an application may choose (the library never changes it).
            fine: list[float] = []
            if not quick:  # (smoke mode: skipped)
                interval = sys.getswitchinterval()
                sys.setswitchinterval(0.001)
                try:
                    fine = asyncio.run(_measure(store, sessions, runs, label="fine-s"))
                finally:
                    sys.setswitchinterval(interval)
            for metric, q, floor, target in (
                ("p50", 0.5, _quantile(idle, 0.5), None),
                ("p99", 0.99, _quantile(idle, 0.99), 5.0),
                ("max", 1.0, max(idle), 20.0),
            ):
                value = max(lags) if q == 1.0 else _quantile(lags, q)
                report(
                    f"loop_lag_{name}",
                    f"{metric}_ms",
                    max(value * 1e3, 1e-3),
                    "ms",
                    floor=max(floor * 1e3, 1e-3),
                    floor_unit="ms",
                    floor_name="the same ticker on an idle loop",
                    target_op="<=",
                    target_value=target if target is not None else 5.0,
                    target_on="value",
                    quick=quick,
                    sessions=sessions,
                    runs_per_session=runs,
                    ticks=len(lags),
                    with_switchinterval_1ms=(
                        ((max(fine) if q == 1.0 else _quantile(fine, q)) * 1e3) if fine else None
                    ),
                )
            close = getattr(store, "close", None)
            if close is not None:
                close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the loop-lag benchmark."""
    options = parse_options(__doc__ or "", argv)
    bench_loop_lag(options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
