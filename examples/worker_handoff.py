"""A session moving between two worker processes, one owner at a time.

Worker 1 opens the session (taking its lease in the store), runs until the workflow
asks a human for approval, and exits: closing the session releases the lease.
Worker 2 resumes it (a new lease, with a greater fencing token), answers, and
finishes. While worker 2 holds the session, a third opener is refused with
SessionOwned naming the owner; every checkpoint either worker wrote carried its
lease, so a worker whose lease was taken over could never have added one.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import actorflow as af

SESSION = "refund-1042"


@af.message
@dataclass
class Refund:
    order: int
    cents: int


class RefundDesk(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.paid: list[int] = []

    @af.handler
    def on_refund(self, refund: Refund, ctx: af.Context) -> None:
        ctx.request(refund, bool)  # a human decides; the run goes idle

    @af.response_handler
    def on_decision(self, refund: Refund, approved: bool, ctx: af.Context) -> None:
        if approved:
            self.paid.append(refund.order)
        ctx.output(f"order {refund.order}: {'refunded' if approved else 'refused'}")


def build() -> af.Workflow:
    return af.WorkflowBuilder("refunds", start=RefundDesk("desk")).build()


def show(who: str, lease: af.Lease | None) -> None:
    assert lease is not None
    print(f"[{who}] owns {lease.session!r}: token {lease.token}, owner {lease.owner}")


def worker_1(db: str) -> None:
    """Start the session, pause on the request, exit (the lease is released on close)."""
    with af.SQLiteStore(db) as store, build() as wf, wf.session(SESSION, store=store) as s:
        show("worker 1", s.lease)
        result = s.run(Refund(1042, 12_500))
        print(
            f"[worker 1] {result.status.value}: {[p.request_id for p in result.pending_requests]}"
        )


def worker_2(db: str) -> None:
    """Resume the session, show that nobody else can open it now, answer, finish."""
    with af.SQLiteStore(db) as store, build() as wf, wf.resume(store, session=SESSION) as s:
        show("worker 2", s.lease)
        try:
            wf.resume(store, session=SESSION)
        except af.SessionOwned as exc:
            print(f"[worker 2] a second opener is refused: held by {exc.holder.owner}")
        [pending] = s.pending_requests
        result = s.respond({pending.request_id: True})
        print(f"[worker 2] {result.outputs[0]}; status {result.status.value}")
    with af.SQLiteStore(db) as store:
        print(f"[worker 2] after close the session is free: {store.current_lease(SESSION)}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "refunds.db")
        tokens = []
        for worker in ("worker-1", "worker-2"):
            done = subprocess.run(
                [sys.executable, __file__, worker, db],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            print(done.stdout.rstrip())
            assert done.returncode == 0, done.stderr
            tokens += [
                int(line.split("token ")[1].split(",")[0])
                for line in done.stdout.splitlines()
                if "token " in line
            ]
        assert tokens == sorted(tokens) and len(set(tokens)) == 2, tokens
        with af.SQLiteStore(db) as store, build() as wf:
            records = store.list(session=SESSION)
            parents = {cp.parent_id for cp in records}
            assert len([cp for cp in records if cp.id not in parents]) == 1  # one head
            print(f"{len(records)} checkpoints, one lineage, one head")
            forks_and_lineages(store, wf, paused=records[1].id)


def forks_and_lineages(store: af.CheckpointStore, wf: af.Workflow, paused: str) -> None:
    """An id with checkpoints is never silently restarted; a fork gets an id of its own."""
    try:
        wf.session(SESSION, store=store)
    except af.SessionExists as exc:
        print(f"[main] opening {SESSION!r} as new is refused: {str(exc).split(';')[0]}")
    # Replay the decision from the paused checkpoint under a new id, original untouched.
    with wf.resume(store, session=SESSION, checkpoint_id=paused, as_session="refund-1042-b") as f:
        [pending] = f.pending_requests
        print(f"[main] fork {f.id!r}: {f.respond({pending.request_id: False}).outputs[0]}")
    print(f"[main] sessions in the store: {store.sessions()}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker-1"]:
        worker_1(sys.argv[2])
    elif sys.argv[1:2] == ["worker-2"]:
        worker_2(sys.argv[2])
    else:
        main()
