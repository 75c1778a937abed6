"""Human in the loop: a request raised in one process, answered in another, days later.

The first process runs until the workflow asks for an approval and goes idle;
its state is in SQLite. A second process (here: a subprocess) resumes the
session, answers, and the workflow finishes.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import actorflow as af


@af.message
@dataclass
class Expense:
    employee: str
    cents: int


@af.message
@dataclass
class Decision:
    approved: bool
    note: str = ""


class Approvals(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.decided: list[str] = []

    @af.handler
    def on_expense(self, expense: Expense, ctx: af.Context) -> None:
        if expense.cents < 10_000:
            ctx.output(f"auto-approved {expense.employee}")
        else:
            ctx.request(expense, Decision)

    @af.response_handler
    def on_decision(self, expense: Expense, decision: Decision, ctx: af.Context) -> None:
        verdict = "approved" if decision.approved else "rejected"
        self.decided.append(expense.employee)
        ctx.output(f"{verdict} {expense.employee} ({decision.note})")


def build() -> af.Workflow:
    return af.WorkflowBuilder("expenses", start=Approvals("approvals")).build()


def answer_later(db: str) -> None:
    """The second process: list what waits, answer it, finish."""
    store = af.SQLiteStore(db)
    with build() as wf, wf.resume(store, session="expense-7") as session:
        [pending] = session.pending_requests
        print(f"[process 2] pending: {pending.request_id} -> {pending.value}")
        result = session.respond({pending.request_id: Decision(True, "receipt attached")})
        print(f"[process 2] {result.outputs[0]}; status {result.status.value}")
    store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "expenses.db")
        store = af.SQLiteStore(db)
        with build() as wf, wf.session("expense-7", store=store) as session:
            result = session.run(Expense("ada", 25_000))
            print(
                f"[process 1] status {result.status.value}; waiting on {[p.request_id for p in result.pending_requests]}"
            )
            # Retention deleting idle sessions whole, as if it ran a month from now,
            # leaves this one: it is open (its lease is live), however long it waits.
            month_later = time.time() + 30 * 86_400
            removed = store.prune_older_than(month_later, whole_sessions=True)
            print(f"[process 1] retention, a month on, removed {removed} record(s)")
            assert removed == 0 and store.sessions() == ["expense-7"]
        store.close()
        second = subprocess.run(
            [sys.executable, __file__, "answer", db],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        print(second.stdout.rstrip())
        assert second.returncode == 0, second.stderr
        assert "approved ada" in second.stdout


if __name__ == "__main__":
    if sys.argv[1:2] == ["answer"]:
        answer_later(sys.argv[2])
    else:
        main()
