"""Payments that happen once: a journaled charge and a receipt row written with the checkpoint.

``Checkout`` charges a card through ``ctx.effect`` (with the idempotency key a payment
API would take) and records the receipt in the shop's own table through ``ctx.sql``,
in the transaction that stores the superstep's checkpoint. Three things go wrong:

1. the handler fails right after the charge: the restart gets the journaled receipt,
   and the card is charged once;
2. the process is killed (SIGKILL) after the charge of order 2, before its superstep is
   committed: the next process resumes and charges again, with the same key (what a
   payment API deduplicates), and the receipt row is written once;
3. the process is killed after order 3's superstep was committed: the resume never
   charges it again.

Run as ``python payments.py``: it plays the killed processes as children of itself,
on one SQLite file. The "payment API" is a log file of every call, with its key.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import actorflow as af

FLAKY: list[Exception] = []
"""Errors the handler raises once, after the charge (the first scenario)."""
KILL_AFTER: list[str] = []
"""Where this process dies: ``"charge:2"``, ``"commit:3"`` (code, not executor state)."""
API_LOG = [""]


def charge(order: int, cents: int, idempotency_key: str) -> dict[str, int | str]:
    """The payment API: each call is one line of its log."""
    with open(API_LOG[0], "a", encoding="utf-8") as log:
        log.write(json.dumps({"order": order, "key": idempotency_key}) + "\n")
    return {"order": order, "cents": cents, "status": "captured"}


class Checkout(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.paid = 0

    @af.handler
    def on_order(self, order: int, ctx: af.Context[int]) -> None:
        key = ctx.effect_key("charge")
        receipt = ctx.effect(charge, order, 1000 * order, key, key="charge")
        ctx.sql("INSERT INTO receipts VALUES (?, ?)", (order, receipt["status"]))
        self.paid += int(receipt["cents"])
        if FLAKY:
            raise FLAKY.pop()
        if f"charge:{order}" in KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)  # charged; the superstep is not committed
        ctx.send(order)


class Ship(af.Executor):
    @af.handler
    def on_order(self, order: int, ctx: af.Context[None]) -> None:
        if f"commit:{order}" in KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)  # order's charge superstep is committed
        ctx.output(f"order {order} shipped")


def build() -> af.Workflow:
    checkout = Checkout("checkout")
    return (
        af.WorkflowBuilder("payments", start=checkout, restart=af.RestartPolicy())
        .add_edge(checkout, Ship("ship"))
        .build()
    )


def play(db: str, api_log: str, orders: list[int], kill_after: list[str]) -> list[str]:
    """Resume the shop's session (or start it) and run ``orders``; the outputs."""
    API_LOG[0] = api_log
    KILL_AFTER[:] = kill_after
    outputs: list[str] = []
    with (
        af.SQLiteStore(db) as store,
        build() as wf,
        wf.session("shop", store=store, if_exists="resume") as session,
    ):
        outputs += session.run().outputs  # what a killed process left in flight
        for order in orders:
            outputs += session.run(order).outputs
    return outputs


def child(db: str, api_log: str, orders: list[int], kill_after: list[str]) -> int:
    """Play in a process of its own; its exit code (-9: killed as planned)."""
    argv = [sys.executable, __file__, "child", db, api_log, json.dumps([orders, kill_after])]
    return subprocess.run(argv, check=False, timeout=120).returncode


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db, api_log = str(Path(tmp) / "shop.db"), str(Path(tmp) / "api.log")
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE receipts (order_no INTEGER, status TEXT)")

        FLAKY.append(ConnectionError("the connection dropped after the charge"))
        print(play(db, api_log, [1], []))  # 1. failed after the charge, restarted
        assert child(db, api_log, [2], ["charge:2"]) == -signal.SIGKILL  # 2. killed in flight
        assert child(db, api_log, [3], ["commit:3"]) == -signal.SIGKILL  # 3. killed after commit
        print(play(db, api_log, [], []))  # resumes order 3, which is charged already

        calls = [json.loads(line) for line in Path(api_log).read_text().splitlines()]
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT order_no FROM receipts ORDER BY order_no").fetchall()
        print("calls to the payment API:", [c["order"] for c in calls])
        print("receipt rows:", [r[0] for r in rows])
        assert [c["order"] for c in calls] == [1, 2, 2, 3]  # 2: once more, in flight
        assert calls[1]["key"] == calls[2]["key"]  # ... with the same idempotency key
        assert [r[0] for r in rows] == [1, 2, 3]  # every row once


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        orders, kill_after = json.loads(sys.argv[4])
        play(sys.argv[2], sys.argv[3], orders, kill_after)
    else:
        main()
