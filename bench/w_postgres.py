"""W3 and W4 on PostgreSQL: the ring's 100 checkpointed supersteps, then a resume + one step.

The same workloads as ``bench.w3`` and ``bench.w4``, on a ``PostgresStore`` in a
fresh schema of the server named by ``ACTORFLOW_TEST_PG_DSN`` (``make bench`` and
``make test`` start a throwaway one with ``.ci/postgres.sh``), with the server's
durability defaults (``fsync`` and ``synchronous_commit`` on: each save returns once
its commit is flushed to the write-ahead log).

W3 floor, same run: per step, msgpack-encode the changed executor's state and
``INSERT`` it as one row, then ``COMMIT``, through psycopg (the file floor's
write + fsync, on the database). Target <= 1.5x, and <= 3 MB stored (every table
and index of the schema, ``pg_total_relation_size``). The commit-only floor (one
small row per step) is a detail.

W4: resume W3's last checkpoint and run superstep 101 (the new checkpoint is deleted,
untimed, after each repetition so every one resumes from the same cut), through one
long-lived store, as a service keeps it (its pool of connections stays warm); a
fresh workflow each time. Target <= 15 ms. Floor: on one long-lived connection,
read every executor's state row (one SELECT), decode them, INSERT + COMMIT the
changed one. ``with_warm_store_and_workflow_ms`` (a detail) also resumes on one
long-lived workflow (a service builds its workflows once).

W4 on a fresh store (``w4_postgres_fresh_store``): the same with a store object
opened for this one resume. A new connection's server process loads its caches of
the tables and statements on first use, so its floor is the same SELECT, decode,
INSERT + COMMIT on a new connection (connecting untimed). Target <= 1.5x, the ratio
W4 has on every other store; the store's open and the build are details.

Also reported, as details of W3: the lease cost per checkpoint, the median time of a
W3-sized save (49 stored chunks and one new ~12 KB chunk) with a lease (its fencing
check) minus the same save without one, alternating in one store.

Without a server the benchmark prints a note on stderr and no figures.

Run: ``python -m bench.w_postgres [--quick]``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import msgpack

import actorflow as af
from bench._common import median, parse_options, report
from bench.w3 import (
    POLICY,
    RING,
    SESSION,
    STEPS,
    build_ring,
    initial_items,
    new_item,
    ring_members,
)

DSN_VARIABLE = "ACTORFLOW_TEST_PG_DSN"


def _connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def schema_bytes(dsn: str, schema: str) -> int:
    """Bytes of every table of ``schema`` with its indexes and TOAST."""
    with _connect(dsn) as db:
        row = db.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def drop(dsn: str, schema: str) -> None:
    with _connect(dsn) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def floor_w3(dsn: str, schema: str) -> tuple[float, float, int]:
    """Seconds per step of the INSERT + COMMIT floor, of the commit-only floor, and the
    bytes of every executor's final state."""
    states = [{"items": initial_items(i)} for i in range(RING)]
    with _connect(dsn) as db:
        db.execute(f"CREATE SCHEMA {schema}")
        db.execute(f"CREATE TABLE {schema}.states (executor int, step int, data bytea)")
        db.execute(f"CREATE TABLE {schema}.commits (step int, data bytea)")
        insert = f"INSERT INTO {schema}.states (executor, step, data) VALUES (%s, %s, %s)"
        started = time.perf_counter()
        for n in range(STEPS):
            holder = n % RING
            states[holder]["items"].append(new_item(n))
            data = msgpack.packb(states[holder], use_bin_type=True)
            with db.transaction():
                db.execute(insert, (holder, n, data))
        per_step = (time.perf_counter() - started) / STEPS
        small = f"INSERT INTO {schema}.commits (step, data) VALUES (%s, %s)"
        started = time.perf_counter()
        for n in range(STEPS):
            with db.transaction():
                db.execute(small, (n, msgpack.packb(new_item(n))))
        commit_only = (time.perf_counter() - started) / STEPS
    final = sum(len(msgpack.packb(s, use_bin_type=True)) for s in states)
    return per_step, commit_only, final


def floor_w4(dsn: str, schema: str, db: Any = None) -> float:
    """Seconds to read and decode every executor's latest state row and INSERT + COMMIT
    the changed one (on the tables ``floor_w3`` left): on ``db``, a long-lived
    connection, or on a new one (connecting untimed)."""
    if db is None:
        with _connect(dsn) as fresh:
            return floor_w4(dsn, schema, fresh)
    started = time.perf_counter()
    rows = db.execute(
        f"SELECT DISTINCT ON (executor) executor, data FROM {schema}.states"
        " ORDER BY executor, step DESC"
    ).fetchall()
    states = {executor: msgpack.unpackb(data) for executor, data in rows}
    holder = STEPS % RING
    states[holder]["items"].append(new_item(STEPS))
    with db.transaction():
        db.execute(
            f"INSERT INTO {schema}.states (executor, step, data) VALUES (%s, %s, %s)",
            (holder, STEPS, msgpack.packb(states[holder], use_bin_type=True)),
        )
    seconds = time.perf_counter() - started
    db.execute(f"DELETE FROM {schema}.states WHERE step = %s", (STEPS,))
    return seconds


def lease_cost(dsn: str, schema: str, saves: int) -> tuple[float, float]:
    """Median ms of a W3-sized save (49 stored chunks, one new ~12 KB chunk) without a
    lease and with one (the fencing check), alternating, in one store."""
    from actorflow.storage.conformance import make_checkpoint

    shared = [os.urandom(64) for _ in range(49)]
    timings: dict[bool, list[float]] = {False: [], True: []}
    with af.PostgresStore(dsn, schema=schema) as store:
        lease = store.acquire_lease("leased", "bench w_postgres", 600.0)
        parents: dict[bool, Any] = {False: None, True: None}
        for n in range(saves + 2):
            for leased in (False, True):
                chunks = {"e": [*shared, os.urandom(12_000)]}
                session = "leased" if leased else "plain"
                checkpoint, blobs = make_checkpoint(
                    session=session, parent=parents[leased], chunks=chunks
                )
                if n:
                    blobs = {d: b for d, b in blobs.items() if b not in shared}
                started = time.perf_counter()
                store.save(checkpoint, blobs, lease=lease if leased else None)
                if n >= 2:  # the first two are a warm-up
                    timings[leased].append(time.perf_counter() - started)
                parents[leased] = checkpoint
        store.release_lease(lease)
    return median(timings[False]) * 1e3, median(timings[True]) * 1e3


def run_w3(wf: af.Workflow, dsn: str, schema: str) -> tuple[float, int, int]:
    """W3's 100 supersteps into a PostgresStore; seconds, stored bytes, checkpoints."""
    store = af.PostgresStore(dsn, schema=schema)
    try:
        started = time.perf_counter()
        with wf.session(SESSION, store=store, checkpoint=POLICY) as session:
            try:
                session.run(0, max_supersteps=STEPS)
            except af.SuperstepLimitExceeded:
                pass
            else:
                raise AssertionError("W3 should stop at the superstep limit")
            seconds = time.perf_counter() - started
        latest = store.latest(session=SESSION)
        if latest is None or latest.superstep != STEPS:
            raise AssertionError(f"W3 on Postgres stopped at {latest}")
        count = len(store.list(session=SESSION))
    finally:
        store.close()
    return seconds, schema_bytes(dsn, schema), count


def resume_and_step(wf: af.Workflow, store: Any) -> af.Session:
    """W4's timed part: resume W3's session from ``store`` and run superstep 101."""
    session = wf.resume(store, session=SESSION, checkpoint=POLICY)
    try:
        session.run(max_supersteps=1)
    except af.SuperstepLimitExceeded:
        return session
    raise AssertionError("superstep 101 should end at the limit")


def undo_step(store: Any) -> None:
    """Delete superstep 101's checkpoints (its step cut and the halt cut that ends the run
    at the limit), so the next repetition resumes from W3's last cut."""
    latest = store.latest(session=SESSION)
    if latest is None or latest.superstep != STEPS + 1:
        raise AssertionError(f"expected a checkpoint of superstep {STEPS + 1}, got {latest}")
    for checkpoint in store.list(session=SESSION):
        if checkpoint.superstep > STEPS:
            store.delete(checkpoint.id)


def resume_w4(
    dsn: str, schema: str, store: Any = None, workflow: af.Workflow | None = None
) -> dict[str, float]:
    """One fresh setup + resume + superstep 101; the new checkpoint is deleted after.

    With ``store`` (a long-lived one, as a service keeps its pool of warm
    connections) the store stays open; with ``workflow`` too (a service builds its
    workflows once and resumes many sessions on each) nothing is new but the session.
    """
    t0 = time.perf_counter()
    own = store is None
    if own:
        store = af.PostgresStore(dsn, schema=schema)
    t1 = time.perf_counter()
    wf = build_ring(ring_members()) if workflow is None else workflow
    t2 = time.perf_counter()
    session = resume_and_step(wf, store)
    t3 = time.perf_counter()
    session.close()
    if workflow is None:
        wf.close()
    undo_step(store)
    if own:
        store.close()
    return {"open_store": t1 - t0, "build": t2 - t1, "resume_plus_step": t3 - t2}


def main(argv: Sequence[str] | None = None) -> int:
    """W3 and W4 on PostgreSQL, each against its floor measured in this run."""
    options = parse_options(__doc__ or "", argv)
    dsn = os.environ.get(DSN_VARIABLE)
    if not dsn:
        print(f"w_postgres: no server ({DSN_VARIABLE} unset); no figures", file=sys.stderr)
        return 0
    repeats = 1 if options.quick else 3
    prefix = f"afbench_{uuid.uuid4().hex[:8]}"
    schemas: list[str] = []

    def fresh(name: str) -> str:
        schemas.append(f"{prefix}_{name}_{len(schemas)}")
        return schemas[-1]

    try:
        floors: list[float] = []
        commit_floors: list[float] = []
        runs: list[tuple[float, int, int]] = []
        with build_ring() as wf:
            run_w3(wf, dsn, fresh("warm"))  # warm-up: imports, code paths, server caches
            for _ in range(repeats):
                floor_schema = fresh("floor")
                floor_s, commit_s, floor_bytes = floor_w3(dsn, floor_schema)
                floors.append(floor_s)
                commit_floors.append(commit_s)
                w3_schema = fresh("w3")
                runs.append(run_w3(wf, dsn, w3_schema))
        per_step = [seconds / STEPS * 1e3 for seconds, _, _ in runs]
        plain_ms, leased_ms = lease_cost(dsn, fresh("lease"), 30 if options.quick else 200)
        report(
            "w3_postgres",
            "ms_per_superstep",
            median(per_step),
            "ms",
            floor=median(floors) * 1e3,
            floor_unit="ms",
            floor_name="msgpack-encode the changed executor's state, INSERT it + COMMIT (psycopg)",
            target_op="<=",
            target_value=1.5,
            samples=per_step,
            quick=options.quick,
            floor_samples=[f * 1e3 for f in floors],
            commit_only_floor_ms=median(commit_floors) * 1e3,
            save_ms_without_lease=plain_ms,
            save_ms_with_lease=leased_ms,
            lease_cost_ms_per_checkpoint=leased_ms - plain_ms,
            checkpoints=runs[-1][2],
            supersteps=STEPS,
        )
        report(
            "w3_postgres",
            "bytes_stored_mb",
            runs[-1][1] / 1e6,
            "MB",
            floor=floor_bytes / 1e6,
            floor_unit="MB",
            floor_name="final msgpack state of every executor",
            target_op="<=",
            target_value=3.0,
            target_on="value",
            quick=options.quick,
            bytes_stored=runs[-1][1],
        )
        fresh_ms: list[float] = []
        fresh_floors: list[float] = []
        phases: list[dict[str, float]] = []
        warm: list[float] = []
        warm_floors: list[float] = []
        service: list[float] = []
        with (
            af.PostgresStore(dsn, schema=w3_schema) as service_store,
            build_ring(ring_members()) as service_wf,
            _connect(dsn) as floor_db,
        ):
            for i in range((3 if options.quick else 10) + 1):  # the first is a warm-up
                fresh_floor_s = floor_w4(dsn, floor_schema)
                times = resume_w4(dsn, w3_schema)
                warm_floor_s = floor_w4(dsn, floor_schema, floor_db)
                warm_s = resume_w4(dsn, w3_schema, service_store)["resume_plus_step"]
                service_s = resume_w4(dsn, w3_schema, service_store, service_wf)
                if i:
                    fresh_floors.append(fresh_floor_s * 1e3)
                    fresh_ms.append(times["resume_plus_step"] * 1e3)
                    phases.append(times)
                    warm_floors.append(warm_floor_s * 1e3)
                    warm.append(warm_s * 1e3)
                    service.append(service_s["resume_plus_step"] * 1e3)
        report(
            "w4_postgres",
            "resume_plus_step_ms",
            median(warm),
            "ms",
            floor=median(warm_floors),
            floor_unit="ms",
            floor_name="SELECT + decode every executor's state, INSERT + COMMIT the changed "
            "one, on a long-lived connection",
            target_op="<=",
            target_value=15.0,
            target_on="value",
            samples=warm,
            quick=options.quick,
            floor_samples=warm_floors,
            with_warm_store_and_workflow_ms=median(service),
            with_warm_store_and_workflow_samples=service,
        )
        report(
            "w4_postgres_fresh_store",
            "resume_plus_step_ms",
            median(fresh_ms),
            "ms",
            floor=median(fresh_floors),
            floor_unit="ms",
            floor_name="SELECT + decode every executor's state, INSERT + COMMIT the changed "
            "one, on a new connection",
            target_op="<=",
            target_value=1.5,
            samples=fresh_ms,
            quick=options.quick,
            floor_samples=fresh_floors,
            open_store_ms=median([p["open_store"] for p in phases]) * 1e3,
            build_ms=median([p["build"] for p in phases]) * 1e3,
        )
    finally:
        for schema in schemas:
            drop(dsn, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
