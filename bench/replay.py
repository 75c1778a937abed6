"""Replay: 1,000 stored short sessions re-run against the code and compared.

Each session is one order of a payments workflow (``charge``, with a journaled
effect, then ``notify``): an entry cut, two step cuts and a final cut on a
SQLiteStore. ``actorflow.testing.replay`` then replays every session from its
entry cut and compares each cut's states and the outputs. Figure: seconds for
all of them; target: at most 60 s (on 2 cores). The floor is the time the
sessions took to run in the first place.

Run: ``python -m bench.replay [--quick]``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import actorflow as af
from actorflow.testing import replay
from bench._common import parse_options, quiet_logs, report


def quote(order: int) -> dict[str, int]:
    """The outside world (never called by the replay)."""
    return {"order": order, "amount": order * 3}


class Charge(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.total = 0

    @af.handler
    def on_order(self, order: int, ctx: af.Context[int]) -> None:
        self.total += ctx.effect(quote, order)["amount"]
        ctx.send(self.total)


class Notify(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.sent: list[int] = []

    @af.handler
    def on_total(self, total: int, ctx: af.Context[None]) -> None:
        self.sent.append(total)
        ctx.output(f"charged {total}")


def build() -> af.Workflow:
    charge = Charge("charge")
    return af.WorkflowBuilder("replayed", start=charge).add_edge(charge, Notify("notify")).build()


def main(argv: Sequence[str] | None = None) -> int:
    """Record the sessions, then time their replay."""
    options = parse_options(__doc__ or "", argv)
    quiet_logs()
    sessions = 100 if options.quick else 1000
    with tempfile.TemporaryDirectory() as tmp, af.SQLiteStore(Path(tmp) / "s.db") as store:
        with build() as wf:
            started = time.perf_counter()
            for n in range(sessions):
                with wf.session(f"s{n}", store=store) as session:
                    session.run(n)
            recorded = time.perf_counter() - started
        with build() as wf:
            started = time.perf_counter()
            result = replay(store, wf)
            replayed = time.perf_counter() - started
    if not result.identical or result.sessions != sessions:
        raise SystemExit(f"the replay should find {sessions} identical sessions: {result}")
    report(
        "replay",
        "seconds",
        replayed,
        "s",
        floor=recorded,
        floor_unit="s",
        floor_name="running the same sessions in the first place",
        target_op="<=",
        target_value=60.0,
        target_on="value",
        quick=options.quick,
        sessions=sessions,
        runs=result.runs,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
