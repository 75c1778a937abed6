"""Evolving executor state: a session written by version 1 of a class, resumed by version 2.

Version 1 of ``Ledger`` keeps the amounts it saw. Version 2 adds a running total,
so a version-1 snapshot lacks an attribute the new code needs. Version 2 declares
``state_version = 2`` and a ``migrate(state, from_version)`` classmethod; the
resume migrates the old snapshot before any handler runs. The same code without
the version bump is refused at resume time with a StateMigrationError naming the
executor, both versions and the fix (not an AttributeError in the first handler).

Run as ``python state_versions.py``: it plays the old deployment in one process
and the new one in another, on one SQLite file.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import actorflow as af

if sys.argv[1:2] == ["1"]:

    class Ledger(af.Executor):
        """Version 1: the amounts only."""

        def __init__(self, id: str) -> None:
            super().__init__(id)
            self.amounts: list[int] = []

        @af.handler
        def on_amount(self, amount: int, ctx: af.Context) -> None:
            self.amounts.append(amount)
            ctx.output(f"v1 saw {len(self.amounts)} amount(s)")

else:

    class Ledger(af.Executor):  # type: ignore[no-redef]
        """Version 2: also a running total, which version-1 snapshots lack."""

        state_version: ClassVar[int] = 1 if sys.argv[1:2] == ["2-unversioned"] else 2

        def __init__(self, id: str) -> None:
            super().__init__(id)
            self.amounts: list[int] = []
            self.total = 0

        @classmethod
        def migrate(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
            if from_version < 2:
                state["total"] = sum(state["amounts"])
            return state

        @af.handler
        def on_amount(self, amount: int, ctx: af.Context) -> None:
            self.amounts.append(amount)
            self.total += amount
            ctx.output(f"v2 total {self.total} over {len(self.amounts)} amount(s)")


def build() -> af.Workflow:
    return af.WorkflowBuilder("ledger", start=Ledger("ledger")).build()


def deployment(db: str) -> None:
    with af.SQLiteStore(db) as store, build() as wf:
        if sys.argv[1] == "1":
            with wf.session("acct-9", store=store) as s:
                for amount in (100, 250):
                    print(f"[version 1] {s.run(amount).outputs[0]}")
            return
        try:
            session = wf.resume(store, session="acct-9")
        except af.StateMigrationError as exc:
            print(f"[version 2 without state_version] resume refused: {exc}")
            return
        with session as s:
            print(f"[version 2] {s.run(50).outputs[0]}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "ledger.db")
        lines = []
        for role in ("1", "2-unversioned", "2"):
            done = subprocess.run(
                [sys.executable, __file__, role, db],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            print(done.stdout.rstrip())
            assert done.returncode == 0, done.stderr
            lines += done.stdout.splitlines()
        assert any("lacks attribute(s) total" in line for line in lines)
        assert lines[-1] == "[version 2] v2 total 400 over 3 amount(s)"


if __name__ == "__main__":
    if sys.argv[1:2] in (["1"], ["2"], ["2-unversioned"]):
        deployment(sys.argv[2])
    else:
        main()
