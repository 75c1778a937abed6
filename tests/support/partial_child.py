"""Child process for the effect tests: a superstep of two executors, killed after one's
finished part was persisted (a partial record) while the other is still running.

``split`` sends an order to ``ledger`` (a journaled effect, logged per call, and a
``ctx.sql`` row) and to ``slow`` (which, in the first process, waits until the
process is killed). The store kills this process with SIGKILL right after it saved
``ledger``'s partial record. The second process (``resume``) resumes the session:
``ledger``'s part stands in for running it again.

Usage: ``python -m tests.support.partial_child DB LOG first|resume``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Mapping, Sequence

import actorflow as af
from actorflow.storage import Checkpoint, CheckpointKind, Lease, Statement

LOG = ""
FIRST = [False]


def record(order: int) -> str:
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(f"{order}\n")
    return f"booked-{order}"


class Split(af.Executor):
    @af.handler
    def on_order(self, order: int, ctx: af.Context[int]) -> None:
        ctx.send(order)


class Ledger(af.Executor):
    @af.handler
    def on_order(self, order: int, ctx: af.Context[None]) -> None:
        booked = ctx.effect(record, order)
        ctx.sql("INSERT INTO ledger VALUES (?, ?)", (order, booked))


class Slow(af.Executor):
    @af.handler
    def on_order(self, order: int, ctx: af.Context[None]) -> None:
        if FIRST[0]:
            threading.Event().wait(30)  # killed long before: the other part is persisted
        ctx.output(order)


class KillAfterPart(af.SQLiteStore):
    """A SQLiteStore that dies right after storing a partial record (first process)."""

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        super().save(checkpoint, blobs, lease=lease)
        if FIRST[0] and checkpoint.kind is CheckpointKind.PARTIAL:
            os.kill(os.getpid(), signal.SIGKILL)

    def save_with_statements(
        self,
        checkpoint: Checkpoint,
        blobs: Mapping[str, bytes],
        statements: Sequence[Statement],
        *,
        lease: Lease | None = None,
    ) -> None:
        super().save_with_statements(checkpoint, blobs, statements, lease=lease)


def build() -> af.Workflow:
    split = Split("split")
    return (
        af.WorkflowBuilder("partial", start=split)
        .add_edge(split, Ledger("ledger"))
        .add_edge(split, Slow("slow"))
        .build()
    )


def main(db: str, log: str, mode: str) -> None:
    global LOG
    LOG, FIRST[0] = log, mode == "first"
    if FIRST[0]:
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE ledger (order_no INTEGER, booked TEXT)")
    with KillAfterPart(db) as store, build() as wf:
        if FIRST[0]:
            with wf.session("s", store=store) as session:
                session.run(7)
        else:
            with wf.resume(store, session="s") as session:
                print(session.run().outputs)


if __name__ == "__main__":
    main(*sys.argv[1:4])
