"""``actorflow cancel STORE SESSION [--run RUN_ID]``: stop a run another process runs.

The request goes through the store (``request_cancel``, see ``CancelRequests``): the
process holding the session sees it within a look at its lease (every 0.25 s) and
stops the run at its next barrier. Without ``--run`` it is the run the session's
stored history shows going on (started, not ended).
"""

from __future__ import annotations

import argparse

from actorflow.errors import CheckpointError
from actorflow.runtime import run_going_on
from actorflow.storage import CancelRequests

from ._stores import open_store

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cancel`` to the ``actorflow`` parser."""
    cancel = commands.add_parser(
        "cancel", help="stop a session's run, in whatever process runs it, at its next barrier"
    )
    cancel.add_argument("store")
    cancel.add_argument("session")
    cancel.add_argument(
        "--run", help="the run's id (default: the run the session's history shows going on)"
    )
    cancel.set_defaults(func=_cancel)


def _cancel(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    try:
        if not isinstance(store, CancelRequests):
            raise CheckpointError(
                f"{args.store}: {type(store).__name__} carries no cancel requests; stop the "
                "run in the process that runs it (session.cancel())"
            )
        run_id = args.run or run_going_on(store, args.session)
        if run_id is None:
            print(f"session {args.session!r} has no run going on: its history shows none")
            return 1
        if not store.request_cancel(args.session, run_id):
            print(f"nobody holds session {args.session!r}: no process runs run {run_id}")
            return 1
        lease = store.current_lease(args.session)
        holder = f" ({lease.owner})" if lease is not None else ""
        print(
            f"asked the holder of session {args.session!r}{holder} to cancel run {run_id}: "
            "it stops at its next barrier, once the holder looks (every 0.25 s)"
        )
        return 0
    finally:
        store.close()
