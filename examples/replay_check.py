"""Replaying stored sessions against new code before deploying it.

Version 1 of a pricing workflow ran 20 sessions into a SQLite store (each quote
journaled through ``ctx.effect``, so a replay never calls the rate service). Three
candidate versions are then replayed against those sessions:

- a refactor (the handler renamed, the arithmetic rewritten, a new attribute with its
  migration): replays identically;
- a change that rounds differently: the replay names the first session, superstep,
  executor and attribute that differ, with the old and the new value;
- the same check from the command line, ``actorflow replay STORE --workflow
  MODULE:ATTRIBUTE``, whose exit status a CI job can gate a deploy on.

The store is only read: its bytes are the same afterwards.

Run as ``python replay_check.py``.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import actorflow as af
from actorflow.testing import replay

RATE_CALLS: list[str] = []


def rate(currency: str) -> float:
    """The rate service (the replay never calls it: the recorded rate is used)."""
    RATE_CALLS.append(currency)
    return {"EUR": 1.0, "USD": 1.08, "GBP": 0.86}[currency]


class PricingV1(af.Executor):
    __actorflow_name__ = "shop.Pricing"  # the same name in every version, as after a deploy

    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.quoted: list[int] = []

    @af.handler
    def on_cents(self, cents: int, ctx: af.Context[None]) -> None:
        price = int(cents * ctx.effect(rate, "USD"))
        self.quoted.append(price)
        ctx.output(price)


class PricingRefactored(af.Executor):
    __actorflow_name__ = "shop.Pricing"
    state_version: ClassVar[int] = 2

    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.quoted: list[int] = []
        self.count = 0  # new in version 2

    @classmethod
    def migrate(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        return {**state, "count": len(state["quoted"])}

    @af.handler
    def quote(self, cents: int, ctx: af.Context[None]) -> None:  # renamed
        usd = ctx.effect(rate, "USD", key="rate")  # "rate": the default name, the function's
        self.quoted.append(_truncate(cents * usd))
        self.count += 1
        ctx.output(self.quoted[-1])


class PricingRounded(af.Executor):
    __actorflow_name__ = "shop.Pricing"

    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.quoted: list[int] = []

    @af.handler
    def on_cents(self, cents: int, ctx: af.Context[None]) -> None:
        price = round(cents * ctx.effect(rate, "USD", key="rate"))  # rounds, no longer truncates
        self.quoted.append(price)
        ctx.output(price)


def _truncate(value: float) -> int:
    return int(value)


def build_v1() -> af.Workflow:
    return af.WorkflowBuilder("pricing", start=PricingV1("pricing")).build()


def build_refactored() -> af.Workflow:
    return af.WorkflowBuilder("pricing", start=PricingRefactored("pricing")).build()


def build_rounded() -> af.Workflow:
    return af.WorkflowBuilder("pricing", start=PricingRounded("pricing")).build()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "pricing.db"
        with af.SQLiteStore(db) as store, build_v1() as wf:
            for n in range(20):
                with wf.session(f"customer-{n}", store=store) as session:
                    for cents in (999, 1999 + n, 250):
                        session.run(cents)
        before = hashlib.sha256(db.read_bytes()).hexdigest()
        RATE_CALLS.clear()

        with af.SQLiteStore(db) as store:
            with build_refactored() as wf:
                refactored = replay(store, wf)
            with build_rounded() as wf:
                rounded = replay(store, wf)
        print("refactored:", refactored)
        print("rounded:", rounded)
        assert refactored.identical
        [first, *_] = rounded.divergences
        assert (first.executor, first.attribute) == ("pricing", "quoted")
        assert RATE_CALLS == []  # nothing was called
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # nothing was written

        # The same from the command line (exit 0: identical; 1: a divergence).
        for target, expected in (("build_refactored", 0), ("build_rounded", 1)):
            done = subprocess.run(
                [
                    *(sys.executable, "-m", "actorflow", "replay", str(db)),
                    *("--workflow", f"replay_check:{target}", "--session", "customer-3"),
                ],
                cwd=Path(__file__).parent,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            print(f"actorflow replay --workflow replay_check:{target}: exit {done.returncode}")
            print("   ", done.stdout.strip().replace("\n", "\n    "))
            assert done.returncode == expected, done.stderr


if __name__ == "__main__":
    main()
