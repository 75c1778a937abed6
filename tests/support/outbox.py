"""A payment workflow with a journaled effect and a transactional write, for the effect
tests and ``bench/effects_crash.py``; run as a child process, it may die on purpose.

``Charge`` takes an order number: it calls :func:`charge` through ``ctx.effect`` (the
call is logged, one JSON line per call, fsynced, with its idempotency key), inserts a
row into the store's own ``payments`` table through ``ctx.sql`` when the store takes
statements, and sends the receipt on. ``Notify`` outputs it. Each order is a run.

Usage: ``python -m tests.support.outbox '<json config>'`` with ``store`` (Python
source opening it, ``af`` being actorflow), ``session``, ``log`` (the call log),
``db`` (``[kind, where, schema]`` of the store's database, for the payments table;
absent for a store without one), ``orders`` (the order numbers to run, in order), ``resume`` (resume the session's
latest checkpoint first, finishing what it had in flight) and ``kill`` (None, or
``[order, where]``: SIGKILL this process at ``where`` of that order: ``"after_call"``
(the effect returned, its superstep not committed) or ``"next_step"`` (in ``Notify``:
the superstep of the call committed). Prints ``DONE`` at the end.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import actorflow as af

WORKFLOW = "payments"
PAYMENTS = "payments"
"""The table ``Charge`` inserts into (schema-qualified on PostgreSQL: see :func:`table_for`)."""

LOG_PATH = ""
"""Where :func:`charge` logs its calls (set by whoever runs the workflow)."""
KILL: list[Any] | None = None


def charge(order: int, key: str) -> str:
    """The outside world: one fsynced line per call."""
    with open(LOG_PATH, "a", encoding="utf-8") as log:
        log.write(json.dumps({"order": order, "key": key}) + "\n")
        log.flush()
        os.fsync(log.fileno())
    return f"receipt-{order}"


def _die_at(order: int, where: str) -> None:
    if KILL is not None and [order, where] == KILL:
        os.kill(os.getpid(), signal.SIGKILL)


class Charge(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.charged: list[int] = []

    @af.handler
    def on_order(self, order: int, ctx: af.Context[str]) -> None:
        receipt = ctx.effect(charge, order, ctx.effect_key("charge"), key="charge")
        if ctx.sql_dialect is not None:
            mark = "?" if ctx.sql_dialect == "sqlite" else "%s"
            ctx.sql(f"INSERT INTO {PAYMENTS} VALUES ({mark}, {mark})", (order, receipt))
        self.charged.append(order)
        _die_at(order, "after_call")
        ctx.send(receipt)


class Notify(af.Executor):
    @af.handler
    def on_receipt(self, receipt: str, ctx: af.Context[None]) -> None:
        _die_at(int(receipt.rsplit("-", 1)[1]), "next_step")
        ctx.output(receipt)


def build() -> af.Workflow:
    charge_ = Charge("charge")
    return af.WorkflowBuilder(WORKFLOW, start=charge_).add_edge(charge_, Notify("notify")).build()


def table_for(kind: str, where: str, schema: str = "") -> str:
    """Create the payments table in a store's database (``kind`` "sqlite": the file
    ``where``; "postgres": DSN ``where``, in ``schema``); returns its name for ``PAYMENTS``."""
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(where) as db:
            db.execute("CREATE TABLE IF NOT EXISTS payments (order_no INTEGER, receipt TEXT)")
        return "payments"
    import psycopg

    name = f"{schema}.payments"
    with psycopg.connect(where, autocommit=True) as pg:
        pg.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        pg.execute(f"CREATE TABLE IF NOT EXISTS {name} (order_no BIGINT, receipt TEXT)")
    return name


def rows(kind: str, where: str, schema: str = "") -> list[int]:
    """The order numbers in the payments table (see :func:`table_for`), sorted."""
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(where) as db:
            return sorted(r[0] for r in db.execute("SELECT order_no FROM payments"))
    import psycopg

    with psycopg.connect(where, autocommit=True) as pg:
        found = pg.execute(f"SELECT order_no FROM {schema}.payments").fetchall()
    return sorted(r[0] for r in found)


def calls(log_path: str) -> list[dict[str, Any]]:
    """Every call the log holds, in order."""
    if not os.path.exists(log_path):
        return []
    with open(log_path, encoding="utf-8") as log:
        return [json.loads(line) for line in log if line.strip()]


def main(config: dict[str, Any]) -> None:
    global LOG_PATH, KILL, PAYMENTS  # noqa: PLW0603 - one child process, one configuration
    LOG_PATH, KILL = config["log"], config.get("kill")
    store = eval(config["store"], {"af": af})
    if config.get("db"):
        PAYMENTS = table_for(*config["db"])
    with build() as wf:
        if config.get("resume"):
            session = wf.resume(store, session=config["session"], wait=30)
            session.run()
        else:
            session = wf.session(config["session"], store=store, if_exists="resume", wait=30)
        with session:
            for order in config["orders"]:
                session.run(order)
    store.close()
    sys.stdout.write("DONE\n")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
