"""The stores a torture trial runs on, and the wrappers that fail, gate and kill around them.

Kinds: ``memory``, ``file2`` and ``file3`` (FileStore layouts 2 and 3), ``sqlite`` and
``postgres`` (a schema of its own per trial, on the server named by
``ACTORFLOW_TEST_PG_DSN``). Only the durable kinds survive a process: a ``memory``
trial keeps every attempt in one process.

:class:`FaultyStore` is what a session of a trial is given: it delegates every call
to the real store and, on the way, counts saves, fails the ones the plan names, holds
each save until the outputs it covers are logged (:class:`Progress`), and kills or
stops the process at the planned moment.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import actorflow as af
from actorflow.errors import CheckpointError
from actorflow.storage import Checkpoint, Lease

__all__ = [
    "DURABLE",
    "KINDS",
    "FaultyStore",
    "InjectedWriteFailure",
    "Progress",
    "drop_store",
    "open_store",
]

KINDS = ("memory", "file2", "file3", "sqlite", "postgres")
"""Every store kind a trial can run on."""
DURABLE = ("file2", "file3", "sqlite", "postgres")
"""The kinds whose data outlives a process (crash and multi-process trials)."""


def open_store(kind: str, where: str) -> Any:
    """A new handle on the trial's store. ``where``: a folder (a schema for postgres)."""
    if kind == "memory":
        return af.MemoryStore()
    if kind in ("file2", "file3"):
        return af.FileStore(Path(where) / "store", layout=int(kind[-1]))
    if kind == "sqlite":
        return af.SQLiteStore(Path(where) / "store.db")
    if kind == "postgres":
        return af.PostgresStore(_dsn(), schema=_schema(where))
    raise ValueError(f"unknown store kind {kind!r}; use one of {', '.join(KINDS)}")


def drop_store(kind: str, where: str) -> None:
    """Remove what a trial stored on a server (folders are the caller's to remove)."""
    if kind != "postgres":
        return
    import psycopg  # noqa: PLC0415 - the postgres extra, only for postgres trials

    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {_schema(where)} CASCADE")


def _dsn() -> str:
    dsn = os.environ.get("ACTORFLOW_TEST_PG_DSN")
    if not dsn:
        raise RuntimeError(
            "postgres trials need a server: run them under `bash .ci/postgres.sh`, which "
            "sets ACTORFLOW_TEST_PG_DSN"
        )
    return dsn


def _schema(where: str) -> str:
    return "torture_" + "".join(c if c.isalnum() else "_" for c in Path(where).name).lower()


class InjectedWriteFailure(CheckpointError):
    """A store write failed on purpose (a torture fault plan)."""


class Progress:
    """The superstep whose events a consumer has logged completely, per session."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._logged: dict[str, int] = {}

    def advance(self, session: str, superstep: int) -> None:
        with self._cond:
            self._logged[session] = max(self._logged.get(session, -1), superstep)
            self._cond.notify_all()

    def wait_for(self, session: str, superstep: int, timeout: float = 60.0) -> None:
        with self._cond:
            if not self._cond.wait_for(
                lambda: self._logged.get(session, -1) >= superstep, timeout=timeout
            ):
                raise RuntimeError(
                    f"the consumer of session {session!r} did not log superstep {superstep}"
                )


def _kill_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _stop_now() -> None:
    os.kill(os.getpid(), signal.SIGSTOP)


class FaultyStore:
    """A store that fails, gates and kills on a plan, delegating everything else.

    Args:
        inner: the real store.
        fail_saves: 1-based numbers of save calls (counted over this object) that fail:
            ``"before"`` (nothing written) or ``"after"`` (written, then reported failed).
        kill: the process-ending plan of this attempt, or None: ``{"at": "save",
            "n": k, "kind": kind or None, "when": "before" | "after" | "inside" |
            "stop"}`` (the k-th save, of that record kind if given; ``inside`` kills
            a random few microseconds into the write, ``stop`` SIGSTOPs the process
            before it, ``stop_inside`` a few microseconds into it).
        progress: when given, each save waits until its session's consumer logged the
            events the record covers (so a stored cut's outputs are always in the log).
        logs: session id -> its log, which gets ``["saving", id, superstep, kind]``
            before each write begins (a record a crash lets land is then known as
            this attempt's, whether or not the runtime heard it was written).
        partial_done: called after each successful partial save with (session, superstep).
    """

    def __init__(
        self,
        inner: Any,
        *,
        fail_saves: Mapping[int, str] | None = None,
        kill: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
        logs: Mapping[str, Callable[..., None]] | None = None,
        partial_done: Callable[[str, int], None] | None = None,
        seed: int = 0,
    ) -> None:
        self.inner = inner
        self._fail = dict(fail_saves or {})
        self._kill = dict(kill) if kill and kill.get("at") == "save" else None
        self._progress = progress
        self._logs = logs or {}
        self._partial_done = partial_done
        self._lock = threading.Lock()
        self._saves = 0
        self._kind_saves: dict[str, int] = {}
        self._rng = random.Random(seed)

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        kind = str(checkpoint.kind)  # a StrEnum: its value
        if self._progress is not None:
            if kind == "partial":  # a finished part of a superstep: its events come later
                self._progress.wait_for(checkpoint.session, checkpoint.superstep - 1)
            elif kind != "entry" and checkpoint.superstep > 0:
                # (Superstep 0 has no events to log: a run that failed in its first
                # superstep ends with a halt cut of superstep 0.)
                self._progress.wait_for(checkpoint.session, checkpoint.superstep)
        with self._lock:
            self._saves += 1
            number = self._saves
            self._kind_saves[kind] = self._kind_saves.get(kind, 0) + 1
            kind_number = self._kind_saves[kind]
        when = self._kill_when(number, kind, kind_number)
        if when == "before":
            _kill_now()
        if when == "stop":
            # Sent to this thread, it stops the process before this thread goes on
            # (sent to the process, another thread may take it while this one runs
            # into the save and takes the store's lock first).
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        failure = self._fail.get(number)
        if failure == "before":
            raise InjectedWriteFailure(
                f"injected failure of save #{number} ({kind}), nothing written"
            )
        log = self._logs.get(checkpoint.session)
        if log is not None:
            log("saving", checkpoint.id, checkpoint.superstep, kind)
        if when == "inside":
            threading.Timer(self._rng.uniform(0, 0.002), _kill_now).start()
        if when == "stop_inside":  # stopped holding the store's lock, most often
            threading.Timer(self._rng.uniform(0, 0.002), _stop_now).start()
        self.inner.save(checkpoint, blobs, lease=lease)
        if when == "after":
            _kill_now()
        if failure == "after":
            raise InjectedWriteFailure(
                f"injected failure of save #{number} ({kind}), after the write"
            )
        if kind == "partial" and self._partial_done is not None:
            self._partial_done(checkpoint.session, checkpoint.superstep)

    def _kill_when(self, number: int, kind: str, kind_number: int) -> str | None:
        plan = self._kill
        if plan is None:
            return None
        wanted = plan.get("kind")
        if wanted is None and number == plan["n"]:
            return str(plan["when"])
        if wanted == kind and kind_number == plan["n"]:
            return str(plan["when"])
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
