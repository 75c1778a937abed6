"""Effects under random SIGKILLs: what happens once, and what at most once more.

A child process runs a payments session (``charge`` then ``notify`` per order, each
order a run) on a durable store: ``charge`` calls the outside world through
``ctx.effect`` (each call logged, fsynced, with a call id that goes into its result)
and, on SQL stores, inserts the order's row through ``ctx.sql``. The parent kills
the child with SIGKILL at a random moment, starts a new one (which resumes what
was in flight, then takes new orders), and so on; a last child finishes the work.

Then, per store, from the call log and the store alone:

- ``duplicate_rows``: orders with more than one row (transactional writes), and
  ``missing_rows``: orders accepted (an entry cut holds them) without a row, or with
  a row whose receipt is not the journaled result (the row and the journal disagree);
- ``repeated_after_commit``: calls of an order made after the call whose result the
  store committed (a committed result must be returned, never called again);
- ``repeats``: calls beyond the first per order (calls in flight when a kill came),
  against ``kills``: at most one per crash;
- ``lost``: accepted orders whose run never completed.

Figure ``violations`` (per store and in total): the sum of the above that must be 0,
plus repeats beyond one per kill. Target: 0. PostgreSQL is used when
``ACTORFLOW_TEST_PG_DSN`` is set (``make bench`` starts a server).

Run: ``python -m bench.effects_crash [--quick] [--kills N]`` (default 1,000 kills in
all, split over the stores).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import actorflow as af
from actorflow.actors import decode
from actorflow.runtime import decode_runtime
from bench._common import report

ROOT = Path(__file__).resolve().parent.parent
SESSION = "payments"
MAX_DELAY = 0.25
"""Seconds after the child is ready within which the kill comes (uniformly)."""

# --- the child ------------------------------------------------------------------------

LOG = ""
PAYMENTS = ""


def charge(order: int) -> str:
    """The outside world: one fsynced line per call; the result names the call."""
    call = uuid.uuid4().hex[:12]
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps([order, call]) + "\n")
        log.flush()
        os.fsync(log.fileno())
    return f"receipt-{order}-{call}"


class Charge(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.count = 0

    @af.handler
    def on_order(self, order: int, ctx: af.Context[str]) -> None:
        receipt = ctx.effect(charge, order, key="charge")
        if ctx.sql_dialect is not None:
            mark = "?" if ctx.sql_dialect == "sqlite" else "%s"
            ctx.sql(f"INSERT INTO {PAYMENTS} VALUES ({mark}, {mark})", (order, receipt))
        self.count += 1
        ctx.send(receipt)


class Notify(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.last = ""

    @af.handler
    def on_receipt(self, receipt: str, ctx: af.Context[None]) -> None:
        self.last = receipt
        ctx.output(receipt)


def build() -> af.Workflow:
    charge_ = Charge("charge")
    return af.WorkflowBuilder("payments", start=charge_).add_edge(charge_, Notify("notify")).build()


def open_store(kind: str, where: str, schema: str) -> af.CheckpointStore:
    if kind == "sqlite":
        return af.SQLiteStore(where)
    if kind == "file":
        return af.FileStore(where)
    return af.PostgresStore(where, schema=schema)


def child(config: dict[str, Any]) -> None:
    """Resume what is in flight, then run orders ``first``, ``first + 1``, ... (or none)."""
    global LOG, PAYMENTS
    LOG, PAYMENTS = config["log"], config["table"]
    store = open_store(config["kind"], config["where"], config["schema"])
    with build() as wf:
        session = wf.session(SESSION, store=store, if_exists="resume", wait=30)
        with session:
            sys.stdout.write("READY\n")
            sys.stdout.flush()
            session.run()  # what the killed child left in flight
            first = config["first"]
            for order in range(first, first + config["orders"]):
                session.run(order)
    store.close()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()


# --- the parent -----------------------------------------------------------------------


def _table(kind: str, where: str, schema: str) -> str:
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(where) as db:
            db.execute("CREATE TABLE payments (order_no INTEGER, receipt TEXT)")
        return "payments"
    if kind == "file":
        return ""
    import psycopg

    with psycopg.connect(where, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        db.execute(f"CREATE TABLE {schema}.payments (order_no BIGINT, receipt TEXT)")
    return f"{schema}.payments"


def _rows(kind: str, where: str, table: str) -> list[tuple[int, str]]:
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(where) as db:
            return list(db.execute(f"SELECT order_no, receipt FROM {table}"))
    if kind == "file":
        return []
    import psycopg

    with psycopg.connect(where, autocommit=True) as db:
        return [(r[0], r[1]) for r in db.execute(f"SELECT order_no, receipt FROM {table}")]


def _spawn(config: dict[str, Any]) -> subprocess.Popen[str]:
    """A child on ``config``; its stderr goes to ``config["log"] + ".err"`` (appended)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    with open(config["log"] + ".err", "a", encoding="utf-8") as errors:  # the child keeps a copy
        return subprocess.Popen(
            [sys.executable, "-m", "bench.effects_crash", "--child", json.dumps(config)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": path},
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )


def _kill_once(config: dict[str, Any], rng: random.Random) -> bool:
    """Run a child and SIGKILL it at a random moment after it is ready; whether the kill
    came before the child finished on its own."""
    proc = _spawn(config)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # READY (or EOF if it died: reported by the checks)
    if line.strip() != "READY":
        proc.wait(timeout=60)
        errors = Path(config["log"] + ".err").read_text(encoding="utf-8")
        raise RuntimeError(f"the child did not start: {line!r}; its stderr ends: {errors[-2000:]}")
    try:
        proc.wait(timeout=rng.uniform(0.0, MAX_DELAY))
        return False  # it finished all its orders first
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        return True


def _finish(config: dict[str, Any]) -> None:
    proc = _spawn({**config, "orders": 0})
    out, _ = proc.communicate(timeout=300)
    if proc.returncode != 0 or "DONE" not in out:
        errors = Path(config["log"] + ".err").read_text(encoding="utf-8")
        raise RuntimeError(
            f"the last child failed (exit {proc.returncode}): {out!r}; its stderr ends: "
            f"{errors[-2000:]}"
        )


def _committed(store: af.CheckpointStore) -> tuple[dict[int, list[str]], set[int], set[int]]:
    """(order -> committed effect results, orders accepted, orders completed) per the store."""
    results: dict[int, list[str]] = {}
    accepted: set[int] = set()
    completed: set[int] = set()
    for cp in store.list(session=SESSION):
        if cp.kind is af.storage.CheckpointKind.PARTIAL:
            continue
        body = decode_runtime(cp.runtime)
        for executor, _step, name, _n, result in body.get("effects", []):
            if executor == "charge" and name == "charge":
                receipt = decode(result)
                results.setdefault(int(receipt.split("-")[1]), []).append(receipt)
        if cp.kind is af.storage.CheckpointKind.ENTRY:
            for _source, _group, payload in body["inbox"].get("charge", []):
                accepted.add(decode(payload))
        for entry in cp.history:
            if entry.kind == "output":
                event = af.runtime.event_of(entry)
                assert isinstance(event, af.OutputEvent)
                completed.add(int(event.value.split("-")[1]))
    return results, accepted, completed


def trial(kind: str, kills: int, seed: int, quick: bool, tmp: Path) -> dict[str, int]:
    """``kills`` random kills on one store; the counts of the module docstring."""
    rng = random.Random(seed)
    schema = f"af_bench_fx_{uuid.uuid4().hex[:10]}" if kind == "postgres" else ""
    where = {
        "sqlite": str(tmp / "fx.db"),
        "file": str(tmp / "fx"),
        "postgres": os.environ.get("ACTORFLOW_TEST_PG_DSN", ""),
    }[kind]
    log = tmp / f"{kind}-calls.jsonl"
    open_store(kind, where, schema).close()  # created before its table
    table = _table(kind, where, schema)
    config = {"kind": kind, "where": where, "schema": schema, "log": str(log), "table": table}
    done_kills = 0
    first = 0
    try:
        while done_kills < kills:
            if _kill_once({**config, "first": first, "orders": 1000}, rng):
                done_kills += 1
            first += 1000
        _finish({**config, "first": first})
        calls: dict[int, list[str]] = {}
        for line in log.read_text(encoding="utf-8").splitlines():
            order, call = json.loads(line)
            calls.setdefault(order, []).append(call)
        store = open_store(kind, where, schema)
        try:
            results, accepted, completed = _committed(store)
        finally:
            store.close()
        rows = _rows(kind, where, table)
    finally:
        if kind == "postgres":
            import psycopg

            with psycopg.connect(where, autocommit=True) as db:
                db.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    row_counts = Counter(order for order, _ in rows)
    receipts = dict(rows)
    repeated_after_commit = 0
    double_commits = 0
    for order, made in calls.items():
        committed = results.get(order, [])
        if len(committed) > 1:
            double_commits += 1
        if committed:
            call = committed[0].rsplit("-", 1)[1]
            if call in made:
                repeated_after_commit += len(made) - 1 - made.index(call)
    repeats = sum(len(made) - 1 for made in calls.values())
    counts = {
        "kills": done_kills,
        "orders": len(accepted),
        "calls": sum(len(made) for made in calls.values()),
        "repeats": repeats,
        "repeated_after_commit": repeated_after_commit,
        "double_commits": double_commits,
        "lost": len(accepted - completed),
        "duplicate_rows": sum(1 for n in row_counts.values() if n > 1),
        "missing_rows": 0,
    }
    if table:
        counts["missing_rows"] = sum(
            1
            for order in accepted
            if order not in receipts or receipts[order] not in results.get(order, [])
        )
    counts["violations"] = (
        counts["repeated_after_commit"]
        + counts["double_commits"]
        + counts["lost"]
        + counts["duplicate_rows"]
        + counts["missing_rows"]
        + max(0, repeats - done_kills)
    )
    return counts


def _report(bench: str, counts: Mapping[str, int], quick: bool, **details: Any) -> None:
    """One figure: the violations among ``counts`` (every other count a detail)."""
    report(
        bench,
        "violations",
        counts["violations"],
        "events",
        floor=None,
        floor_unit="",
        floor_name="none: every violation is a defect",
        target_op="<=",
        target_value=0,
        target_on="value",
        quick=quick,
        counts={k: v for k, v in counts.items() if k != "violations"},
        **details,
    )


def main(argv: list[str] | None = None) -> int:
    """Kill, resume, count; one record per store and one for all of them."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few kills per store (smoke)")
    parser.add_argument("--kills", type=int, default=1000, help="kills in all (default 1,000)")
    parser.add_argument("--pin", default=None, help="(accepted for run_all; unused)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(json.loads(args.child))
        return 0
    kinds = ["sqlite", "file"] + (["postgres"] if os.environ.get("ACTORFLOW_TEST_PG_DSN") else [])
    total = 6 * len(kinds) if args.quick else args.kills
    shares = {kind: total // len(kinds) + (i < total % len(kinds)) for i, kind in enumerate(kinds)}
    all_counts: Counter[str] = Counter()
    started = time.perf_counter()
    for index, kind in enumerate(kinds):
        with tempfile.TemporaryDirectory() as tmp:
            counts = trial(kind, shares[kind], seed=index, quick=args.quick, tmp=Path(tmp))
        all_counts.update(counts)
        _report(f"effects_crash_{kind}", counts, args.quick)
    seconds = round(time.perf_counter() - started, 1)
    _report("effects_crash", all_counts, args.quick, stores=kinds, seconds=seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
