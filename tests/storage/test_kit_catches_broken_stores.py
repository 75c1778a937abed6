"""The conformance kit fails stores that break a rule: each broken store below passes
``isinstance(store, CheckpointStore)`` and most of the kit, and the kit test named for
its rule must fail on it (while the built-in stores pass the same test)."""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from actorflow.errors import CheckpointError
from actorflow.storage import Checkpoint, FileStore, MemoryStore, SQLiteStore
from actorflow.storage._common import already_stored, checked_blobs
from actorflow.storage._format import encode_checkpoint
from actorflow.storage._lease import Lease
from actorflow.storage.conformance import (
    ConcurrencyTests,
    ContractTests,
    DamageTests,
    FileStoreFactory,
    MemoryStoreFactory,
    RetentionTests,
    SQLiteStoreFactory,
    StoreFactory,
)
from actorflow.storage.file._pack import encode_header


class RacyRefcounts(MemoryStore):
    """Counts blob references with a read-modify-write outside its lock."""

    def _insert(
        self,
        checkpoint_id: str,
        entry: Any,
        digests: frozenset[str],
        given: dict[str, bytes],
        lease: Lease | None,
    ) -> None:
        listed = entry[5]
        with self._lock:
            if checkpoint_id in self._index:
                raise already_stored(checkpoint_id)
            for digest in listed:
                self._blobs.setdefault(digest, given.get(digest, b""))
        holders = self._listings.get(listed, 0)
        counts = {d: self._refs.get(d, 0) for d in listed}
        time.sleep(0)  # the race: other writers read the same counts meanwhile
        with self._lock:
            if not holders:
                for digest in listed:
                    self._refs[digest] = counts[digest] + 1
            self._listings[listed] = holders + 1
            self._index[checkpoint_id] = entry


class LooseTypes(MemoryStore):
    """Answers has_blobs() with a list and prune() with None: duck-typed, not conforming."""

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        return list(super().has_blobs(digests))  # type: ignore[return-value]

    def prune(self, session: str, keep: int) -> int:
        super().prune(session, keep)
        return None  # type: ignore[return-value]


@dataclass
class _Same:
    store: MemoryStore

    def __call__(self) -> MemoryStore:
        return self.store


class _Separate:
    """A 'second handle' that is another, empty store."""

    def __call__(self) -> MemoryStore:
        return MemoryStore()


class TornFileStore(FileStore):
    """Writes each pack in place, record first, and checks and appends the blobs after:
    a crash in between leaves half a pack visible under its final name."""

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        record = encode_checkpoint(checkpoint)
        sizes = sorted((d, len(b)) for d, b in blobs.items())
        final = self.path / "packs" / f"{checkpoint.id}.pack"
        with open(final, "wb") as f:
            f.write(encode_header(len(record), sizes) + record)
            f.flush()
            os.fsync(f.fileno())
            given = checked_blobs(checkpoint.id, blobs, checkpoint.blob_digests())  # hashes: slow
            for digest, _ in sizes:
                f.write(given[digest])
            f.flush()
            os.fsync(f.fileno())


@dataclass(frozen=True)
class TornFileStoreFactory(FileStoreFactory):
    def __call__(self) -> FileStore:
        return TornFileStore(self.path)


class HidesDamage(SQLiteStore):
    """Opens a damaged file as an empty store instead of raising: the silent fresh start."""

    def __init__(self, path: str) -> None:
        try:
            super().__init__(path)
            self.hidden = False
        except CheckpointError:
            self.hidden = True

    def latest(
        self, *, workflow: str | None = None, session: str | None = None
    ) -> Checkpoint | None:
        return None if self.hidden else super().latest(workflow=workflow, session=session)

    def list(self, **filters: Any) -> builtins.list[Checkpoint]:
        return [] if self.hidden else super().list(**filters)

    def verify(self) -> builtins.list[str]:
        return [] if self.hidden else super().verify()

    def close(self) -> None:
        if not self.hidden:
            super().close()


@dataclass(frozen=True)
class HidesDamageFactory(SQLiteStoreFactory):
    def __call__(self) -> SQLiteStore:
        return HidesDamage(self.path)


class CopiedIndex(MemoryStore):
    """Adds each record to a copy of its index and puts the copy back, outside its lock:
    of two saves at once, the one that puts its copy back last loses the other's record.
    A handle that is fine for one session at a time, and not safe to share."""

    def _insert(
        self,
        checkpoint_id: str,
        entry: Any,
        digests: frozenset[str],
        given: dict[str, bytes],
        lease: Lease | None,
    ) -> None:
        copy = dict(self._index)
        super()._insert(checkpoint_id, entry, digests, given, lease)
        time.sleep(0)  # the race: other saves copy the index meanwhile
        copy[checkpoint_id] = entry
        self._index = copy


class ClosesUnderCalls(SQLiteStore):
    """Closes every connection at once, those other threads are running statements on too."""

    def close(self) -> None:
        connections = self._connections
        with connections._conns_lock:
            connections._closed = True
            held, connections._conns = connections._conns, []
        for each in held:
            each.conn.close()
        self._wal.close()


@dataclass(frozen=True)
class ClosesUnderCallsFactory(SQLiteStoreFactory):
    def __call__(self) -> SQLiteStore:
        return ClosesUnderCalls(self.path)


class PlainErrorWhenClosed(MemoryStore):
    """Refuses calls after close() with a plain CheckpointError, not StoreClosed."""

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError("MemoryStore is closed; open a new one")


class RetentionBlindToLeases(MemoryStore):
    """Deletes idle sessions whole by age alone, open ones included."""

    def prune_older_than(self, cutoff: float, *, whole_sessions: bool = False) -> int:
        if not whole_sessions:
            return super().prune_older_than(cutoff)
        with self._lock:
            idle = [s for s in self.sessions() if self.list(session=s)[-1].created_at < cutoff]
        return sum(self.prune(session, 0) for session in idle)


def _run(test: Callable[..., None], factory: StoreFactory, takes_factory: bool) -> None:
    store = factory()
    try:
        test(store, factory) if takes_factory else test(store)
    finally:
        store.close()


_CASES: dict[
    str,
    tuple[
        Callable[[Path], StoreFactory], Callable[[Path], StoreFactory], Callable[..., None], bool
    ],
] = {
    "racy blob reference counts": (
        lambda _: MemoryStoreFactory(RacyRefcounts()),
        lambda _: MemoryStoreFactory(),
        DamageTests().test_concurrent_saves_prunes_and_verify_threads,
        False,
    ),
    "methods that only look right": (
        lambda _: MemoryStoreFactory(LooseTypes()),
        lambda _: MemoryStoreFactory(),
        ContractTests().test_is_a_checkpoint_store,
        False,
    ),
    "a factory handing out one object": (
        lambda _: _Same(MemoryStore()),
        lambda p: FileStoreFactory(str(p / "ok")),
        ContractTests().test_second_handle_sees_saves,
        True,
    ),
    "a second handle on other data": (
        lambda _: _Separate(),
        lambda p: SQLiteStoreFactory(str(p / "ok.db")),
        ContractTests().test_second_handle_sees_saves,
        True,
    ),
    "packs written in place (torn by a crash)": (
        lambda p: TornFileStoreFactory(str(p / "torn")),
        lambda p: FileStoreFactory(str(p / "ok")),
        DamageTests().test_writer_killed_mid_save_leaves_the_previous_cut,
        True,
    ),
    "an index copied and put back outside the lock": (
        lambda _: MemoryStoreFactory(CopiedIndex()),
        lambda p: SQLiteStoreFactory(str(p / "ok.db")),
        ConcurrencyTests().test_one_handle_serves_sessions_in_threads,
        False,
    ),
    "connections closed under running calls (a crash)": (
        lambda p: ClosesUnderCallsFactory(str(p / "closes.db")),
        lambda p: SQLiteStoreFactory(str(p / "ok.db")),
        ConcurrencyTests().test_close_under_load_raises_store_closed,
        True,
    ),
    "a closed store that does not say StoreClosed": (
        lambda _: MemoryStoreFactory(PlainErrorWhenClosed()),
        lambda _: MemoryStoreFactory(),
        ConcurrencyTests().test_close_under_load_raises_store_closed,
        True,
    ),
    "retention deleting a session a live lease holds": (
        lambda _: MemoryStoreFactory(RetentionBlindToLeases()),
        lambda _: MemoryStoreFactory(),
        RetentionTests().test_prune_older_than_whole_sessions_spares_an_open_session,
        False,
    ),
    "latest() hiding a damaged header": (
        lambda p: HidesDamageFactory(str(p / "hides.db")),
        lambda p: SQLiteStoreFactory(str(p / "ok.db")),
        DamageTests().test_damaged_header_is_reported,
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_the_kit_fails_a_broken_store(case: str, tmp_path: Path) -> None:
    """The kit test for the rule fails on the broken store and passes on a correct one."""
    broken, correct, test, takes_factory = _CASES[case]
    _run(test, correct(tmp_path), takes_factory)
    # A crash lands where it lands: the crash test gets three tries to catch the torn
    # writer (each try kills it four times, at different points of a save).
    tries = 3 if "crash" in case else 1
    failures = []
    for attempt in range(tries):
        try:
            _run(test, broken(tmp_path / str(attempt)), takes_factory)
        except Exception as exc:  # any failure of the kit test: AssertionError, pytest's Failed...
            failures.append(exc)
            break
    assert failures, f"the kit passed a store with {case}"
