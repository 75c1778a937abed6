"""Child process for tests/runtime/test_crash_recovery.py: run (or resume) a corpus workflow
with a durable store, log what it sees, and optionally stop dead at a chosen point.

Usage: ``python -m tests.support.crash_child '<json config>'`` (from the repository
root, or with it on ``PYTHONPATH``). Config keys:

- ``store``: ``"sqlite"``, ``"file"`` or ``"postgres"``; ``path``: where it lives
  (Postgres: the schema name, and ``dsn`` the server).
- ``family``, ``params``, ``kwargs``: the graph, built with ``graphs.build``.
- ``session``: the session id; ``mode``: ``"run"`` (fresh, with the graph's input)
  or ``"resume"`` (latest checkpoint of the session, no new input).
- ``log``: file that receives one JSON line per fact: ``["out", superstep,
  executor, value]`` per output, ``["ckpt", id, superstep, kind]`` per checkpoint
  reported written, ``["end", status]`` when the run ends.
- ``ray``: absent, or the address of a running Ray: the session's executors are
  hosted there (``RayBackend``), this process being the driver.
- ``block``: ``null``, or where to stop and wait to be killed:
  ``{"at": "handler", "executor": id, "superstep": n}`` (inside that handler),
  ``{"at": "after_save", "superstep": n}`` (the step checkpoint of superstep n is
  durable, superstep n + 1 has not started), ``{"at": "in_save", "superstep": n}``
  (inside the store's write of that checkpoint: blobs written, record not committed;
  Postgres: blob and record rows written in the open transaction, COMMIT not sent).

Protocol on stdout, one line each: ``READY`` before the run starts, ``BLOCKED`` once
stopped at the block point, ``DONE`` at the end. The child never sleeps: it blocks
on an Event (bounded) until the parent kills it.

Outputs are logged before the checkpoint that covers them is written: the store
wrapper waits until this process has logged every event up to the checkpoint's
superstep. So an output of a superstep that a stored checkpoint covers is always
in the log, which is what lets the parent count outputs exactly once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from collections.abc import Mapping
from typing import Any

import actorflow as af
from actorflow.actors.ray._host import RayHost
from actorflow.storage import Checkpoint, Lease
from actorflow.storage.file import _segment as segment
from actorflow.storage.sqlite._connections import SQLiteConnections
from tests.support import graphs, python_path

_STUCK_SECONDS = 60.0  # the parent kills us long before this; it only bounds a lost parent


def _say(word: str) -> None:
    sys.stdout.write(word + "\n")
    sys.stdout.flush()


def _stop_here() -> None:
    """Signal the parent and wait to be killed."""
    _say("BLOCKED")
    threading.Event().wait(_STUCK_SECONDS)
    os._exit(3)


class Progress:
    """The superstep whose events the consumer has logged completely."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._logged = -1

    def advance(self, superstep: int) -> None:
        with self._cond:
            self._logged = max(self._logged, superstep)
            self._cond.notify_all()

    def wait_for(self, superstep: int) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._logged >= superstep, timeout=30):
                raise RuntimeError(f"consumer did not log superstep {superstep} in time")


class GatedStore:
    """Delegates to a real store; holds each save until its outputs are logged,
    and stops dead at the configured block point."""

    def __init__(
        self,
        inner: Any,
        progress: Progress,
        block: Mapping[str, Any] | None,
        arm_in_save: threading.Event,
    ) -> None:
        self._inner = inner
        self._progress = progress
        self._block = block or {}
        self._arm_in_save = arm_in_save

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        if checkpoint.kind == "partial":
            # An executor's finished part, saved mid-superstep: its events come at the barrier.
            self._progress.wait_for(checkpoint.superstep - 1)
        elif checkpoint.kind != "entry" and checkpoint.superstep > 0:
            self._progress.wait_for(checkpoint.superstep)  # (superstep 0 has no events)
        hit = checkpoint.kind == "step" and checkpoint.superstep == self._block.get("superstep")
        if hit and self._block.get("at") == "in_save":
            self._arm_in_save.set()
        self._inner.save(checkpoint, blobs, lease=lease)
        if hit and self._block.get("at") == "after_save":
            _stop_here()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


LEASE_TTL = 0.5
"""Seconds a killed child's lease outlives it (short: the next process waits that long)."""
LEASE_WAIT = 30.0
"""Bound on waiting for a killed process's lease to expire."""


def _open_postgres(config: Mapping[str, Any], gate: threading.Event) -> Any:
    import psycopg
    import psycopg_pool

    schema = config["path"]
    record_insert = f"INSERT INTO {schema}.checkpoints "

    class TracedCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            cursor = super().execute(query, params, **kwargs)
            if gate.is_set() and record_insert in str(query):
                # The record's INSERT is a save's last statement before its COMMIT:
                # fetching its result syncs the pipeline (no COMMIT), so the server
                # has run every statement of the transaction when the parent looks.
                self.fetchone()
                _stop_here()
            return cursor

    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        config["dsn"],
        kwargs={"autocommit": True, "cursor_factory": TracedCursor},
        min_size=1,
        max_size=4,
        check=psycopg_pool.ConnectionPool.check_connection,
        open=True,
    )
    _CLOSE_AT_END.append(pool.close)
    return af.PostgresStore(pool, schema=schema)


_CLOSE_AT_END: list[Any] = []


def _open_store(config: Mapping[str, Any], gate: threading.Event) -> Any:
    kind = config["store"]
    if kind == "postgres":
        return _open_postgres(config, gate)
    if kind == "sqlite":
        real_connect = SQLiteConnections.connect

        def traced_connect(self: SQLiteConnections) -> sqlite3.Connection:
            conn = real_connect(self)
            conn.set_trace_callback(_in_transaction)
            return conn

        def _in_transaction(statement: str) -> None:
            # Rows for blobs and the record are inserted, the transaction is open.
            if gate.is_set() and statement.lstrip().upper().startswith("INSERT INTO REFS"):
                _stop_here()

        # Every connection the store opens is traced (this child process only).
        SQLiteConnections.connect = traced_connect  # type: ignore[method-assign]
        return af.SQLiteStore(config["path"])
    if kind == "file":
        real_pwritev = os.pwritev

        def pwritev(fd: int, buffers: Any, offset: int, *args: Any) -> int:
            # The checkpoint's frame (record and new blobs) is half written to the
            # segment: the kill leaves it cut short, as a crash mid-write would.
            if gate.is_set():
                data = b"".join(bytes(b) for b in buffers)
                real_pwritev(fd, [data[: len(data) // 2]], offset)
                _stop_here()
            return real_pwritev(fd, buffers, offset, *args)

        segment.os.pwritev = pwritev  # type: ignore[attr-defined]  # this child process only
        return af.FileStore(config["path"])
    raise ValueError(f"unknown store {kind!r}")


def _note_worker_pids(backend: af.RayBackend, path: str) -> None:
    """Append the pid of every Ray worker ``backend`` starts to ``path``, one per line,
    before the worker takes its first call: the parent then knows exactly which
    worker processes were this driver's (other drivers may start workers meanwhile)."""
    spawn = backend.spawn

    def spawn_and_note(executor: str) -> Any:
        host = spawn(executor)
        assert isinstance(host, RayHost)  # spares=0 and no executor on the driver
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{host.pid()}\n")
        return host

    backend.spawn = spawn_and_note  # type: ignore[method-assign]  # this backend only


def main() -> None:
    config = json.loads(sys.argv[1])
    block = config.get("block")
    if block and block["at"] == "handler":
        target = (block["executor"], block["superstep"])

        def hook(executor_id: str, superstep: int) -> None:
            if (executor_id, superstep) == target:
                _stop_here()

        graphs.HOOK = hook
    case = graphs.build(config["family"], *config["params"], **config.get("kwargs", {}))
    progress = Progress()
    gate = threading.Event()
    inner = _open_store(config, gate)
    store = GatedStore(inner, progress, block, gate)
    workflow = case.workflow
    backend = None
    if config.get("ray"):
        init = {"address": config["ray"], "log_to_driver": False, "configure_logging": False}
        env = {"runtime_env": {"env_vars": {"PYTHONPATH": python_path()}}}
        backend = af.RayBackend(init={**init, **env}, spares=0)
        _note_worker_pids(backend, config["log"] + ".pids")
    if config["mode"] == "run":
        # A short lease: the parent takes the session over soon after killing us.
        session = workflow.session(
            config["session"], store=store, lease_ttl=LEASE_TTL, backend=backend
        )
        value: Any = case.input
    else:
        session = workflow.resume(
            store,
            session=config["session"],
            wait=LEASE_WAIT,
            lease_ttl=LEASE_TTL,
            backend=backend,
        )
        value = None
        # Supersteps up to the resumed cut were logged by the process that ran them.
        latest = inner.latest(session=config["session"])
        cut = latest.superstep - 1 if latest.kind == "partial" else latest.superstep
        progress.advance(cut)
    with open(config["log"], "a", buffering=1, encoding="utf-8") as log, session:
        _say("READY")
        events = session.stream(value) if value is not None else session.stream()
        status = "failed"
        for event in events:
            if isinstance(event, af.OutputEvent):
                log.write(json.dumps(["out", event.superstep, event.executor, event.value]) + "\n")
            elif isinstance(event, af.CheckpointedEvent):
                log.write(
                    json.dumps(["ckpt", event.checkpoint_id, event.superstep, event.kind]) + "\n"
                )
            elif isinstance(event, af.SuperstepCompletedEvent):
                progress.advance(event.superstep)
            elif isinstance(event, af.RunCompletedEvent):
                status = event.status.value
        log.write(json.dumps(["end", status]) + "\n")
    workflow.close()
    inner.close()
    for close in _CLOSE_AT_END:
        close()
    _say("DONE")


if __name__ == "__main__":
    main()
