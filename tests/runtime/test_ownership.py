"""One owner per session: leases taken at open, renewed, released, and enforced on save."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.errors import LeaseLost
from actorflow.runtime.session._ownership import _RENEWER, ProcessIdentity, this_process
from actorflow.storage import CheckpointKind, CheckpointStore, Lease, bounded_waits
from actorflow.storage.conformance import make_checkpoint
from tests.support import child_env, owners, pg
from tests.support.owners import Order

STORES: dict[str, Callable[[Path], af.MemoryStore | af.FileStore | af.SQLiteStore]] = {
    "memory": lambda _: af.MemoryStore(),
    "file": lambda tmp: af.FileStore(tmp / "store"),
    "sqlite": lambda tmp: af.SQLiteStore(tmp / "store.db"),
}
WAIT_S = 30.0


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    opened = STORES[request.param](tmp_path)
    yield opened
    opened.close()


def heads(store: CheckpointStore, session: str) -> set[str]:
    """Records of ``session`` that no other record names as parent (partials aside)."""
    records = [cp for cp in store.list(session=session) if cp.kind is not CheckpointKind.PARTIAL]
    parents = {cp.parent_id for cp in store.list()}
    return {cp.id for cp in records if cp.id not in parents}


def until(condition: Callable[[], bool], bound: float = WAIT_S) -> None:
    """Wait (polling) until ``condition()`` holds; fail after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# --- in one process ------------------------------------------------------------------


def test_a_second_opener_is_refused_naming_the_owner(store: CheckpointStore) -> None:
    """While a session is open, opening it again (session or resume) raises SessionOwned."""
    with owners.build() as wf, wf.session("s1", store=store) as first:
        first.run(Order(1))
        assert first.lease is not None and first.lease.session == "s1"
        assert f"pid {os.getpid()}" in first.lease.owner
        with pytest.raises(af.SessionOwned, match=rf"pid {os.getpid()} on .*expires") as caught:
            wf.resume(store, session="s1")
        assert caught.value.holder.token == first.lease.token
        with pytest.raises(af.SessionOwned):
            wf.session("s1", store=store, if_exists="resume")
    assert store.current_lease("s1") is None  # released on close


def test_wait_takes_over_when_the_owner_closes(store: CheckpointStore) -> None:
    """wait= blocks the second opener until the first closes, then grants a greater token."""
    with owners.build() as wf:
        first = wf.session("s1", store=store)
        first.run(Order(1))
        assert first.lease is not None
        token = first.lease.token
        closer = threading.Timer(0.2, first.close)  # the owner lets go while we wait
        closer.start()
        try:
            with wf.resume(store, session="s1", wait=WAIT_S) as second:
                assert second.lease is not None and second.lease.token > token
                assert [p.request_id for p in second.pending_requests] == ["desk:1:0"]
        finally:
            closer.join(timeout=WAIT_S)


def test_the_lease_is_renewed_while_the_session_lives(store: CheckpointStore) -> None:
    """One renewer thread keeps every open session's lease alive past its TTL."""
    with owners.build() as wf:
        sessions = [wf.session(f"s{n}", store=store, lease_ttl=0.6) for n in range(3)]
        try:
            first = [s.lease for s in sessions]
            assert all(lease is not None for lease in first)
            renewers = [t for t in threading.enumerate() if t.name == "actorflow-lease-renewer"]
            assert len(renewers) == 1
            horizon = max(lease.expires_at for lease in first if lease is not None) + 0.3
            until(lambda: time.time() > horizon)
            for s, lease in zip(sessions, first, strict=True):
                assert lease is not None and s.lease is not None
                assert s.lease.token == lease.token and s.lease.expires_at > lease.expires_at
                assert store.current_lease(s.id) is not None
        finally:
            for s in sessions:
                s.close()
    assert not _RENEWER.active()
    assert all(store.current_lease(f"s{n}") is None for n in range(3))


@pytest.mark.parametrize("durability", [af.Durability.SYNC, af.Durability.ASYNC])
def test_a_writer_whose_lease_was_taken_over_adds_nothing(
    store: CheckpointStore, durability: af.Durability
) -> None:
    """After a takeover the old owner's next save raises LeaseLost, its run fails and rolls back."""
    policy = af.CheckpointPolicy(durability=durability)
    with owners.build() as wf, wf.session("s1", store=store, checkpoint=policy) as old:
        old.run(Order(1))
        assert old.lease is not None
        store.release_lease(old.lease)  # as if it had expired while the owner stalled
        thief = store.acquire_lease("s1", "another worker", 60)
        before = store.list(session="s1")
        [pending] = old.pending_requests
        with pytest.raises(af.CheckpointWriteFailed, match="another worker") as caught:
            old.respond({pending.request_id: True})
        chain: BaseException | None = caught.value
        while chain is not None and not isinstance(chain, LeaseLost):
            chain = chain.__cause__
        assert isinstance(chain, LeaseLost)
        assert store.list(session="s1") == before
        store.release_lease(thief)
    with owners.build() as wf, wf.resume(store, session="s1") as new:
        [pending] = new.pending_requests
        assert new.respond({pending.request_id: True}).outputs == [[1, True]]
    assert len(heads(store, "s1")) == 1


# --- no silent second lineage --------------------------------------------------------


def test_opening_an_existing_id_as_new_names_resume(store: CheckpointStore) -> None:
    """wf.session(id, store=) on an id with checkpoints raises SessionExists naming the fix."""
    with owners.build() as wf:
        with wf.session("s1", store=store) as s:
            s.run(Order(1))
        count = len(store.list(session="s1"))
        with pytest.raises(af.SessionExists, match=r"wf\.resume\(store, session='s1'\)"):
            wf.session("s1", store=store)
        with pytest.raises(af.SessionExists, match="if_exists='fresh'"):
            wf.run(Order(2), store=store, session="s1")
        assert len(store.list(session="s1")) == count
        assert store.current_lease("s1") is None  # the refused opener let go
        with pytest.raises(ValueError, match="if_exists"):
            wf.session("s1", store=store, if_exists="maybe")  # type: ignore[arg-type]


def test_if_exists_resume_continues_or_creates(store: CheckpointStore) -> None:
    """if_exists='resume' continues the latest checkpoint, or starts a new session."""
    with owners.build() as wf:
        with wf.session("new", store=store, if_exists="resume") as s:
            s.run(Order(1))
            head = s.last_checkpoint_id
        with wf.session("new", store=store, if_exists="resume") as s:
            assert [p.request_id for p in s.pending_requests] == ["desk:1:0"]
            assert s.respond({"desk:1:0": True}).outputs == [[1, True]]
        assert store.history("new")[-1].parent_id is None
        assert head in {cp.id for cp in store.history("new")}
        assert len(heads(store, "new")) == 1


def test_if_exists_fresh_abandons_the_old_lineage(store: CheckpointStore) -> None:
    """A fresh lineage beside the old: old records readable, old requests unanswerable."""
    with owners.build() as wf:
        with wf.session("s1", store=store) as s:
            s.run(Order(1))
        old = store.list(session="s1")
        with wf.session("s1", store=store, if_exists="fresh") as s:
            [fresh] = s.run(Order(2)).pending_requests
            assert fresh.request_id != "desk:1:0" and fresh.request_id.startswith("desk:1:0#")
            with pytest.raises(af.RequestError, match="abandoned lineage"):
                s.respond({"desk:1:0": True})
            assert s.respond({fresh.request_id: False}).outputs == [[2, False]]
        assert all(store.load(cp.id) == cp for cp in old)
        assert len(heads(store, "s1")) == 2  # two lineages, asked for explicitly
    with (
        owners.build() as wf,
        wf.resume(store, session="s1") as s,
        pytest.raises(af.RequestError, match="abandoned lineage"),
    ):
        s.respond({"desk:1:0": True})


def test_request_ids_never_repeat_across_resets() -> None:
    """After reset() the same executor and superstep make another id; old ids are refused."""
    with owners.build() as wf, wf.session() as s:
        [first] = s.run(Order(1)).pending_requests
        s.reset()
        [second] = s.run(Order(2)).pending_requests
        s.reset()
        [third] = s.run(Order(3)).pending_requests
        assert len({first.request_id, second.request_id, third.request_id}) == 3
        for stale in (first, second):
            with pytest.raises(af.RequestError, match="abandoned lineage"):
                s.respond({stale.request_id: True})
        assert s.respond({third.request_id: True}).outputs == [[3, True]]


# --- forks and time travel -----------------------------------------------------------


def test_time_travel_by_the_owner_branches_with_new_request_ids(store: CheckpointStore) -> None:
    """Resuming an older checkpoint continues from it; the branch's request ids are new."""
    with owners.build() as wf:
        with wf.session("s1", store=store) as s:
            s.run(Order(1))
            entry = store.list(session="s1")[0]
            s.respond({"desk:1:0": True})
        with wf.resume(store, session="s1", checkpoint_id=entry.id) as s:
            [again] = s.run().pending_requests
            assert again.request_id.startswith("desk:1:0#")
            with pytest.raises(af.RequestError, match="abandoned lineage"):
                s.respond({"desk:1:0": True})  # asked in the branch left behind
            assert s.respond({again.request_id: False}).outputs == [[1, False]]
        branch = store.history("s1")
        assert branch[-1].id == entry.id  # the new records descend from the older checkpoint


def test_delete_session_removes_its_records_and_leaves_the_others(
    store: CheckpointStore,
) -> None:
    """delete_session removes every record of the session (its state, history and
    pending requests) and nothing of another session sharing its blobs; the id then
    starts afresh."""
    with owners.build() as wf:
        for sid in ("gone", "kept"):
            with wf.session(sid, store=store) as session:
                session.run(Order(1))
                session.respond({"desk:1:0": True})
                session.run(Order(2))  # waits on its answer
        removed = af.delete_session(store, "gone")
        assert removed > 0
        assert store.list(session="gone") == [] and store.session_history("gone") == []
        assert "gone" not in store.sessions() and store.current_lease("gone") is None
        assert store.verify() == []
        with wf.resume(store, session="kept") as kept:  # its blobs, the same bytes, stay
            assert [p.request_id for p in kept.pending_requests] == ["desk:3:0"]
            assert kept.respond({"desk:3:0": True}).outputs == [[2, True]]
        with wf.session("gone", store=store) as again:  # a new session, not a resume
            assert again.run(Order(9)).pending_requests[0].request_id == "desk:1:0"
        assert af.delete_session(store, "never-stored") == 0


def test_delete_session_is_refused_while_the_session_is_open(store: CheckpointStore) -> None:
    """An open session keeps its records: delete_session raises SessionOwned naming the
    owner (after wait=), deletes nothing, and goes through once the owner closes."""
    with owners.build() as wf:
        session = wf.session("s1", store=store)
        session.run(Order(1))
        stored = len(store.list(session="s1"))
        with pytest.raises(af.SessionOwned, match=rf"pid {os.getpid()}.*cannot delete it"):
            af.delete_session(store, "s1", wait=0.05)
        assert len(store.list(session="s1")) == stored
        closer = threading.Timer(0.2, session.close)
        closer.start()
        try:
            assert af.delete_session(store, "s1", wait=WAIT_S) == stored
        finally:
            closer.join(timeout=WAIT_S)
        assert store.list(session="s1") == []


def test_retention_by_age_keeps_an_open_session_whole(store: CheckpointStore) -> None:
    """A session open in a process and waiting (for an answer, say) wrote nothing for
    longer than the cut-off: retention deleting idle sessions whole leaves it, and its
    answer then lands as if no time had passed; closed, it goes."""
    with owners.build() as wf:
        with wf.session("waiting", store=store) as waiting:
            waiting.run(Order(1))  # waits on the desk's answer
            with wf.session("closed", store=store) as closed:
                closed.run(Order(2))
            later, closed_records = time.time() + 30 * 86_400, len(store.list(session="closed"))
            assert store.prune_older_than(later, whole_sessions=True) == closed_records
            assert store.sessions() == ["waiting"]
            assert waiting.respond({"desk:1:0": True}).outputs == [[1, True]]
        assert store.verify() == []
        assert store.prune_older_than(later, whole_sessions=True) > 0
        assert store.sessions() == []


@pytest.mark.timeout(120)
def test_retention_running_beside_open_sessions_fails_none_of_their_runs(
    store: CheckpointStore,
) -> None:
    """Retention deleting every idle session whole, over and over, while sessions in
    threads run and answer: every run of an open session succeeds, nothing of its state
    is lost, and each session goes once it is closed."""
    stop, passes = threading.Event(), []

    def retention() -> None:
        while not stop.is_set():
            store.prune_older_than(time.time() + 86_400, whole_sessions=True)
            passes.append(1)
            stop.wait(0.002)  # pacing only: saves get the store's lock in between

    def orders(session: af.Session, first: int) -> list[list[Any]]:
        decided = []
        for number in range(first, first + 8):
            [request] = session.run(Order(number)).pending_requests
            decided += session.respond({request.request_id: number % 2 == 0}).outputs
        return decided

    remover = threading.Thread(target=retention)
    with owners.build() as wf:
        remover.start()
        try:
            with ThreadPoolExecutor(4) as pool:

                def one(n: int) -> list[list[Any]]:
                    with wf.session(f"s{n}", store=store) as session:
                        return orders(session, 100 * n)

                results = list(pool.map(one, range(4), timeout=WAIT_S))
        finally:
            stop.set()
            remover.join(timeout=WAIT_S)
    assert passes, "retention never ran"
    for n, decided in enumerate(results):
        assert decided == [[k, k % 2 == 0] for k in range(100 * n, 100 * n + 8)]
    assert store.verify() == []
    store.prune_older_than(time.time() + 86_400, whole_sessions=True)
    assert store.sessions() == []


def test_fork_into_a_new_session_leaves_the_original_untouched(store: CheckpointStore) -> None:
    """as_session= continues a checkpoint under a new id; the source lineage is unchanged."""
    with owners.build() as wf:
        with wf.session("s1", store=store) as s:
            s.run(Order(1))
            paused = s.last_checkpoint_id
        original = store.list(session="s1")
        with wf.resume(store, session="s1", checkpoint_id=paused, as_session="s1-retry") as f:
            assert f.id == "s1-retry"
            assert f.respond({"desk:1:0": False}).outputs == [[1, False]]
        assert store.list(session="s1") == original
        forked = store.history("s1-retry")
        assert forked[0].session == "s1-retry" and paused in {cp.id for cp in forked}
        with pytest.raises(af.SessionExists, match="another as_session"):
            wf.resume(store, session="s1", as_session="s1-retry")
        with pytest.raises(ValueError, match="new session id"):
            wf.resume(store, session="s1", as_session="s1")
        # Another session's checkpoint: the advice names the calls that take it.
        with pytest.raises(ValueError, match="belongs to session 's1'") as foreign:
            wf.resume(store, session="s1-retry", checkpoint_id=paused)
        assert "pass session='s1';" in str(foreign.value)
        with wf.resume(store, session="s1", checkpoint_id=paused, as_session="s1-again") as f:
            assert f.respond({"desk:1:0": True}).outputs == [[1, True]]
        assert store.current_lease("s1-retry") is None


# --- across processes ----------------------------------------------------------------

CHILD = [sys.executable, "-m", "tests.support.owners"]


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CHILD, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=WAIT_S)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, f"child exited early with {proc.wait(timeout=WAIT_S)}"
    return line


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_two_processes_racing_to_answer_one_owns_it(tmp_path: Path, kind: str) -> None:
    """Two worker processes resume one paused session at once: one owns and answers, the
    other is refused naming the owner; the lineage has one head."""
    path = str(tmp_path / ("store" if kind == "file" else "store.db"))
    subprocess.run([*CHILD, kind, path, "s1", "pause"], check=True, timeout=WAIT_S, env=child_env())
    racers = [_spawn(kind, path, "s1", "answer") for _ in range(2)]
    try:
        first = sorted(_line(p) for p in racers)
        for p in racers:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        rest = [p.communicate(timeout=WAIT_S)[0].strip() for p in racers]
    finally:
        for p in racers:
            _reap(p)
    assert [line.split()[0] for line in first] == ["OWNED", "REFUSED"]
    assert "pid " in first[1]
    assert sorted(rest) == ["", "DONE [[1, True]]"]
    with STORES[kind](tmp_path) as store:
        responses = store.list(session="s1", kind=CheckpointKind.RESPONSE)
        assert len(responses) == 1
        assert len(heads(store, "s1")) == 1


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_an_owner_of_another_host_is_taken_over_after_its_ttl(tmp_path: Path, kind: str) -> None:
    """A lease whose owner this host cannot check (another host's) holds until its TTL
    ends, then the session is resumed with a greater token."""
    ttl = 1.0
    with STORES[kind](tmp_path) as store, owners.build() as wf:
        with wf.session("s1", store=store) as s:
            s.run(Order(1))
        elsewhere = replace(_here(), host="another-host").tag() if this_process() else ""
        dead = store.acquire_lease("s1", f"pid 4242 on another-host (w) {elsewhere}", ttl)
        with pytest.raises(af.SessionOwned, match="another-host"):
            wf.resume(store, session="s1")
        started = time.monotonic()
        with wf.resume(store, session="s1", wait=WAIT_S) as s:
            took = time.monotonic() - started
            assert s.lease is not None and s.lease.token > dead.token
            assert s.respond({"desk:1:0": True}).outputs == [[1, True]]
        assert took < ttl + WAIT_S / 2  # bounded by the TTL
        assert len(heads(store, "s1")) == 1


def test_nested_request_ids_never_repeat_across_resets() -> None:
    """A sub-workflow's surfaced requests carry the parent's lineage too: a reset makes new ids."""
    inner = owners.build()
    outer = af.WorkflowBuilder(
        "outer", start=af.WorkflowExecutor(inner, "sub", outputs="output")
    ).build()
    with inner, outer, outer.session() as s:
        [first] = s.run(Order(1)).pending_requests
        assert first.request_id == "sub/desk:1:0"
        s.reset()
        [second] = s.run(Order(2)).pending_requests
        assert second.request_id.startswith("sub/desk:1:0#")
        with pytest.raises(af.RequestError, match="abandoned lineage"):
            s.respond({first.request_id: True})
        assert s.respond({second.request_id: False}).outputs == [[2, False]]


def test_lease_errors_survive_pickling() -> None:
    """Lease and migration errors keep their fields across processes (pickle)."""
    import pickle

    holder = af.Lease("s1", 3, "pid 1 on h (w)", time.time() + 5)
    owned = pickle.loads(pickle.dumps(af.SessionOwned(holder)))
    assert owned.holder == holder and "pid 1 on h (w)" in str(owned)
    lost = pickle.loads(pickle.dumps(LeaseLost("gone", lease=holder)))
    assert lost.lease == holder and str(lost) == "gone"
    locked = pickle.loads(pickle.dumps(af.StoreLocked("held", lock="l", holder="pid 7")))
    assert (str(locked), locked.lock, locked.holder) == ("held", "l", "pid 7")
    error = af.StateMigrationError("m", executor="e", stored_version=1, current_version=2)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.executor, copy.stored_version, copy.current_version, str(copy)) == (
        "e",
        1,
        2,
        "m",
    )


@pytest.mark.parametrize("expires_at", [math.nan, math.inf, -math.inf, 1e308, 1e18])
def test_a_lease_message_formats_any_expiry(expires_at: float) -> None:
    """SessionOwned's message formats every float a damaged row can hold (no OverflowError)."""
    owned = af.SessionOwned(af.Lease("s1", 3, "pid 1 on h (w)", expires_at))
    assert "pid 1 on h (w)" in str(owned) and "token 3" in str(owned)


class _Unleased:
    """A store written before leases existed (everything but the lease methods)."""

    def __init__(self) -> None:
        self._inner = af.MemoryStore()

    def __getattr__(self, name: str) -> object:
        if name.endswith("_lease"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_without_leases_is_refused_clearly() -> None:
    """Opening a session for writing on a store without leases names what it lacks."""
    with owners.build() as wf, pytest.raises(af.CheckpointError, match="session leases"):
        wf.session("s1", store=_Unleased())  # type: ignore[arg-type]


def test_a_session_dropped_without_close_lets_go_of_its_lease() -> None:
    """A session garbage-collected without close() releases its lease (no renewal forever)."""
    import gc

    store = af.MemoryStore()
    with owners.build() as wf:
        s = wf.session("s1", store=store)
        assert store.current_lease("s1") is not None
        del s
        gc.collect()
        assert store.current_lease("s1") is None
    assert not _RENEWER.active()


# --- wait= bounds the store's locks ----------------------------------------------------

BOUND_S = 1.0 + 5.0
"""An open with wait=1 must return within this (the lock wait and slack)."""

LOCK_HOLDER = {
    "file": (
        "import fcntl, os, sys\n"
        "from actorflow.storage.file._leases import lease_key\n"
        "folder = os.path.join(sys.argv[1], 'leases')\n"
        "os.makedirs(folder, exist_ok=True)\n"
        "fd = os.open(os.path.join(folder, lease_key(sys.argv[2]) + '.lock'), os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    ),
    "sqlite": (
        "import sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN IMMEDIATE')\n"
    ),
    "postgres": (
        "import sys, psycopg\n"
        "from actorflow.storage.postgres._leases import session_key\n"
        "dsn, session, schema = sys.argv[1], sys.argv[2], sys.argv[3]\n"
        "db = psycopg.connect(dsn, autocommit=True)\n"
        "db.execute('SELECT pg_advisory_lock(%s)', (session_key(schema, session),))\n"
    ),
}
"""Child processes that take a store's lock of session argv[2] the way a save does,
print LOCKED, and hold it until stdin closes."""


@contextmanager
def _kind_store(kind: str, tmp_path: Path) -> Iterator[tuple[CheckpointStore, str, str]]:
    """(store, the path or DSN a child opens, schema) for a store kind with several processes."""
    if kind != "postgres":
        opened = STORES[kind](tmp_path)
        where = str(tmp_path / ("store" if kind == "file" else "store.db"))
        try:
            yield opened, where, ""
        finally:
            opened.close()
        return
    with pg.schema() as (dsn, schema):
        server = af.PostgresStore(dsn, schema=schema)
        try:
            yield server, dsn, schema
        finally:
            server.close()


def _open_within(
    wf: af.Workflow, store: CheckpointStore, bound: float, **kwargs: object
) -> BaseException | af.Session:
    """What ``wf.resume(store, **kwargs)`` gave, run in a thread; fails if it takes past ``bound``."""
    outcome: list[BaseException | af.Session] = []

    def resume() -> None:
        try:
            outcome.append(wf.resume(store, **kwargs))  # type: ignore[arg-type]
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    opener = threading.Thread(target=resume, daemon=True)
    started = time.monotonic()
    opener.start()
    opener.join(timeout=bound)
    assert not opener.is_alive(), f"the open still waited after {time.monotonic() - started:.1f} s"
    return outcome[0]


@pytest.mark.parametrize("leased", [False, True], ids=["unleased", "leased"])
@pytest.mark.parametrize("kind", ["file", "sqlite", "postgres"])
def test_wait_bounds_a_store_lock_held_by_another_process(
    tmp_path: Path, kind: str, leased: bool
) -> None:
    """A lock the grant needs, held by another process: wait=1 fails within a bound, with
    SessionOwned if a live lease holds the session, else StoreLocked naming the holder."""
    with _kind_store(kind, tmp_path) as (store, where, schema), owners.build() as wf:
        with wf.session("s1", store=store) as s:
            s.run(Order(1))
        holder_lease = store.acquire_lease("s1", "the holder", 60) if leased else None
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                LOCK_HOLDER[kind] + "print('LOCKED', flush=True)\nsys.stdin.read()\n",
                where,
                "s1",
                schema,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert _line(child) == "LOCKED"
            outcome = _open_within(wf, store, BOUND_S, session="s1", wait=1)
        finally:
            _reap(child)
        if leased:
            assert isinstance(outcome, af.SessionOwned), outcome
            assert holder_lease is not None and outcome.holder.token == holder_lease.token
            store.release_lease(holder_lease)
        else:
            assert isinstance(outcome, af.StoreLocked), outcome
            assert isinstance(outcome, af.CheckpointError)
            assert "stayed held" in str(outcome) and outcome.lock in str(outcome)
            if kind == "postgres":
                assert "server process" in outcome.holder
            elif os.path.exists("/proc/locks"):
                assert f"pid {child.pid}" in outcome.holder
        with wf.resume(store, session="s1", wait=WAIT_S) as s:  # the lock let go: it opens
            assert [p.request_id for p in s.pending_requests] == ["desk:1:0"]


class _FreedAsTheWaitEnds(af.MemoryStore):
    """A live lease holds every session until ``free_at``; from then on an ordinary save
    holds the store's lock for 50 ms (a grant queued behind it waits that long)."""

    free_at = 0.0

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        now = time.time()
        if now < self.free_at:
            raise af.SessionOwned(Lease(session, 1, "another worker", self.free_at))
        save_ends = self.free_at + 0.05
        if lock_wait is not None and now + lock_wait < save_ends:
            raise af.StoreLocked("the store's lock stayed held", lock="its lock", holder="a save")
        threading.Event().wait(save_ends - now)  # the save holding the lock ends
        return super().acquire_lease(session, owner, ttl, lock_wait=lock_wait)


def test_a_lease_let_go_as_the_wait_ends_is_not_lost_to_an_ordinary_save() -> None:
    """The holder lets go just before ``wait`` runs out, as another session's save holds
    the store's lock for a few milliseconds: the open waits that save out (as one with
    wait=0 would) and opens, instead of failing with StoreLocked."""
    store = _FreedAsTheWaitEnds()
    with owners.build() as wf:
        with wf.session("s1", store=store) as s:
            s.run(Order(1))
        store.free_at = time.time() + 0.5 - 0.005
        with wf.resume(store, session="s1", wait=0.5) as s:
            assert [p.request_id for p in s.pending_requests] == ["desk:1:0"]


def test_wait_bounds_a_filestore_lock_held_by_a_stalled_collection(tmp_path: Path) -> None:
    """Another process holds a FileStore's store lock exclusively (a delete or prune
    stopped half-way): a resume with wait=1 returns within its bound (its reads rarely
    need that lock), and a read that needs it under the bound of an open fails with
    StoreLocked naming the lock and the holder, instead of blocking for good."""
    root = tmp_path / "store"
    with af.FileStore(root) as first, owners.build() as wf, wf.session("s1", store=first) as s:
        s.run(Order(1))
    holder = (
        "import fcntl, os, sys\n"
        "fd = os.open(os.path.join(sys.argv[1], '.lock'), os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('LOCKED', flush=True)\nsys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", holder, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    with af.FileStore(root) as store, owners.build() as wf:
        try:
            assert _line(child) == "LOCKED"
            outcome = _open_within(wf, store, BOUND_S, session="s1", wait=1)
            if isinstance(outcome, af.Session):
                outcome.close()
            else:
                assert isinstance(outcome, af.StoreLocked), outcome
            digest = next(iter(store.latest(session="s1").blob_digests()))  # type: ignore[union-attr]
            with bounded_waits(1.0), pytest.raises(af.StoreLocked) as locked:
                store.has_blobs([digest])  # always under the store lock
        finally:
            _reap(child)
        assert ".lock" in locked.value.lock
        if os.path.exists("/proc/locks"):
            assert f"pid {child.pid}" in locked.value.holder
        with wf.resume(store, session="s1", wait=WAIT_S) as resumed:  # let go: it opens
            assert [p.request_id for p in resumed.pending_requests] == ["desk:1:0"]
            assert store.has_blobs([digest]) == {digest}


def test_opening_a_sqlite_store_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    """Another process holds the file's write lock (as one stalled inside a save does):
    opening a handle on the existing store and reading it does not wait for the lock."""
    path = tmp_path / "store.db"
    with af.SQLiteStore(path) as first, owners.build() as wf, wf.session("s1", store=first) as s:
        s.run(Order(1))
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LOCK_HOLDER["sqlite"] + "print('LOCKED', flush=True)\nsys.stdin.read()\n",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    opened: list[object] = []

    def open_and_read() -> None:
        try:
            with af.SQLiteStore(path) as store:
                latest = store.latest(session="s1")
                opened.append(latest.kind if latest is not None else None)
        except BaseException as exc:  # handed to the test
            opened.append(exc)

    try:
        assert _line(child) == "LOCKED"
        reader = threading.Thread(target=open_and_read, daemon=True)
        reader.start()
        reader.join(timeout=BOUND_S)
        assert not reader.is_alive(), "opening the store waited for the write lock"
    finally:
        _reap(child)
    assert opened == ["final"], opened


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_wait_bounds_an_owner_stopped_inside_a_save(tmp_path: Path, kind: str) -> None:
    """The owner is SIGSTOPped inside a save, holding the store's lock: wait=1 returns in
    a bound, SessionOwned while its lease lives, StoreLocked (naming it) once it expired."""
    path = str(tmp_path / ("store" if kind == "file" else "store.db"))
    ttl = 0.5
    owner = _spawn(kind, path, "s1", "stall", str(ttl))
    try:
        token = int(_line(owner).split()[1])
        with STORES[kind](tmp_path) as store, owners.build() as wf:
            assert owner.stdin is not None
            owner.stdin.write("go\n")
            owner.stdin.flush()
            assert _line(owner) == "SAVING"
            _, status = os.waitpid(owner.pid, os.WUNTRACED)  # returns once it is stopped
            assert os.WIFSTOPPED(status)
            lease = store.current_lease("s1")
            if lease is not None:  # still live: the opener is refused naming the owner
                assert lease.token == token
                outcome = _open_within(wf, store, BOUND_S, session="s1", wait=0)
                assert isinstance(outcome, af.SessionOwned | af.StoreLocked), outcome
            until(lambda: store.current_lease("s1") is None)  # its renewer is stopped too
            outcome = _open_within(wf, store, BOUND_S, session="s1", wait=1)
            assert isinstance(outcome, af.StoreLocked), outcome
            if os.path.exists("/proc/locks"):
                assert f"pid {owner.pid} (stopped" in outcome.holder
            os.kill(owner.pid, signal.SIGCONT)
            assert _line(owner) == "SAVED"  # nobody took over: its save lands
    finally:
        os.kill(owner.pid, signal.SIGCONT)
        _reap(owner)


# --- a dead owner on this host is taken over at once ------------------------------------


def _here() -> ProcessIdentity:
    here = this_process()
    if here is None:
        pytest.skip("this system has no /proc to tell whether a process exited")
    return here


def _owner_path(kind: str, where: str, schema: str) -> str:
    return f"{schema} {where}" if kind == "postgres" else where


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
@pytest.mark.parametrize("kind", ["file", "sqlite", "postgres"])
def test_a_killed_owner_on_this_host_is_taken_over_at_once(
    tmp_path: Path, kind: str, reaped: bool
) -> None:
    """kill -9 of the owner (default TTL): a resume on its host with wait=0 owns the
    session at once, whether the dead process was reaped or is a zombie; a new token,
    and the dead one's saves are refused."""
    _here()
    with _kind_store(kind, tmp_path) as (store, where, schema), owners.build() as wf:
        holder = _spawn(kind, _owner_path(kind, where, schema), "s1", "hold", "10")
        try:
            dead_token = int(_line(holder).split()[1])
            os.kill(holder.pid, signal.SIGKILL)
            os.waitid(os.P_PID, holder.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
            if reaped:
                holder.wait(timeout=WAIT_S)
            dead = store.current_lease("s1")
            assert dead is not None and dead.token == dead_token
            assert dead.remaining() > 5  # the lease itself would hold for seconds more
            started = time.monotonic()
            with wf.resume(store, session="s1", wait=0) as s:
                took = time.monotonic() - started
                assert s.lease is not None and s.lease.token > dead_token
                assert s.respond({"desk:1:0": True}).outputs == [[1, True]]
        finally:
            _reap(holder)
        assert took < 5.0  # measured ~0.05 s (bench.takeover); the lease had ~10 s left
        late, blobs = make_checkpoint(session="s1", parent=store.latest(session="s1"))
        with pytest.raises(LeaseLost):
            store.save(late, blobs, lease=dead)
        assert len(heads(store, "s1")) == 1


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_stopped_owner_is_not_taken_over(tmp_path: Path, kind: str) -> None:
    """An owner stopped by SIGSTOP is alive: its session stays its own until the TTL."""
    _here()
    path = str(tmp_path / ("store" if kind == "file" else "store.db"))
    holder = _spawn(kind, path, "s1", "hold", "10")
    try:
        token = int(_line(holder).split()[1])
        os.kill(holder.pid, signal.SIGSTOP)
        _, status = os.waitpid(holder.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        with STORES[kind](tmp_path) as store, owners.build() as wf:
            with pytest.raises(af.SessionOwned, match=f"pid {holder.pid} ") as caught:
                wf.resume(store, session="s1", wait=0)
            assert caught.value.holder.token == token
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        _reap(holder)


def test_only_a_provably_gone_owner_of_this_host_is_taken_over() -> None:
    """Forged identity tags: another boot, host or pid namespace, this very process, a
    tag not in the strict form, or none, are never taken over; a pid that now belongs to
    a process with another start time (a reused pid) is."""
    here = _here()
    refused = {
        "another boot": replace(here, boot="00000000-0000-4000-8000-000000000000").tag(),
        "another host": replace(here, host=here.host + "-other").tag(),
        "another pid namespace": replace(here, pidns=here.pidns + 1).tag(),
        "this process": here.tag(),
        "not the strict form": here.tag().replace("]", " ]"),
        "a bad host quoting": here.tag().replace(f"host={here.host}", "host=%zz"),
        "no tag": "",
    }
    store = af.MemoryStore()
    with owners.build() as wf:
        for n, tag in enumerate([*refused.values(), replace(here, start=here.start + 1).tag()]):
            with wf.session(f"s{n}", store=store) as s:
                s.run(Order(1))
            forged = store.acquire_lease(f"s{n}", f"pid {here.pid} on h (w) {tag}".strip(), 60)
            if n < len(refused):
                with pytest.raises(af.SessionOwned):
                    wf.resume(store, session=f"s{n}", wait=0)
                assert store.current_lease(f"s{n}") == forged, list(refused)[n]
                continue
            with wf.resume(store, session=f"s{n}", wait=0) as s:  # the pid was reused
                assert s.lease is not None and s.lease.token > forged.token
