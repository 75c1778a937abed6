"""The ``actorflow`` command: inspect checkpoint stores, draw graphs, run the demo.

``STORE`` is a SQLite file (``SQLiteStore``), a folder (``FileStore``), or a
PostgreSQL URI (``PostgresStore``, extra ``actorflow[postgres]``:
``postgresql://user@host/db``, with ``?schema=NAME`` for a schema other than
``actorflow``).

    actorflow checkpoints list STORE [--session S] [--workflow W]
    actorflow checkpoints show STORE CHECKPOINT_ID
    actorflow checkpoints verify STORE
    actorflow checkpoints prune STORE --session S --keep N
    actorflow checkpoints prune STORE --older-than AGE [--whole-sessions]   (AGE: 90s, 30m, 12h, 7d, 2w)
    actorflow checkpoints upgrade STORE
    actorflow graph MODULE:ATTRIBUTE [--format mermaid]
    actorflow ui STORE [--workflow MODULE:ATTRIBUTE] [--port N]
    actorflow demo
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import runpy
import sys
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actorflow.errors import ActorflowError, CheckpointError
from actorflow.runtime import Workflow
from actorflow.runtime._checkpointing import check_runtime, check_runtime_bytes
from actorflow.storage import Checkpoint, CheckpointStore, FileStore, SQLiteStore

__all__ = ["main"]


def open_store(path: str) -> CheckpointStore:
    """A PostgreSQL URI is a PostgresStore, a folder a FileStore, anything else a SQLite file."""
    if path.startswith(("postgresql://", "postgres://")):
        return _open_postgres(path)
    return FileStore(path) if Path(path).is_dir() else SQLiteStore(path)


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


def _describe_runtime(runtime: bytes) -> dict[str, Any]:
    """The runtime blob with payloads shown as sizes (never decoded as values).

    Decoded and checked as a resume does it (CheckpointCorrupt if malformed).
    """
    body = check_runtime_bytes(runtime)
    if "partial" in body:  # one executor's finished part of an unfinished superstep
        sends, outputs, requests = body["report"]
        return {
            "partial": body["partial"],
            "sends": [[target, group, _size(payload)] for target, group, payload in sends],
            "outputs": len(outputs),
            "requests": len(requests),
        }
    inbox = {t: [[src, grp, _size(p)] for src, grp, p in ds] for t, ds in body["inbox"].items()}
    fan_in = {g: {s: len(v) for s, v in srcs.items()} for g, srcs in body["fan_in"].items()}
    pending = {rid: {"executor": e[0], "response_type": e[2]} for rid, e in body["pending"].items()}
    return {"superstep": body["superstep"], "inbox": inbox, "fan_in": fan_in, "pending": pending}


def _size(payload: Any) -> str:
    if isinstance(payload, bytes):
        return f"{len(payload)} bytes"
    if isinstance(payload, list):
        return f"{len(payload)} items"
    return type(payload).__name__


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


def _upgrade(path: str) -> int:
    # Before opening: a store of an older layout refuses to open, naming this command.
    if Path(path).is_dir():
        FileStore.upgrade(path)
        print(f"{path}: FileStore layout is current")
    else:
        SQLiteStore(path).close()  # a SQLite store upgrades its schema when opened
        print(f"{path}: SQLiteStore schema is current")
    return 0


def _checkpoints(args: argparse.Namespace) -> int:
    if args.action == "upgrade":
        return _upgrade(args.store)
    if args.action == "prune":
        by_age, by_count = args.older_than is not None, (args.session, args.keep) != (None, None)
        if by_age == by_count or (by_count and None in (args.session, args.keep)):
            raise SystemExit(
                "prune: give either --session S --keep N, or --older-than AGE [--whole-sessions]"
            )
    store = open_store(args.store)
    try:
        if args.action == "list":
            for cp in store.list(workflow=args.workflow, session=args.session):
                print(json.dumps(_summary(cp)))
        elif args.action == "show":
            cp = store.load(args.checkpoint_id)
            shown = _summary(cp) | {
                "graph_signature": cp.graph_signature,
                "executors": {k: list(v) for k, v in cp.executors.items()},
                "metadata": dict(cp.metadata),
                "runtime": _describe_runtime(cp.runtime),
            }
            print(json.dumps(shown, indent=2, default=str))
        elif args.action == "verify":
            problems = store.verify()
            ids = _all_ids(store)
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


def _load_workflow(target: str, command: str) -> Workflow:
    module_name, _, attribute = target.partition(":")
    if not attribute:
        raise SystemExit(
            f"{command}: give MODULE:ATTRIBUTE naming a Workflow (or a function returning one)"
        )
    sys.path.insert(0, str(Path.cwd()))
    found = getattr(importlib.import_module(module_name), attribute)
    workflow = found() if callable(found) and not isinstance(found, Workflow) else found
    if not isinstance(workflow, Workflow):
        raise SystemExit(f"{command}: {target} is not a Workflow")
    return workflow


def _graph(args: argparse.Namespace) -> int:
    workflow = _load_workflow(args.target, "graph")
    print(mermaid(workflow))
    workflow.close()
    return 0


def _ui(args: argparse.Namespace) -> int:
    try:
        from actorflow.ui import Inspector  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise SystemExit(f"ui: install the extra: pip install 'actorflow[ui]' ({exc})") from exc
    workflow = _load_workflow(args.workflow, "ui") if args.workflow else None
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
    demo = Path(__file__).resolve().parent.parent / "examples" / "demo.py"
    if not demo.exists():
        raise SystemExit(
            "demo: examples/demo.py ships with the source checkout; run `make demo` there"
        )
    runpy.run_path(str(demo), run_name="__main__")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``actorflow`` command."""
    parser = argparse.ArgumentParser(prog="actorflow", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    ckpt = commands.add_parser("checkpoints", help="inspect a checkpoint store")
    actions = ckpt.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list checkpoints, oldest first")
    listing.add_argument("store")
    listing.add_argument("--session")
    listing.add_argument("--workflow")
    show = actions.add_parser("show", help="show one checkpoint")
    show.add_argument("store")
    show.add_argument("checkpoint_id")
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
    except ActorflowError as exc:
        print(f"actorflow: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
