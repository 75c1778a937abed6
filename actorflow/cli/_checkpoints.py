"""``actorflow checkpoints list|show|verify|prune|upgrade STORE ...``: inspect a checkpoint store.

What ``show`` prints about one checkpoint is ``_describe``'s.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

from actorflow.errors import CheckpointError
from actorflow.runtime import check_runtime, delete_session
from actorflow.storage import Checkpoint, CheckpointStore, FileStore

from ._describe import describe_checkpoint
from ._stores import open_store
from ._workflows import import_user_module

__all__ = ["parse_age", "register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``checkpoints`` and its actions to the ``actorflow`` parser."""
    ckpt = commands.add_parser("checkpoints", help="inspect a checkpoint store")
    actions = ckpt.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list checkpoints, oldest first")
    listing.add_argument("store")
    listing.add_argument("--session")
    listing.add_argument("--workflow")
    show = actions.add_parser(
        "show", help="show one checkpoint: state digests and sizes, in-flight messages, requests"
    )
    show.add_argument("store")
    show.add_argument("checkpoint_id")
    show.add_argument(
        "--decode", action="store_true", help="also show each executor's state, decoded"
    )
    show.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first, so its message types decode (repeatable)",
    )
    verify = actions.add_parser("verify", help="check every record, digest and reference")
    verify.add_argument("store")
    prune = actions.add_parser(
        "prune",
        help="keep the newest N checkpoints (cuts) of a session, or remove checkpoints by age",
    )
    prune.add_argument("store")
    prune.add_argument("--session")
    prune.add_argument(
        "--keep",
        type=int,
        help="keep the newest N cuts of --session; 0 deletes the whole session (refused "
        "while a process holds it open)",
    )
    prune.add_argument(
        "--older-than",
        type=parse_age,
        metavar="AGE",
        help="remove checkpoints created more than AGE ago (90s, 30m, 12h, 7d, 2w), "
        "keeping each session's newest one",
    )
    prune.add_argument(
        "--whole-sessions",
        action="store_true",
        help=(
            "with --older-than: remove whole sessions whose newest checkpoint is older"
            " (a session open in some process stays)"
        ),
    )
    upgrade = actions.add_parser(
        "upgrade", help="bring a store written by an older actorflow to the current layout"
    )
    upgrade.add_argument("store")
    ckpt.set_defaults(func=_checkpoints)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_age(text: str) -> float:
    """Seconds in an age such as ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: give a number and a unit, e.g. 90s, 30m, 12h, 7d or 2w"
        )
    return float(match[1]) * _UNITS[match[2]]


def _checkpoints(args: argparse.Namespace) -> int:
    if args.action == "prune":
        by_age, by_count = args.older_than is not None, (args.session, args.keep) != (None, None)
        if by_age == by_count or (by_count and None in (args.session, args.keep)):
            raise SystemExit(
                "prune: give either --session S --keep N, or --older-than AGE [--whole-sessions]"
            )
    store = open_store(args.store, upgrade=args.action == "upgrade")
    try:
        if args.action == "upgrade":
            what = "layout" if isinstance(store, FileStore) else "schema"
            print(f"{args.store}: {type(store).__name__} {what} is current")
        elif args.action == "list":
            for cp in store.list(workflow=args.workflow, session=args.session):
                print(json.dumps(_summary(cp)))
        elif args.action == "show":
            for name in args.imports:
                import_user_module(name, f"show --import {name}")
            cp = store.load(args.checkpoint_id)
            shown = describe_checkpoint(store, cp, decode_states=args.decode)
            print(json.dumps(shown, indent=2, default=str))
        elif args.action == "verify":
            problems = store.verify()
            ids = _all_ids(store)  # counts damaged records too, where list() would raise
            problems += _runtime_problems(store, ids)
            for problem in problems:
                print(problem)
            print(f"{len(problems)} problem(s) in {len(ids)} checkpoint(s)")
            return 1 if problems else 0
        elif args.action == "prune" and args.older_than is not None:
            removed = store.prune_older_than(
                time.time() - args.older_than, whole_sessions=args.whole_sessions
            )
            what = "whole session(s) idle" if args.whole_sessions else "checkpoint(s) created"
            print(f"removed {removed} checkpoint(s): {what} more than {args.older_than:g} s ago")
        elif args.action == "prune" and args.keep == 0:
            # Nothing kept is the whole session: under its lease, so never beneath an
            # owner still writing to it (whose next save would name deleted blobs).
            removed = delete_session(store, args.session)
            print(f"removed {removed} checkpoint(s): all of session {args.session!r}")
        elif args.action == "prune":
            removed = store.prune(args.session, args.keep)
            print(f"removed {removed} checkpoint(s) of session {args.session!r}")
    finally:
        store.close()
    return 0


def _all_ids(store: CheckpointStore) -> list[str]:
    """Every record id, damaged ones too where the store can list them (built-in stores do)."""
    ids = getattr(store, "ids", None)  # not in the protocol: list() raises on damage instead
    if callable(ids):
        return list(ids())
    return [cp.id for cp in store.list()]


def _summary(cp: Checkpoint) -> dict[str, Any]:
    return {
        "id": cp.id,
        "parent_id": cp.parent_id,
        "session": cp.session,
        "workflow": cp.workflow,
        "superstep": cp.superstep,
        "kind": cp.kind.value,
        "created_at": cp.created_at,
    }


def _runtime_problems(store: CheckpointStore, ids: list[str]) -> list[str]:
    """The records whose runtime field a resume would refuse (stores cannot tell)."""
    problems = []
    for checkpoint_id in ids:
        try:
            cp = store.load(checkpoint_id)
        except CheckpointError:
            continue  # damaged (store.verify() reported it) or deleted meanwhile
        try:
            check_runtime(cp)
        except CheckpointError as exc:
            problems.append(f"checkpoint {checkpoint_id}: {exc}")
    return problems
