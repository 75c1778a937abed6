"""Human in the loop across hosts: paused by one worker, answered by another, on PostgreSQL.

Worker 1 runs an expense workflow until it asks for an approval; the session's
checkpoints (and the pending request) are in PostgreSQL. Worker 2, another
process (on any host that reaches the database), resumes the session, answers,
and the workflow finishes. Needs ``pip install 'actorflow[postgres]'`` and a
server: the DSN comes from ``ACTORFLOW_TEST_PG_DSN`` (``make test`` starts a
throwaway server and sets it; ``bash .ci/postgres.sh python examples/postgres_approval.py``
does the same for this file alone).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass

import actorflow as af

SCHEMA = "actorflow_examples"  # several workflows and services can share one database


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
    @af.handler
    def on_expense(self, expense: Expense, ctx: af.Context) -> None:
        if expense.cents < 10_000:
            ctx.output(f"auto-approved {expense.employee}")
        else:
            ctx.request(expense, Decision)

    @af.response_handler
    def on_decision(self, expense: Expense, decision: Decision, ctx: af.Context) -> None:
        verdict = "approved" if decision.approved else "rejected"
        ctx.output(f"{verdict} {expense.employee} ({decision.note})")


def build() -> af.Workflow:
    return af.WorkflowBuilder("expenses", start=Approvals("approvals")).build()


def worker_2(dsn: str, session_id: str) -> None:
    """Another process: find what waits, answer it, finish."""
    with (
        af.PostgresStore(dsn, schema=SCHEMA) as store,
        build() as wf,
        wf.resume(store, session=session_id) as session,
    ):
        [pending] = session.pending_requests
        print(f"[worker 2] pending: {pending.request_id} -> {pending.value}")
        result = session.respond({pending.request_id: Decision(True, "receipt attached")})
        print(f"[worker 2] {result.outputs[0]}; status {result.status.value}")


def main(dsn: str) -> None:
    session_id = f"expense-{uuid.uuid4().hex[:8]}"
    with af.PostgresStore(dsn, schema=SCHEMA) as store:
        with build() as wf, wf.session(session_id, store=store) as session:
            result = session.run(Expense("ada", 25_000))
            waiting = [p.request_id for p in result.pending_requests]
            print(f"[worker 1] status {result.status.value}; waiting on {waiting}")
        second = subprocess.run(
            [sys.executable, __file__, "answer", dsn, session_id],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        print(second.stdout.rstrip())
        assert second.returncode == 0, second.stderr
        assert "approved ada" in second.stdout
        final = store.latest(session=session_id)
        assert final is not None and final.kind == "final"
        print(f"[worker 1] the store shows {session_id} ended with a {final.kind} checkpoint")
        assert store.verify() == []
        store.prune(session_id, keep=0)  # an example leaves nothing behind


if __name__ == "__main__":
    if sys.argv[1:2] == ["answer"]:
        worker_2(sys.argv[2], sys.argv[3])
        raise SystemExit(0)
    found = os.environ.get("ACTORFLOW_TEST_PG_DSN")
    if not found:
        if os.environ.get("CI") == "true":
            raise SystemExit("no PostgreSQL server: ACTORFLOW_TEST_PG_DSN is unset under CI=true")
        print("skipped: no PostgreSQL server (ACTORFLOW_TEST_PG_DSN is unset); run `make test`")
        raise SystemExit(0)
    main(found)
