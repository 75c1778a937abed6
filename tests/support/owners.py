"""A small approval workflow, importable from subprocesses as ``tests.support.owners``.

Run as a script, it plays one worker process of the ownership tests:

``python -m tests.support.owners STORE_KIND PATH SESSION ACTION [TTL]`` (STORE_KIND: file,
sqlite, or postgres with PATH ``"<schema> <dsn>"``)

- ``pause``: open the session, run until it asks for approval, print ``PAUSED``, exit.
- ``answer``: resume, print ``OWNED <token>`` (or ``REFUSED <owner>`` on SessionOwned),
  wait for a line on stdin, answer the request, print ``DONE <outputs>``.
- ``hold``: open the session, run to the request, print ``HELD <token>`` and block
  (until killed).
- ``stall``: open the session, run to the request, print ``HELD <token>``, wait for a
  line on stdin, answer the request and stop itself (SIGSTOP) inside the answer's save,
  holding the store's lock (FileStore: the session's ``flock``; SQLiteStore: the write
  lock), after printing ``SAVING``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import actorflow as af


@af.message
@dataclass
class Order:
    number: int


class Desk(af.Executor):
    """Asks one approval per order; outputs each decision with the order number."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.decided: list[int] = []

    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Any]) -> None:
        ctx.request(order, bool)

    @af.response_handler
    def on_decision(self, order: Order, ok: bool, ctx: af.Context[Any]) -> None:
        self.decided.append(order.number)
        ctx.output([order.number, ok])


def build() -> af.Workflow:
    return af.WorkflowBuilder("desk", start=Desk("desk")).build()


def open_store(kind: str, path: str) -> af.CheckpointStore:
    """``kind`` file, sqlite, or postgres (``path``: ``"<schema> <dsn>"``)."""
    if kind == "postgres":
        schema, dsn = path.split(" ", 1)
        return af.PostgresStore(dsn, schema=schema)
    return af.FileStore(path) if kind == "file" else af.SQLiteStore(path)


def stall_inside_saves(store: af.CheckpointStore) -> None:
    """Make the next save stop the process (once) while it holds the store's lock."""

    stopped = threading.Event()

    def saving() -> bool:  # the first save only; never the renewer's lease change
        if stopped.is_set() or threading.current_thread().name == "actorflow-lease-renewer":
            return False
        stopped.set()
        return True

    def stop() -> None:
        print("SAVING", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)

    if isinstance(store, af.FileStore):
        fenced = store._leases.fenced

        @contextlib.contextmanager
        def stalled(session: str, lease: af.Lease | None, checkpoint_id: str) -> Iterator[None]:
            # The session's flock is held from here to the commit.
            with fenced(session, lease, checkpoint_id):
                if saving():
                    stop()
                yield

        store._leases.fenced = stalled  # type: ignore[method-assign]
    else:
        from actorflow.storage.sqlite import _sql as _sqlite_sql

        lease_row = _sqlite_sql.lease_row

        def stalled_read(db: Any, session: str) -> Any:
            if saving():  # inside the save's write transaction
                stop()
            return lease_row(db, session)

        _sqlite_sql.lease_row = stalled_read


def main(kind: str, path: str, session_id: str, action: str, ttl: str = "1.0") -> None:
    store = open_store(kind, path)
    with build() as wf:
        if action == "pause":
            with wf.session(session_id, store=store, lease_ttl=float(ttl)) as s:
                s.run(Order(1))
            print("PAUSED", flush=True)
        elif action == "hold":
            s = wf.session(session_id, store=store, lease_ttl=float(ttl))
            s.run(Order(1))
            assert s.lease is not None
            print(f"HELD {s.lease.token}", flush=True)
            threading.Event().wait(60)  # until SIGKILL
        elif action == "stall":
            s = wf.session(session_id, store=store, lease_ttl=float(ttl))
            s.run(Order(1))
            assert s.lease is not None
            print(f"HELD {s.lease.token}", flush=True)
            sys.stdin.readline()
            stall_inside_saves(store)
            s.respond({"desk:1:0": True})
            print("SAVED", flush=True)
            threading.Event().wait(60)  # until SIGKILL
        elif action == "answer":
            try:
                s = wf.resume(store, session=session_id, lease_ttl=float(ttl))
            except af.SessionOwned as exc:
                print(f"REFUSED {exc.holder.owner}", flush=True)
                sys.stdin.readline()
                return
            with s:
                assert s.lease is not None
                print(f"OWNED {s.lease.token}", flush=True)
                sys.stdin.readline()
                [pending] = s.pending_requests
                result = s.respond({pending.request_id: True})
                print(f"DONE {result.outputs}", flush=True)
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
