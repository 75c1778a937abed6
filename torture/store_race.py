"""Store races: handles that save, collect and read one store at once, checked as they go.

Trials drive workflows; this drives a store alone, harder than a workflow does. Each
handle of the store runs in a thread of its own:

- **savers** append records to a few *kept* sessions, each under a lease held for the
  whole race (as an open session holds one), and to many short-lived *doomed* ones;
- **collectors** delete doomed records, prune doomed sessions, and prune whole idle
  sessions by age (which must leave every leased session alone);
- **readers** check, over and over, that every kept session is found whole: its newest
  record is the one last saved or newer (``latest``), ``list`` and ``sessions`` hold
  it, its lineage reads (``history``), and its blobs load (``load_blobs``,
  ``has_blobs``).

Any breach, and any exception of a reader or saver, is a finding. What collectors
raise is one too, but for ``CheckpointNotFound`` (two collectors deleting one record).

Run: ``python -m torture.store_race --seconds 60 --stores file3,sqlite --seed 7``;
``tests/test_torture.py`` runs a few seconds on every store.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from actorflow.errors import CheckpointNotFound
from actorflow.storage import BlobBatchReader, Checkpoint, Lease
from actorflow.storage.conformance import make_checkpoint

from .stores import KINDS, drop_store, open_store

__all__ = ["race"]

KEPT = 6
"""Sessions that must stay whole (leased for the whole race)."""
DOOMED = 50
"""Sessions that collectors delete and prune."""


class _Race:
    """One race on one store: its handles' threads, the kept sessions' newest records,
    and what was found."""

    def __init__(self, open_handle: Callable[[], Any], seed: int) -> None:
        self._open = open_handle
        self._seed = seed
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.findings: list[str] = []
        self._newest: dict[str, Checkpoint | None] = {f"kept{i}": None for i in range(KEPT)}
        self._leases: dict[str, Lease] = {}

    def run(
        self, seconds: float, *, savers: int = 2, collectors: int = 2, readers: int = 3
    ) -> None:
        owner = self._open()
        try:
            for session in self._newest:
                self._leases[session] = owner.acquire_lease(session, "store-race", 3600)
            roles = [(self._saver, savers), (self._collector, collectors), (self._reader, readers)]
            threads = [
                threading.Thread(target=self._guarded, args=(role, n), daemon=True)
                for role, count in roles
                for n in range(count)
            ]
            for thread in threads:
                thread.start()
            self._stop.wait(seconds)
            self._stop.set()
            for thread in threads:
                thread.join(60)
                if thread.is_alive():
                    self._found(f"{thread.name} did not stop within 60 s")
        finally:
            owner.close()

    def _found(self, finding: str) -> None:
        with self._lock:
            self.findings.append(finding)

    def _guarded(self, role: Callable[[Any, random.Random], None], n: int) -> None:
        name = f"{role.__name__.strip('_')} {n}"
        rng = random.Random(f"{self._seed}:{name}")
        try:
            store = self._open()
        except Exception as exc:  # noqa: BLE001 - a finding, reported with the others
            self._found(f"{name} could not open the store: {exc!r}")
            return
        try:
            role(store, rng)
        except Exception as exc:  # noqa: BLE001 - a finding, reported with the others
            self._found(f"{name} failed: {exc!r}")
        finally:
            store.close()

    def _saver(self, store: Any, rng: random.Random) -> None:
        while not self._stop.is_set():
            session = rng.choice(sorted(self._newest))
            with self._lock:  # one saver a session at a time, as its lease owner would
                checkpoint, blobs = make_checkpoint(session=session, parent=self._newest[session])
                store.save(checkpoint, blobs, lease=self._leases[session])
                self._newest[session] = checkpoint
            doomed, doomed_blobs = make_checkpoint(session=f"doomed{rng.randrange(DOOMED)}")
            store.save(doomed, doomed_blobs)

    def _collector(self, store: Any, rng: random.Random) -> None:
        while not self._stop.is_set():
            victims = [cp for cp in store.list() if cp.session.startswith("doomed")]
            if not victims:
                continue
            victim = rng.choice(victims)
            roll = rng.random()
            try:
                if roll < 0.4:
                    store.delete(victim.id)
                elif roll < 0.8:
                    store.prune(victim.session, 1)
                else:
                    store.prune_older_than(time.time() - 0.2, whole_sessions=True)
            except CheckpointNotFound:
                pass  # another collector deleted it first

    def _reader(self, store: Any, rng: random.Random) -> None:
        while not self._stop.is_set():
            session = rng.choice(sorted(self._newest))
            with self._lock:
                saved = self._newest[session]
            if saved is None:
                continue
            newest = store.latest(session=session)
            if newest is None or newest.id < saved.id:
                self._found(
                    f"latest({session!r}) is {newest and newest.id}, after {saved.id} was saved"
                )
                continue
            if saved.id not in {cp.id for cp in store.list(session=session)}:
                self._found(f"list(session={session!r}) misses {saved.id}")
            lineage = store.history(newest.id)
            if lineage[0].id != newest.id or any(cp.session != session for cp in lineage):
                self._found(f"history({newest.id}) of {session!r} starts or strays wrong")
            if session not in store.sessions():
                self._found(f"sessions() misses {session!r}")
            digests = sorted(newest.blob_digests())
            if isinstance(store, BlobBatchReader):
                loaded = set(store.load_blobs(digests))
            else:
                loaded = {d for d in digests if store.load_blob(d)}
            if loaded != set(digests):
                self._found(f"load_blobs of {newest.id} ({session!r}) is short")
            if store.has_blobs(digests) != set(digests):
                self._found(f"has_blobs of {newest.id} ({session!r}) is short")


def race(kind: str, seconds: float, seed: int) -> list[str]:
    """Race handles on a new store of ``kind`` for ``seconds``; the findings ([] if none)."""
    where = tempfile.mkdtemp(prefix=f"store-race-{kind}-")
    shared = open_store(kind, where) if kind == "memory" else None  # one store, many users

    def open_handle() -> Any:
        return _Unclosed(shared) if shared is not None else open_store(kind, where)

    try:
        one = _Race(open_handle, seed)
        one.run(seconds)
        return one.findings
    finally:
        drop_store(kind, where)
        shutil.rmtree(where, ignore_errors=True)


class _Unclosed:
    """The one MemoryStore, handed to each thread: closing it is the race's, not theirs."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); 0 when nothing was found."""
    parser = argparse.ArgumentParser(prog="python -m torture.store_race", description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0, help="per store")
    parser.add_argument("--stores", default="memory,file2,file3,sqlite")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    failed = False
    for kind in args.stores.split(","):
        if kind not in KINDS:
            parser.error(f"unknown store {kind!r}; use {', '.join(KINDS)}")
        findings = race(kind, args.seconds, args.seed)
        print(f"{'ok  ' if not findings else 'FAIL'} {kind}:{args.seed}: {len(findings)} findings")
        for finding in findings[:20]:
            print(f"     {finding}")
        failed = failed or bool(findings)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
