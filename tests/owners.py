"""A small approval workflow, importable from subprocesses: ``sys.path.insert(0, "tests")``.

Run as a script, it plays one worker process of the ownership tests:

``python tests/owners.py STORE_KIND PATH SESSION ACTION [TTL]``

- ``pause``: open the session, run until it asks for approval, print ``PAUSED``, exit.
- ``answer``: resume, print ``OWNED <token>`` (or ``REFUSED <owner>`` on SessionOwned),
  wait for a line on stdin, answer the request, print ``DONE <outputs>``.
- ``hold``: open the session, run to the request, print ``HELD <token>`` and block
  (until killed).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

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
    def on_order(self, order: Order, ctx: af.Context) -> None:
        ctx.request(order, bool)

    @af.response_handler
    def on_decision(self, order: Order, ok: bool, ctx: af.Context) -> None:
        self.decided.append(order.number)
        ctx.output([order.number, ok])


def build() -> af.Workflow:
    return af.WorkflowBuilder("desk", start=Desk("desk")).build()


def open_store(kind: str, path: str) -> af.CheckpointStore:
    return af.FileStore(path) if kind == "file" else af.SQLiteStore(path)


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
