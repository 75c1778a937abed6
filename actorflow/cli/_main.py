"""The ``actorflow`` command: inspect checkpoint stores, draw graphs, run the demo.

``STORE`` is a SQLite file (``SQLiteStore``), a folder (``FileStore``), or a
PostgreSQL URI (``PostgresStore``, extra ``actorflow[postgres]``:
``postgresql://user@host/db``, with ``?schema=NAME`` for a schema other than
``actorflow``); every command opens it with :func:`open_store`, and no command
creates a file or a folder.

    actorflow checkpoints list STORE [--session S] [--workflow W]
    actorflow checkpoints show STORE CHECKPOINT_ID [--decode] [--import MODULE]
    actorflow checkpoints verify STORE
    actorflow checkpoints prune STORE --session S --keep N
    actorflow checkpoints prune STORE --older-than AGE [--whole-sessions]   (AGE: 90s, 30m, 12h, 7d, 2w)
    actorflow checkpoints upgrade STORE
    actorflow graph MODULE:ATTRIBUTE [--format mermaid]
    actorflow ui STORE [--workflow MODULE:ATTRIBUTE] [--port N]
    actorflow demo

Also ``python -m actorflow``. A mistake (a missing store, a bad graph target) is one
line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actorflow.errors import ActorflowError, CheckpointError
from actorflow.runtime import Workflow, check_runtime
from actorflow.storage import FILESTORE_MARKER, Checkpoint, CheckpointStore, FileStore, SQLiteStore

from ._describe import describe_checkpoint, import_modules

__all__ = ["main", "open_store"]

_SQLITE_HEADER = b"SQLite format 3\x00"


class _Usage(Exception):
    """A mistake on the command line: printed as one line, exit status 2."""


def open_store(target: str, *, create: bool = False, upgrade: bool = False) -> CheckpointStore:
    """The store a command-line argument names: a PostgreSQL URI is a PostgresStore,
    a folder a FileStore, a file a SQLiteStore.

    Args:
        target: the argument as given.
        create: make a new, empty store when nothing is at ``target`` (no command does:
            a mistyped path must be an error, never a new store).
        upgrade: first bring a store written by an older actorflow to the current
            layout (``checkpoints upgrade``).

    Raises:
        CheckpointError: nothing at ``target``, or something that is not a store.
        UnsupportedFormat: a store of an older layout (the message names ``upgrade``).
    """
    if target.startswith(("postgresql://", "postgres://")):
        return _open_postgres(target)  # schema created or upgraded as the store opens
    path = Path(target)
    if path.is_dir():
        if not create and not (path / FILESTORE_MARKER).exists():
            raise CheckpointError(
                f"{target} is a folder but not an actorflow FileStore (no {FILESTORE_MARKER} file in "
                "it); give the folder a FileStore wrote, or a SQLite file"
            )
        if upgrade:
            FileStore.upgrade(path)
        return FileStore(path)
    if not path.exists():
        if not create:
            raise CheckpointError(
                f"no checkpoint store at {target}: no such file or folder; check the path"
            )
    elif not _is_sqlite(path):
        raise CheckpointError(
            f"{target} is neither a SQLite database nor a FileStore folder; give a store "
            "written by actorflow"
        )
    return SQLiteStore(path)  # a SQLite store upgrades its schema when opened


def _open_postgres(uri: str) -> CheckpointStore:
    # ``schema`` is ours, not libpq's (which refuses unknown URI parameters).
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "schema"])
    dsn = urllib.parse.urlunsplit(parts._replace(query=rest))
    from actorflow.storage import PostgresStore  # noqa: PLC0415  # the extra is optional

    return PostgresStore(dsn, schema=schemas[-1] if schemas else "actorflow")


def _all_ids(store: CheckpointStore) -> list[str]:
    """Every record id, damaged ones too where the store can list them (built-in stores do)."""
    ids = getattr(store, "ids", None)  # not in the protocol: list() raises on damage instead
    if callable(ids):
        return list(ids())
    return [cp.id for cp in store.list()]


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_age(text: str) -> float:
    """Seconds in an age such as ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: give a number and a unit, e.g. 90s, 30m, 12h, 7d or 2w"
        )
    return float(match[1]) * _UNITS[match[2]]


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


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
            try:
                import_modules(args.imports)
            except ValueError as exc:
                raise _Usage(str(exc)) from None
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
        elif args.action == "prune":
            removed = store.prune(args.session, args.keep)
            print(f"removed {removed} checkpoint(s) of session {args.session!r}")
    finally:
        store.close()
    return 0


def _graph(args: argparse.Namespace) -> int:
    workflow = load_workflow(args.target, "graph")
    try:
        print(mermaid(workflow))
    finally:
        workflow.close()
    return 0


def load_workflow(target: str, command: str) -> Workflow:
    """The Workflow ``MODULE:ATTRIBUTE`` names (or builds, when it is a no-argument function).

    ``command`` (``graph``, ``ui``) starts each error message.

    Raises:
        _Usage: one line saying what is wrong with ``target`` and what to give instead.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise _Usage(
            f"{command}: {target!r} is not MODULE:ATTRIBUTE; name a Workflow, or a function "
            "returning one, e.g. myapp.flows:build"
        )
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise _Usage(
                f"{command}: no module named {module_name!r}; run from the folder that holds it, "
                "or add that folder to PYTHONPATH"
            ) from None
        raise _Usage(f"{command}: importing {module_name!r} failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any import failure is reported as one line
        raise _Usage(
            f"{command}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise _Usage(f"{command}: module {module_name!r} has no attribute {attribute!r}") from None
    if isinstance(found, Workflow):
        return found
    if not callable(found):
        raise _Usage(
            f"{command}: {target} is {type(found).__name__!r}, not a Workflow or a function "
            "returning one"
        )
    try:
        parameters = inspect.signature(found).parameters.values()
    except (TypeError, ValueError):
        parameters = []  # type: ignore[assignment]  # no signature to read: just call it
    needed = [
        p.name
        for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if needed:
        raise _Usage(
            f"{command}: {target} needs arguments ({', '.join(needed)}); name a Workflow, or a "
            "function that builds one with no arguments"
        )
    try:
        made = found()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: one line, no traceback
        raise _Usage(f"{command}: calling {target}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(made, Workflow):
        raise _Usage(f"{command}: {target}() returned {type(made).__name__!r}, not a Workflow")
    return made


def _ui(args: argparse.Namespace) -> int:
    try:
        from actorflow.ui import Inspector  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise SystemExit(f"ui: install the extra: pip install 'actorflow[ui]' ({exc})") from exc
    workflow = load_workflow(args.workflow, "ui") if args.workflow else None
    store = open_store(args.store)
    try:
        inspector = Inspector(store, workflow=workflow, port=args.port)
        print(f"actorflow inspector on {inspector.url} (Ctrl-C to stop)", flush=True)
        inspector.serve()
    finally:
        store.close()
        if workflow is not None:
            workflow.close()
    return 0


def mermaid(workflow: Workflow) -> str:
    """The graph as a Mermaid flowchart."""
    description = workflow.describe()
    lines = ["flowchart LR"]
    for eid, info in description["executors"].items():
        label = f"{eid}<br/>{info['type'].rsplit('.', 1)[-1]}"
        shape = f"(({label}))" if eid == description["start"] else f"[{label}]"
        lines.append(f"    {_node(eid)}{shape}")
    for kind, src, targets, conditional in description["edges"]:
        arrow = "-.->" if conditional else "-->"
        label = "" if kind == "edge" else f"|{kind}|"
        lines.extend(f"    {_node(src)} {arrow}{label} {_node(t)}" for t in targets)
    for target, sources in description["fan_in"]:
        lines.extend(f"    {_node(s)} -->|fan_in| {_node(target)}" for s in sources)
    return "\n".join(lines)


def _node(executor_id: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in executor_id)


def _demo(_: argparse.Namespace) -> int:
    from actorflow._demo import main as demo  # noqa: PLC0415 - only this command needs it

    demo()
    return 0


_DESCRIPTION = (
    "Inspect actorflow checkpoint stores, draw workflow graphs, run the demo. "
    "STORE is a SQLite file (SQLiteStore), a folder (FileStore) or a postgresql:// URI "
    "(PostgresStore, extra actorflow[postgres]); no command creates a file or a folder."
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``actorflow`` command (and of ``python -m actorflow``).

    Returns:
        The exit status: 0, 1 (``verify`` found problems), or 2 (a mistake or an
        error, printed as one line on stderr).
    """
    parser = argparse.ArgumentParser(prog="actorflow", description=_DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)

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
    prune.add_argument("--keep", type=int)
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
        help="with --older-than: remove whole sessions whose newest checkpoint is older",
    )
    upgrade = actions.add_parser(
        "upgrade", help="bring a store written by an older actorflow to the current layout"
    )
    upgrade.add_argument("store")
    ckpt.set_defaults(func=_checkpoints)

    graph = commands.add_parser("graph", help="draw a workflow graph")
    graph.add_argument("target", help="MODULE:ATTRIBUTE of a Workflow or a function returning one")
    graph.add_argument("--format", choices=["mermaid"], default="mermaid")
    graph.set_defaults(func=_graph)

    ui = commands.add_parser("ui", help="browse a store in a local web page (actorflow[ui])")
    ui.add_argument("store")
    ui.add_argument("--workflow", help="MODULE:ATTRIBUTE of the Workflow: enables actions")
    ui.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free)")
    ui.set_defaults(func=_ui)

    demo = commands.add_parser("demo", help="run the crash-and-resume demo")
    demo.set_defaults(func=_demo)

    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except (ActorflowError, _Usage) as exc:
        print(f"actorflow: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left (``| head``): nothing more to say, and no traceback. Point
        # stdout at devnull so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code
