"""Shared parts of the conformance kit: the factory contract, record builders, damage tools.

Private: the public front is ``actorflow.storage.conformance``. Requires pytest.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any, Protocol

import pytest

from actorflow.storage._format import Checkpoint, CheckpointKind, blob_digest, new_checkpoint_id
from actorflow.storage._history import HistoryEntry
from actorflow.storage._protocol import CheckpointStore

from ._factories import Mutation

WAIT_S = 45.0  # bound on every wait for threads and processes (under pytest-timeout's 60 s)


def child_processes() -> SpawnContext | ForkServerContext:
    """How the kit starts its child processes: ``forkserver`` where the platform has
    it, else ``spawn``.

    Either way a child starts clean: it inherits none of the test process's threads,
    locks, open stores or connections, which is what a crash or a race between
    processes must be tested from. ``spawn`` pays for that with a new interpreter that
    imports pytest, the kit and the store again for every child; the fork server
    imports the kit once and forks each child from itself. Measured on a 2-vCPU VM:
    actorflow's run of the kit over its wrapped and encrypted stores starts 108
    children and took 106 s with ``spawn``, 79 s with the fork server. The server is
    the process's own (``multiprocessing`` keeps one a process); the kit only asks it
    to preload the kit's modules. A child
    gets the parent's working folder and ``sys.path`` at its start, but the environment
    variables of when the server started: a factory carries what it needs to open
    its store (a DSN, a path) in its own fields.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", "actorflow.storage.conformance"])
    return context


class StoreFactory(Protocol):
    """What the ``store_factory`` fixture returns.

    Calling it returns a store on the same data each time (a new object for stores
    that can have several handles; in-memory stores may return the same object).
    The kit closes every store it opens. Optional attributes, looked up by name:

    - ``durable: bool`` -- data survives ``close()`` and a reopen (reopen tests).
    - ``multiprocess: bool`` -- stores opened in other processes share the data;
      the factory must then be picklable and its class importable by module path,
      because it is sent to child processes, which start clean (multi-process tests:
      see :func:`child_processes`).
    - ``corrupt_record(checkpoint_id, mutate)`` / ``corrupt_blob(digest, mutate)``
      -- replace the stored bytes with ``mutate(stored bytes)`` (corruption tests).
    - ``corrupt_column(checkpoint_id, column, value)`` -- for a store that keeps a
      record's ``id``, ``session``, ``workflow`` and ``kind`` beside it (a row's
      columns): set that one to ``value`` (damaged-row test).
    - ``set_lease_expiry(session, expires_at) -> bool`` -- overwrite the expiry of the
      session's lease row (damaged-lease test); False if the medium cannot hold it.
    """

    def __call__(self) -> CheckpointStore: ...


def make_checkpoint(
    *,
    session: str = "session-a",
    workflow: str = "workflow-a",
    parent: Checkpoint | None = None,
    kind: CheckpointKind = CheckpointKind.STEP,
    chunks: Mapping[str, Sequence[bytes]] | None = None,
    metadata: Mapping[str, Any] | None = None,
    runtime: bytes = b"\x90",
    history: Sequence[int] = (),
) -> tuple[Checkpoint, dict[str, bytes]]:
    """A new record and the blobs it references, for tests.

    Args:
        chunks: executor id -> snapshot chunks; by default one executor with one
            random chunk, so the record references a blob of its own.
        history: the seqs of history entries the record carries (see :func:`entry_data`).

    Returns:
        The record (a fresh time-sortable id, ``parent``'s id as parent) and the
        digest -> bytes map to pass to ``save``.
    """
    if chunks is None:
        chunks = {"executor": [os.urandom(16)]}
    blobs = {blob_digest(c): c for cs in chunks.values() for c in cs}
    checkpoint_id = new_checkpoint_id()
    checkpoint = Checkpoint(
        id=checkpoint_id,
        parent_id=None if parent is None else parent.id,
        session=session,
        workflow=workflow,
        graph_signature="ab" * 32,
        superstep=0 if parent is None else parent.superstep + 1,
        kind=kind,
        created_at=time.time(),
        executors={e: tuple(blob_digest(c) for c in cs) for e, cs in chunks.items()},
        runtime=runtime,
        metadata=dict(metadata or {}),
        history=tuple(
            HistoryEntry(seq, "noted", time.time(), entry_data(session, seq), checkpoint_id)
            for seq in history
        ),
    )
    return checkpoint, blobs


def entry_data(session: str, seq: int) -> bytes:
    """The data :func:`make_checkpoint` gives the history entry ``seq`` of ``session``."""
    return f"{session}#{seq}".encode() + bytes(seq % 7)


def save_new(
    store: CheckpointStore, *, parent: Checkpoint | None = None, **kwargs: Any
) -> Checkpoint:
    checkpoint, blobs = make_checkpoint(parent=parent, **kwargs)
    store.save(checkpoint, blobs)
    return checkpoint


def damage_hook(factory: StoreFactory, name: str) -> Callable[[str, Mutation], None]:
    hook: Callable[[str, Mutation], None] | None = getattr(factory, name, None)
    if hook is None:
        pytest.skip(f"{type(factory).__name__} has no {name}() hook to damage stored bytes")
    return hook


def flip(position: int) -> Mutation:
    def mutate(data: bytes) -> bytes:
        i = position % len(data)
        return data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1 :]

    return mutate


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def scribble(value: Any) -> None:
    """Mutate everything mutable reachable from ``value`` (the MAF #7683 reproduction)."""
    if isinstance(value, list):
        for item in value:
            scribble(item)
        value.append("scribbled")
    elif isinstance(value, dict):
        for item in value.values():
            scribble(item)
        value["scribbled"] = True
    elif isinstance(value, Mapping | tuple):
        for item in value.values() if isinstance(value, Mapping) else value:
            scribble(item)


def scribble_checkpoint(checkpoint: Checkpoint) -> None:
    scribble(checkpoint.metadata)
    scribble(checkpoint.executors)


RICH_METADATA: dict[str, Any] = {
    "user": "ana",
    "turn": 7,
    "score": 0.25,
    "flags": [True, False, None],
    "nested": {"list": [1, [2, {"deep": b"\x00\xff"}]], "text": "naïve ✓"},
}


def save_lineage_in_child(
    *,
    factory: StoreFactory,
    session: str,
    count: int,
    shared: bytes,
    barrier: Any,
    results: Any,
) -> None:
    """Child-process body of the multi-process test (module level so a child process finds it)."""
    try:
        store = factory()
        try:
            barrier.wait(timeout=WAIT_S)
            parent = None
            for i in range(count):
                chunks = {"shared": [shared], "own": [f"{session}/{i}".encode()]}
                parent = save_new(store, session=session, parent=parent, chunks=chunks)
        finally:
            store.close()
        results.put((session, None))
    except BaseException:
        results.put((session, traceback.format_exc()))
        raise


class KitBase:
    """The fixtures every part of the kit uses."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """Override: return a factory for the store under test (see StoreFactory)."""
        pytest.fail("override the store_factory fixture in your StoreConformance subclass")

    @pytest.fixture
    def store(self, store_factory: StoreFactory) -> Iterator[CheckpointStore]:
        """A store opened by the factory, closed after the test."""
        store = store_factory()
        yield store
        store.close()


def join_children(children: list[Any], results: Any, expected: int) -> list[tuple[str, str | None]]:
    """Collect up to ``expected`` reports from child processes, then join them all.

    Stops early when every child has died (one that could not import the factory
    fails the test at once, not at the deadline); a child still alive after
    ``WAIT_S`` is killed.
    """
    reports: list[tuple[str, str | None]] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(reports) < expected and time.monotonic() < deadline:
            try:
                reports.append(results.get(timeout=0.5))
            except queue.Empty:
                if not any(c.is_alive() for c in children):
                    break
    finally:
        for child in children:
            child.join(timeout=WAIT_S)
            if child.is_alive():
                child.kill()
                child.join(timeout=WAIT_S)
    return reports
