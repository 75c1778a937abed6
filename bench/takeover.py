"""Session leases: how long a takeover after ``kill -9`` takes, and what a lease costs a save.

Takeover (per store kind: FileStore and SQLiteStore in temp dirs, and PostgresStore
in a fresh schema when ``ACTORFLOW_TEST_PG_DSN`` names a server): a child process
opens a session with the default lease TTL (``DEFAULT_LEASE_TTL``, 10 s; 0.5 s with
``--quick``), runs until the workflow asks a question and blocks; the parent
SIGKILLs it, reaps it, and times opening the store plus
``wf.resume(store, session=..., wait=...)`` until it owns the session. The dead
owner's lease still has most of its TTL left, but it names a process of this host
that provably exited (see ``runtime.session._ownership.owner_gone``), so the opener ends it
and takes the session at once. Floor: the same open and resume of the session
once nobody holds it. Target: < 0.5 s (before same-host takeover: the TTL, ~10 s).

Lease cost per save (FileStore, SQLiteStore; ``bench.w_postgres`` measures
PostgreSQL's): saving small records of one lineage with the session's lease (the
fencing check in the same transaction / under the same lock) against the same
saves of another session without any lease, alternated.
Floor: the lease-less save. Target: <= 1.3 x.

Run: ``python -m bench.takeover [--quick]`` (under ``bash .ci/postgres.sh`` for
PostgreSQL too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass

import actorflow as af
from actorflow.runtime.session import DEFAULT_LEASE_TTL
from actorflow.storage.conformance import make_checkpoint
from bench._common import median, parse_options, report
from bench.w_postgres import DSN_VARIABLE, drop

SESSION = "takeover"


class Asker(af.Executor):
    """Asks once and waits for the answer."""

    @af.handler
    def on_int(self, n: int, ctx: af.Context) -> None:
        ctx.request(n, bool)

    @af.response_handler
    def on_answer(self, n: int, ok: bool, ctx: af.Context) -> None:
        ctx.output(ok)


def build() -> af.Workflow:
    return af.WorkflowBuilder("takeover", start=Asker("asker")).build()


def open_store(kind: str, folder: str) -> af.CheckpointStore:
    """The store of ``kind`` in ``folder`` (for postgres: ``"<schema> <dsn>"``)."""
    if kind == "postgres":
        schema, dsn = folder.split(" ", 1)
        return af.PostgresStore(dsn, schema=schema)
    if kind == "file":
        return af.FileStore(os.path.join(folder, "store"))
    return af.SQLiteStore(os.path.join(folder, "store.db"))


def hold(kind: str, folder: str, ttl: float) -> None:
    """Child: own the session, pause on the request, report, block until killed."""
    store = open_store(kind, folder)
    wf = build()
    session = wf.session(SESSION, store=store, lease_ttl=ttl)
    session.run(1)
    print("HELD", flush=True)
    threading.Event().wait(10 * ttl + 60)


def start_holder(kind: str, folder: str, ttl: float) -> subprocess.Popen[str]:
    """A child process that owns the session in ``folder`` (started early: imports are slow)."""
    return subprocess.Popen(
        [sys.executable, "-m", "bench.takeover", "hold", kind, folder, str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
    )


def takeover_seconds(
    kind: str, folder: str, child: subprocess.Popen[str], ttl: float
) -> tuple[float, float, float]:
    """Kill ``child`` once it holds the session: seconds until this process owns it,
    seconds of the same open once the session is free (the floor), and the seconds the
    dead owner's lease had left when the takeover began."""
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "HELD"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        killed = time.perf_counter()
        store = open_store(kind, folder)
        dead = store.current_lease(SESSION)
        left = dead.expires_at - time.time() if dead is not None else 0.0
        with build() as wf:
            with wf.resume(store, session=SESSION, wait=10 * ttl + 60) as s:
                took = time.perf_counter() - killed
                assert s.respond({"asker:1:0": True}).outputs == [True]
            store.close()
            free = time.perf_counter()
            store = open_store(kind, folder)
            with wf.resume(store, session=SESSION, wait=10 * ttl + 60):
                floor = time.perf_counter() - free
            store.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=60)
        if child.stdout is not None:
            child.stdout.close()
    return took, floor, left


@dataclass(frozen=True, slots=True)
class SaveTimes:
    leased: list[float]
    plain: list[float]
    check: list[float]


def save_costs(kind: str, rounds: int, per_round: int) -> SaveTimes:
    """Per-save seconds of leased and lease-less saves (interleaved one by one, so the
    machine's drift hits both alike), and of the fencing check alone."""
    leased: list[float] = []
    plain: list[float] = []
    check: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(kind, folder)
        lease = store.acquire_lease("leased", "bench", 600)
        parents: dict[str, af.storage.Checkpoint | None] = {"leased": None, "plain": None}
        for _ in range(rounds):
            spent = {"leased": 0.0, "plain": 0.0}
            for n in range(per_round):
                # Which goes first alternates: a save right after another may pay for
                # its predecessor (a WAL checkpoint, a folder fsync).
                for session in ("plain", "leased") if n % 2 else ("leased", "plain"):
                    checkpoint, blobs = make_checkpoint(session=session, parent=parents[session])
                    parents[session] = checkpoint
                    given = lease if session == "leased" else None
                    started = time.perf_counter()
                    store.save(checkpoint, blobs, lease=given)
                    spent[session] += time.perf_counter() - started
            leased.append(spent["leased"] / per_round)
            plain.append(spent["plain"] / per_round)
            check.append(fencing_check_seconds(store, lease, per_round))
        store.release_lease(lease)
        store.close()
    return SaveTimes(leased, plain, check)


def fencing_check_seconds(store: af.CheckpointStore, lease: af.Lease, count: int) -> float:
    """Seconds of the lease check a save makes, alone (the store's own code path)."""
    started = time.perf_counter()
    if isinstance(store, af.FileStore):
        for _ in range(count):
            with store._leases.fenced(lease.session, lease, "bench"):
                pass
    else:
        assert isinstance(store, af.SQLiteStore)
        from actorflow.storage.sqlite import _sql as sql

        for _ in range(count):
            with store._connections.write() as db:
                sql.lease_row(db, lease.session)
    return (time.perf_counter() - started) / count


def main() -> None:
    options = parse_options(__doc__ or "")
    ttl = 0.5 if options.quick else DEFAULT_LEASE_TTL
    dsn = os.environ.get(DSN_VARIABLE)
    kinds = ("file", "sqlite", "postgres") if dsn else ("file", "sqlite")
    repeats = 1 if options.quick else 5
    schemas: list[str] = []
    took: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in kinds}
    try:
        for n in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                folders = {kind: os.path.join(tmp, kind) for kind in kinds if kind != "postgres"}
                for folder in folders.values():
                    os.mkdir(folder)
                if dsn:
                    schemas.append(f"afbench_takeover_{uuid.uuid4().hex[:8]}_{n}")
                    folders["postgres"] = f"{schemas[-1]} {dsn}"
                holders = {kind: start_holder(kind, folders[kind], ttl) for kind in kinds}
                for kind in kinds:
                    took[kind].append(takeover_seconds(kind, folders[kind], holders[kind], ttl))
    finally:
        for schema in schemas:
            drop(dsn or "", schema)
    for kind in kinds:
        report(
            f"takeover_{kind}",
            "takeover_after_kill9_s",
            median([t[0] for t in took[kind]]),
            "s",
            floor=median([t[1] for t in took[kind]]),
            floor_unit="s",
            floor_name="the same open and resume of the session once nobody holds it",
            target_op="<=",
            target_value=0.5,
            target_on="value",
            samples=[t[0] for t in took[kind]],
            quick=options.quick,
            ttl_s=ttl,
            lease_left_s=[round(t[2], 2) for t in took[kind]],
            floor_samples=[t[1] for t in took[kind]],
        )
        if kind == "postgres":
            continue  # bench.w_postgres measures what a lease costs a PostgreSQL save
        costs = save_costs(kind, 2 if options.quick else 9, 10 if options.quick else 50)
        report(
            f"lease_save_{kind}",
            "save_with_lease_us",
            median(costs.leased) * 1e6,
            "us",
            floor=median(costs.plain) * 1e6,
            floor_unit="us",
            floor_name="the same save without a lease",
            target_op="<=",
            target_value=1.3,
            samples=[s * 1e6 for s in costs.leased],
            quick=options.quick,
            floor_samples=[s * 1e6 for s in costs.plain],
        )
        report(
            f"lease_check_{kind}",
            "fencing_check_us",
            median(costs.check) * 1e6,
            "us",
            floor=median(costs.plain) * 1e6,
            floor_unit="us",
            floor_name="a save without a lease (the budget is 0.3 of it: 1.3x)",
            target_op="<=",
            target_value=0.3,
            samples=[s * 1e6 for s in costs.check],
            quick=options.quick,
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["hold"]:
        hold(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        main()
