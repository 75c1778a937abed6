"""PostgresStore beyond the conformance kit: its schema, server faults, pool limits.

Runs against the throwaway server ``.ci/postgres.sh`` starts (see ``tests/support/pg.py``);
durability settings are the server's defaults (fsync and synchronous_commit on).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode_state
from actorflow.storage import CheckpointKind
from actorflow.storage._format import blob_digest
from actorflow.storage.conformance import make_checkpoint
from actorflow.storage.postgres._pool import check_idle
from actorflow.storage.postgres._store import PIPELINE_MAX_BYTES
from tests.support import graphs, pg
from tests.support.forks import in_child

WAIT_S = 45.0


@pytest.fixture
def where() -> Iterator[tuple[str, str]]:
    """(dsn, schema) of a fresh schema, dropped after the test."""
    with pg.schema() as found:
        yield found


@pytest.fixture
def store(where: tuple[str, str]) -> Iterator[Any]:
    dsn, schema = where
    opened = af.PostgresStore(dsn, schema=schema)
    yield opened
    opened.close()


def _sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        cursor = db.execute(query, params or None)
        return cursor.fetchall() if cursor.description else []


def _states(store: Any, checkpoint: Any) -> dict[str, Any]:
    return {
        eid: decode_state([store.load_blob(d) for d in digests])
        for eid, digests in checkpoint.executors.items()
    }


def _reference() -> tuple[list[Any], dict[str, Any]]:
    """Outputs and final states of the ring run uninterrupted (MemoryStore)."""
    case = graphs.build("ring", 3, 4, ballast=3)
    memory = af.MemoryStore()
    with case.workflow as wf, wf.session("s", store=memory) as s:
        outputs = s.run(case.input).outputs
    final = memory.latest(session="s")
    return outputs, _states(memory, final)


def _run_with_fault(store: Any, fault: Callable[[], None], at: int) -> list[Any]:
    """Run the ring on ``store``, calling ``fault`` once inside a handler of superstep ``at``.

    Returns the run's outputs, continuing once (a resume) if the checkpoint after the
    fault failed: the contract is success or a clear CheckpointWriteFailed.
    """
    fired = threading.Event()

    def hook(executor: str, superstep: int) -> None:
        if superstep == at and not fired.is_set():
            fired.set()
            fault()

    graphs.HOOK = hook
    try:
        case = graphs.build("ring", 3, 4, ballast=3)
        with case.workflow as wf:
            failure: af.CheckpointWriteFailed | None = None
            with wf.session("s", store=store) as s:
                try:
                    return s.run(case.input).outputs
                except af.CheckpointWriteFailed as exc:
                    failure = exc
            assert "PostgresStore" in str(failure.__cause__), failure
            assert store.verify() == []
            with wf.resume(store, session="s") as resumed:
                return resumed.run().outputs
    finally:
        graphs.HOOK = None
        assert fired.is_set()


# --- server faults ---------------------------------------------------------------------


@pytest.mark.serial
@pytest.mark.timeout(60)
def test_server_restarted_mid_session(store: Any) -> None:
    """The server restarts mid-run: the session goes on (or fails clearly and resumes) to the uninterrupted result."""
    outputs, states = _reference()
    got = _run_with_fault(store, lambda: pg.pg_ctl("restart", "-m", "fast"), at=5)
    final = store.latest(session="s")
    assert final is not None and final.kind is CheckpointKind.FINAL
    assert _states(store, final) == states
    assert got == outputs[-len(got) :] and got
    assert store.verify() == []


@pytest.mark.serial
@pytest.mark.timeout(60)
def test_connection_terminated_by_the_server(store: Any, where: tuple[str, str]) -> None:
    """pg_terminate_backend on every store connection mid-run: the next checkpoints still land."""
    dsn, _ = where
    outputs, states = _reference()

    def terminate() -> None:
        killed = _sql(
            dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            " AND datname = current_database() AND backend_type = 'client backend'",
        )
        assert killed and all(row[0] for row in killed)

    got = _run_with_fault(store, terminate, at=4)
    assert got == outputs
    final = store.latest(session="s")
    assert final is not None and _states(store, final) == states
    assert store.verify() == []


@pytest.mark.timeout(60)
def test_idle_connection_ended_by_the_server_is_replaced_before_use(
    where: tuple[str, str],
) -> None:
    """The store's pool check (``check_idle``) keeps a live idle connection and replaces one
    the server ended, before a call that is not retried (a lease grant) gets it."""
    import psycopg_pool

    dsn, schema = where
    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        dsn, min_size=1, max_size=1, open=True, kwargs={"autocommit": True}, check=check_idle
    )
    store = af.PostgresStore(pool, schema=schema)
    try:
        first = store.acquire_lease("a", "owner", 30.0)
        with pool.connection() as db:
            pid = db.info.backend_pid
        with pool.connection() as db:
            assert db.info.backend_pid == pid  # live: handed out again
        # The timeout makes it wait until the server process is gone.
        assert _sql(dsn, "SELECT pg_terminate_backend(%s, 10000)", pid) == [(True,)]
        second = store.acquire_lease("b", "owner", 30.0)
        assert second.session == "b" and store.current_lease("a") == first
        with pool.connection() as db:
            assert db.info.backend_pid != pid
    finally:
        store.close()
        pool.close()


def test_check_idle_raises_for_a_closed_connection(where: tuple[str, str]) -> None:
    """The pool's check refuses a connection closed on the client side."""
    import psycopg

    dsn, _ = where
    db = psycopg.connect(dsn, autocommit=True)
    check_idle(db)
    db.close()
    with pytest.raises(psycopg.OperationalError):
        check_idle(db)


@pytest.mark.timeout(60)
def test_pool_exhausted_gives_a_clear_error_then_recovers(where: tuple[str, str]) -> None:
    """Every pooled connection held elsewhere: the checkpoint fails naming the pool; freed, the session resumes."""
    import psycopg_pool

    dsn, schema = where
    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        dsn, min_size=1, max_size=2, timeout=0.5, open=True, kwargs={"autocommit": True}
    )
    store = af.PostgresStore(pool, schema=schema)
    held: list[Any] = []
    try:
        case = graphs.build("chain", 2)
        # Opening the session takes its lease (a connection); then the pool runs dry.
        with case.workflow as wf, wf.session("s", store=store) as s:
            held = [pool.getconn(), pool.getconn()]
            with pytest.raises(af.CheckpointWriteFailed) as failed:
                s.run(case.input)
            assert "pool is exhausted" in str(failed.value.__cause__)
            for conn in held:
                pool.putconn(conn)
            held = []
            assert s.run(case.input).status is af.RunStatus.COMPLETED
        assert store.verify() == []
    finally:
        for conn in held:
            pool.putconn(conn)
        store.close()
        pool.close()


@pytest.mark.timeout(60)
def test_a_call_waiting_for_a_connection_when_the_store_closes_raises_store_closed(
    where: tuple[str, str],
) -> None:
    """close() fails the calls waiting for a pooled connection with StoreClosed (psycopg's
    PoolClosed used to be taken for a lost connection, retried, and reported as a plain
    CheckpointError); the call holding a connection keeps it."""
    dsn, schema = where
    store = af.PostgresStore(dsn, schema=schema, pool_size=1)
    held = store._connections.pool.getconn()  # the one connection: in flight elsewhere
    try:
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(store.latest)
            deadline = time.monotonic() + WAIT_S
            while store._connections.pool.get_stats().get("requests_waiting", 0) < 1:
                assert time.monotonic() < deadline and not waiting.done()
                time.sleep(0.01)
            store.close()
            with pytest.raises(af.StoreClosed, match="is closed"):
                waiting.result(timeout=WAIT_S)
        with pytest.raises(af.StoreClosed):
            store.sessions()
        assert not held.closed  # not closed under its holder
    finally:
        store._connections.pool.putconn(held)
        store.close()
    assert held.closed  # closed once given back


def test_a_store_whose_pool_its_owner_closed_says_so(where: tuple[str, str]) -> None:
    """A pool the caller owns and closed: StoreClosed naming the pool, not a psycopg error."""
    import psycopg_pool

    dsn, schema = where
    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        dsn, min_size=1, max_size=2, open=True, kwargs={"autocommit": True}
    )
    store = af.PostgresStore(pool, schema=schema)
    try:
        pool.close()
        with pytest.raises(af.StoreClosed, match="pool it was given is closed"):
            store.latest()
    finally:
        store.close()


@pytest.mark.timeout(60)
def test_sessions_sharing_a_one_connection_pool_all_succeed(where: tuple[str, str]) -> None:
    """Four sessions on four threads share a store whose pool has one connection: each waits its turn."""
    dsn, schema = where
    store = af.PostgresStore(dsn, schema=schema, pool_size=1)
    outputs, _ = _reference()

    def one(n: int) -> list[Any]:
        case = graphs.build("ring", 3, 4, ballast=3)
        with case.workflow as wf, wf.session(f"s{n}", store=store) as s:
            return s.run(case.input).outputs

    try:
        with ThreadPoolExecutor(4) as pool:
            results = [f.result(timeout=WAIT_S) for f in [pool.submit(one, n) for n in range(4)]]
        assert results == [outputs] * 4
        assert store.sessions() == ["s0", "s1", "s2", "s3"]
        assert store.verify() == []
    finally:
        store.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("durability", [af.Durability.SYNC, af.Durability.ASYNC])
def test_sync_and_async_durability(store: Any, durability: af.Durability) -> None:
    """Both durabilities store the lineage of an uninterrupted run."""
    outputs, states = _reference()
    case = graphs.build("ring", 3, 4, ballast=3)
    policy = af.CheckpointPolicy(durability=durability)
    with case.workflow as wf, wf.session("s", store=store, checkpoint=policy) as s:
        assert s.run(case.input).outputs == outputs
    final = store.latest(session="s")
    assert final is not None and _states(store, final) == states
    chain = store.history(final.id)
    assert chain[-1].kind is CheckpointKind.ENTRY
    assert store.verify() == []


def test_readers_never_see_half_a_checkpoint(store: Any) -> None:
    """While one thread saves, another never finds a record whose blobs are not all there."""
    stop = threading.Event()
    seen: list[int] = []

    def read() -> None:
        while not stop.is_set():
            latest = store.latest(session="s")
            if latest is not None:
                assert len(store.load_blobs(latest.blob_digests())) == len(latest.blob_digests())
                seen.append(latest.superstep)

    with ThreadPoolExecutor(1) as pool:
        reader = pool.submit(read)
        parent = None
        for i in range(40):
            checkpoint, blobs = make_checkpoint(
                session="s", parent=parent, chunks={"e": [f"{i}".encode() * 100, b"same"]}
            )
            store.save(checkpoint, blobs)
            parent = checkpoint
        stop.set()
        reader.result(timeout=WAIT_S)
    assert seen == sorted(seen)
    assert store.verify() == []


# --- the schema ------------------------------------------------------------------------


def test_schema_is_created_once_by_concurrent_first_opens(where: tuple[str, str]) -> None:
    """Eight threads opening a new schema at once all succeed and share one set of tables."""
    dsn, schema = where
    barrier = threading.Barrier(8, timeout=WAIT_S)

    def open_and_save(n: int) -> str:
        barrier.wait()
        with af.PostgresStore(dsn, schema=schema, pool_size=1) as opened:
            checkpoint, blobs = make_checkpoint(session=f"s{n}")
            opened.save(checkpoint, blobs)
            return checkpoint.id

    with ThreadPoolExecutor(8) as pool:
        ids = [f.result(timeout=WAIT_S) for f in [pool.submit(open_and_save, n) for n in range(8)]]
    with af.PostgresStore(dsn, schema=schema) as store:
        assert sorted(cp.id for cp in store.list()) == sorted(ids)
        assert store.verify() == []
    assert _sql(dsn, f"SELECT version FROM {schema}.actorflow_schema") == [(1,)]


def test_schemas_are_independent(where: tuple[str, str]) -> None:
    """Two schemas of one database are two stores: nothing of one is seen in the other."""
    dsn, schema = where
    with (
        pg.schema() as (_, other_schema),
        af.PostgresStore(dsn, schema=schema) as one,
        af.PostgresStore(dsn, schema=other_schema) as other,
    ):
        checkpoint, blobs = make_checkpoint(session="s")
        one.save(checkpoint, blobs)
        assert other.list() == [] and other.has_blobs(blobs) == set()
        other.save(checkpoint, blobs)  # the same id is free in the other schema
        one.delete(checkpoint.id)
        assert other.load(checkpoint.id) == checkpoint
        assert other.has_blobs(blobs) == set(blobs)


def test_newer_schema_is_refused(where: tuple[str, str]) -> None:
    """A schema written by a newer actorflow is refused, naming the fix; a damaged version table too."""
    dsn, schema = where
    af.PostgresStore(dsn, schema=schema).close()
    _sql(dsn, f"UPDATE {schema}.actorflow_schema SET version = 99")
    with pytest.raises(af.UnsupportedFormat, match="Upgrade actorflow"):
        af.PostgresStore(dsn, schema=schema)
    _sql(dsn, f"DELETE FROM {schema}.actorflow_schema")
    with pytest.raises(af.CheckpointCorrupt, match="version"):
        af.PostgresStore(dsn, schema=schema)


def test_older_schema_is_upgraded_in_place(
    where: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a schema of an older version applies the upgrades in order and keeps the data."""
    from actorflow.storage.postgres import _sql as _postgres_sql

    dsn, schema = where
    with af.PostgresStore(dsn, schema=schema) as store:
        checkpoint, blobs = make_checkpoint(session="s")
        store.save(checkpoint, blobs)
    monkeypatch.setattr(_postgres_sql, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(
        _postgres_sql,
        "UPGRADES",
        {
            1: ("ALTER TABLE {s}.checkpoints ADD COLUMN note text",),
            2: ("UPDATE {s}.checkpoints SET note = 'upgraded'",),
        },
    )
    with af.PostgresStore(dsn, schema=schema) as store:
        assert store.load(checkpoint.id) == checkpoint
        assert store.verify() == []
    assert _sql(dsn, f"SELECT version FROM {schema}.actorflow_schema") == [(3,)]
    assert _sql(dsn, f"SELECT note FROM {schema}.checkpoints") == [("upgraded",)]
    monkeypatch.setattr(_postgres_sql, "SCHEMA_VERSION", 5)
    with pytest.raises(af.UnsupportedFormat, match="no upgrade from it"):
        af.PostgresStore(dsn, schema=schema)


@pytest.mark.parametrize("name", ["Upper", "semi;colon", "x" * 64, "", "1st", 'quo"te'])
def test_schema_name_must_be_a_plain_identifier(name: str) -> None:
    """A schema name that is not a plain lowercase identifier is refused before connecting."""
    with pytest.raises(ValueError, match="schema name"):
        af.PostgresStore("postgresql://127.0.0.1:1/none", schema=name)


def test_unreachable_server_is_a_clear_error_without_the_password() -> None:
    """No server at the DSN: CheckpointError naming the address and the fix, never the password."""
    with pytest.raises(af.CheckpointError) as failed:
        af.PostgresStore("postgresql://user:s3cret@127.0.0.1:1/db", timeout=0.5)
    message = str(failed.value)
    assert "127.0.0.1:1" in message and "server is up" in message
    assert "s3cret" not in message


def test_a_refused_connection_fails_at_once_with_the_servers_reason() -> None:
    """Nothing listening: the constructor fails within seconds (not the pool's 30 s
    timeout), with the connection's own reason."""
    started = time.monotonic()
    with pytest.raises(af.CheckpointError, match="Connection refused") as failed:
        af.PostgresStore("postgresql://u@127.0.0.1:1/db")
    assert time.monotonic() - started < 5.0
    assert "\n" not in str(failed.value)


def test_an_unknown_database_is_named_at_once() -> None:
    """A database that does not exist: the server's message, within seconds, and no
    pool retrying (and logging) in the background."""
    url = pg.dsn()
    missing = url.rsplit("/", 1)[0] + "/af_no_such_db"
    started = time.monotonic()
    with pytest.raises(af.CheckpointError, match='database "af_no_such_db" does not exist'):
        af.PostgresStore(missing)
    assert time.monotonic() - started < 5.0


def test_an_unknown_dsn_option_is_named_before_connecting() -> None:
    """A mistyped option (``?schem=x``) is libpq's reason, not ``<unparsable DSN>``."""
    with pytest.raises(af.CheckpointError, match=r'DSN is not valid.*"schem"'):
        af.PostgresStore("postgresql://u@127.0.0.1:1/db?schem=x")


@pytest.mark.parametrize(
    ("dsn", "given", "expected"),
    [
        ("postgresql://u@h/db", None, "5"),
        ("postgresql://u@h/db?connect_timeout=9", None, "9"),
        ("postgresql://u@h/db?connect_timeout=9", 2.5, "3"),
        ("host=h dbname=db connect_timeout=7", None, "7"),
    ],
)
def test_the_connect_timeout_is_the_stores_else_the_dsns(
    dsn: str, given: float | None, expected: str
) -> None:
    """connect_timeout: the store's parameter, else the DSN's own, else 5 s."""
    from actorflow.storage.postgres._pool import connect_settings

    assert connect_settings(dsn, given) == {"autocommit": True, "connect_timeout": expected}


def test_a_server_that_never_answers_fails_within_the_connect_timeout() -> None:
    """A socket that accepts but never speaks: the store gives up after connect_timeout."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(af.CheckpointError, match="cannot connect") as failed:
            af.PostgresStore(f"postgresql://u@127.0.0.1:{port}/db", connect_timeout=2)
        assert 1.5 < time.monotonic() - started < 10.0
        assert "timeout" in str(failed.value).lower()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_connect_timeout_must_be_positive(bad: float) -> None:
    """A connect_timeout that is not a positive number is refused before connecting."""
    with pytest.raises(ValueError, match="connect_timeout"):
        af.PostgresStore("postgresql://u@127.0.0.1:1/db", connect_timeout=bad)


def test_chunks_are_compressed_by_the_server(store: Any, where: tuple[str, str]) -> None:
    """Chunk rows are compressed by TOAST (lz4 where the server has it) and read back whole."""
    dsn, schema = where
    text = b"item-00000001 lorem ipsum dolor sit amet consectetur adipiscing elit " * 1500
    checkpoint = save_new_chunk(store, text)
    [(stored,)] = _sql(dsn, f"SELECT pg_column_size(data) FROM {schema}.blobs")
    assert stored < len(text) / 5
    [(lz4_available,)] = _sql(
        dsn,
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'",
    )
    [(method,)] = _sql(
        dsn,
        "SELECT attcompression FROM pg_attribute WHERE attrelid = %s::regclass"
        " AND attname = 'data'",
        f"{schema}.blobs",
    )
    assert (method == "l") == bool(lz4_available)
    assert store.load_blobs(checkpoint.blob_digests()) == dict.fromkeys(
        checkpoint.blob_digests(), text
    )


def save_new_chunk(store: Any, chunk: bytes) -> Any:
    checkpoint, blobs = make_checkpoint(session="z", chunks={"e": [chunk]})
    store.save(checkpoint, blobs)
    return checkpoint


@pytest.mark.parametrize("size", [1_000, 200_000], ids=["pipelined", "statement-by-statement"])
def test_refused_saves_roll_back_their_new_chunks(store: Any, size: int) -> None:
    """Each refusal (a taken-over lease, a live lease held by another, an id already
    stored, a missing chunk) raises its own error and stores none of the save's new
    chunks, whether the save went out in one round trip or statement by statement."""
    assert (size <= PIPELINE_MAX_BYTES) == (size == 1_000)
    first = store.acquire_lease("s", "first", 60.0)
    store.release_lease(first)
    second = store.acquire_lease("s", "second", 60.0)
    head, head_blobs = make_checkpoint(session="s", chunks={"e": [b"head"]})
    store.save(head, head_blobs, lease=second)

    def attempt() -> tuple[Any, dict[str, bytes], str]:
        chunk = os.urandom(size)
        checkpoint, blobs = make_checkpoint(session="s", parent=head, chunks={"e": [chunk]})
        return checkpoint, blobs, blob_digest(chunk)

    checkpoint, blobs, new = attempt()
    with pytest.raises(af.LeaseLost, match="taken over by second"):
        store.save(checkpoint, blobs, lease=first)
    assert store.has_blobs([new]) == set()

    checkpoint, blobs, new = attempt()
    with pytest.raises(af.SessionOwned):
        store.save(checkpoint, blobs)
    assert store.has_blobs([new]) == set()

    _, blobs, new = attempt()
    with pytest.raises(af.CheckpointError, match="already stored"):
        store.save(head, {**head_blobs, **blobs}, lease=second)
    assert store.has_blobs([new]) == set()

    checkpoint, blobs, new = attempt()
    missing = blob_digest(b"never stored")
    dangling = dataclasses.replace(checkpoint, executors={"e": [new, missing]})
    with pytest.raises(af.CheckpointCorrupt, match=missing):
        store.save(dangling, blobs, lease=second)
    assert store.has_blobs([new]) == set()

    assert store.latest(session="s") == head
    assert store.verify() == []


# --- damaged rows ----------------------------------------------------------------------


def test_a_null_in_a_blob_id_array_is_a_problem_line(
    store: Any, where: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """verify() reports a record whose blob_ids hold a NULL (the command prints it, exit 1);
    the record can still be deleted."""
    from actorflow.cli import main

    dsn, schema = where
    kept = save_new_chunk(store, b"kept")
    damaged = save_new_chunk(store, b"damaged")
    _sql(
        dsn,
        f"UPDATE {schema}.checkpoints SET blob_ids = array_append(blob_ids, NULL) WHERE id = %s",
        damaged.id,
    )
    problems = store.verify()
    assert any(damaged.id in p and "NULL" in p for p in problems), problems
    assert not any(kept.id in p for p in problems)
    assert main(["checkpoints", "verify", f"{dsn}?schema={schema}"]) == 1
    assert "NULL" in capsys.readouterr().out
    store.delete(damaged.id)
    assert store.list() == [kept]
    assert store.verify() == []


def test_a_schema_without_the_parent_index_gets_it_when_opened(where: tuple[str, str]) -> None:
    """A schema an older actorflow made (no index by parent, no table of cancel
    requests) is given them on opening, with its version unchanged; reads check the
    children of what they return, and cancel requests are noted."""
    dsn, schema = where
    with af.PostgresStore(dsn, schema=schema) as store:
        older = save_new_chunk(store, b"older")
        newest, blobs = make_checkpoint(session="z", parent=older, chunks={"e": [b"newest"]})
        store.save(newest, blobs)
    _sql(dsn, f"DROP INDEX {schema}.checkpoints_by_parent")
    _sql(dsn, f"DROP TABLE {schema}.cancels")
    with af.PostgresStore(dsn, schema=schema) as store:
        assert store.latest(session="z") == newest
        lease = store.acquire_lease("z", "holder", 60)
        assert store.request_cancel("z", "run-1") is True
        assert store.renew_lease(lease, 60).cancel_requested == "run-1"
    for added in ("checkpoints_by_parent", "cancels"):
        assert _sql(dsn, "SELECT to_regclass(%s) IS NOT NULL", f"{schema}.{added}") == [(True,)]
    assert _sql(dsn, f"SELECT version FROM {schema}.actorflow_schema") == [(1,)]
    _sql(dsn, f"UPDATE {schema}.checkpoints SET session = 'moved' WHERE id = %s", newest.id)
    with (
        af.PostgresStore(dsn, schema=schema) as store,
        pytest.raises(af.CheckpointCorrupt, match=f"a child of {older.id}"),
    ):
        store.latest(session="z")


def test_a_role_that_may_not_add_the_parent_index_still_opens_the_schema(
    where: tuple[str, str],
) -> None:
    """A role with only data privileges opens a schema lacking the index by parent and
    the table of cancel requests: its reads still check the children of what they
    return (scanning for them), its leases work, and a cancel request says how to get
    the table."""
    import psycopg.conninfo

    dsn, schema = where
    role = f"{schema}_app"
    with af.PostgresStore(dsn, schema=schema) as store:
        older = save_new_chunk(store, b"older")
        newest, blobs = make_checkpoint(session="z", parent=older, chunks={"e": [b"newest"]})
        store.save(newest, blobs)
    _sql(dsn, f"DROP INDEX {schema}.checkpoints_by_parent")
    _sql(dsn, f"DROP TABLE {schema}.cancels")
    _sql(dsn, f"CREATE ROLE {role}")
    try:
        _sql(dsn, f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        _sql(
            dsn, f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"
        )
        as_role = psycopg.conninfo.make_conninfo(dsn, options=f"-c role={role}")
        with af.PostgresStore(as_role, schema=schema) as store:
            assert store.latest(session="z") == newest
            _sql(dsn, f"UPDATE {schema}.checkpoints SET id = '0' WHERE id = %s", newest.id)
            with pytest.raises(af.CheckpointCorrupt, match=f"a child of {older.id}"):
                store.latest(session="z")
            lease = store.acquire_lease("z", "holder", 60)
            assert store.current_lease("z") == lease
            with pytest.raises(af.CheckpointError, match="role that may create tables"):
                store.request_cancel("z", "run-1")
            assert store.renew_lease(lease, 60).cancel_requested is None
        for missing in ("checkpoints_by_parent", "cancels"):
            assert _sql(dsn, "SELECT to_regclass(%s)", f"{schema}.{missing}") == [(None,)]
    finally:
        _sql(dsn, f"DROP OWNED BY {role}")
        _sql(dsn, f"DROP ROLE {role}")


def _backend_pid(store: Any) -> int:
    """The server process of the pooled connection the store's next call gets."""
    pid: int = store._connections.run(
        lambda db: db.execute("SELECT pg_backend_pid()").fetchone()[0], what="read a pid"
    )
    return pid


@pytest.mark.timeout(60)
def test_a_forked_child_uses_connections_of_its_own(store: Any) -> None:
    """A store carried into a forked child never uses its parent's connections there (two
    processes on one socket read each other's answers); closing it in the child leaves
    the parent's connections alone."""
    first, blobs = make_checkpoint(session="parent")
    store.save(first, blobs)
    parents = _backend_pid(store)

    def child() -> None:
        assert _backend_pid(store) != parents
        store.save(*make_checkpoint(session="child"))
        store.close()  # as a `with` block would: its pool, not the parent's

    assert in_child(child) == 0
    assert _backend_pid(store) == parents  # the parent's connection was never touched
    assert sorted(cp.session for cp in store.list()) == ["child", "parent"]
    assert store.verify() == []


@pytest.mark.timeout(60)
def test_a_forked_child_given_the_parents_pool_says_so(where: tuple[str, str]) -> None:
    """A pool the caller owns cannot follow a fork: the child's calls say what to do
    instead of using the parent's connections."""
    import psycopg_pool

    dsn, schema = where
    with psycopg_pool.ConnectionPool(
        dsn, min_size=1, max_size=2, open=True, kwargs={"autocommit": True}
    ) as pool:
        store = af.PostgresStore(pool, schema=schema)

        def child() -> None:
            with pytest.raises(af.CheckpointError, match="pool of its own"):
                store.latest()

        assert in_child(child) == 0
        assert store.latest() is None
        store.close()
