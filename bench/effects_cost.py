"""The cost of a journaled effect: a superstep that calls out through ``ctx.effect``
against the same superstep calling the same function directly.

One executor in a cycle runs 200 supersteps per round, checkpointed every
superstep (sync), on a FileStore and on a SQLiteStore. In each superstep it makes
one call that returns a small API-like answer (a dict of four fields) and passes
the count on. The workload journals the call (its result encoded, recorded in the
superstep's checkpoint, decoded for the handler); the floor calls it directly.
Rounds alternate, so both see the same machine. Figure: ms per superstep; target:
at most 1.3x the floor.

Run: ``python -m bench.effects_cost [--quick]``.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import actorflow as af
from bench._common import alternate, median, parse_options, quiet_logs, report, time_call

STEPS = 200


def lookup(n: int) -> dict[str, Any]:
    """The outside world, as cheap as it gets: a small answer, built locally."""
    return {"id": n, "status": "ok", "amount": n * 100, "currency": "EUR"}


class Journaled(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.total = 0

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        self.total += ctx.effect(lookup, n)["amount"]
        if n < STEPS:
            ctx.send(n + 1)


class Direct(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.total = 0

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        self.total += lookup(n)["amount"]
        if n < STEPS:
            ctx.send(n + 1)


def build(cls: type[af.Executor]) -> af.Workflow:
    node = cls("node")
    return af.WorkflowBuilder(f"effects-{cls.__name__}", start=node).add_edge(node, node).build()


def sampler(wf: af.Workflow, store: af.CheckpointStore) -> Callable[[], float]:
    """ms per superstep of one run of ``STEPS`` supersteps, in a new session each time."""
    ids = itertools.count()

    def sample() -> float:
        with wf.session(f"{wf.name}-{next(ids)}", store=store) as session:
            seconds = time_call(lambda: session.run(1, max_supersteps=STEPS + 1))
        return seconds / STEPS * 1e3

    return sample


def bench_store(name: str, make: Callable[[Path], af.CheckpointStore], quick: bool) -> None:
    repeats = 3 if quick else 9
    with tempfile.TemporaryDirectory() as tmp:
        store = make(Path(tmp))
        with build(Direct) as direct, build(Journaled) as journaled:
            floors, works = alternate(
                sampler(direct, store), sampler(journaled, store), repeats, warmup=1
            )
        close = getattr(store, "close", None)
        if close is not None:
            close()
    report(
        f"effects_cost_{name}",
        "ms_per_superstep",
        median(works),
        "ms",
        floor=median(floors),
        floor_unit="ms",
        floor_name="the same superstep calling the function directly (no journal)",
        target_op="<=",
        target_value=1.3,
        samples=works,
        quick=quick,
        supersteps_per_round=STEPS,
        floor_samples=floors,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the effect-cost benchmark on a FileStore and a SQLiteStore."""
    options = parse_options(__doc__ or "", argv)
    quiet_logs()
    bench_store("file", lambda tmp: af.FileStore(tmp / "store"), options.quick)
    bench_store("sqlite", lambda tmp: af.SQLiteStore(tmp / "store.db"), options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
