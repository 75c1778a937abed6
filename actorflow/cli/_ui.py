"""``actorflow ui STORE [--workflow MODULE:ATTRIBUTE] [--port N]``: browse a store in a
local web page (the extra ``actorflow[ui]``, imported only when the command runs)."""

from __future__ import annotations

import argparse

from actorflow.errors import MissingExtra

from ._stores import open_store
from ._workflows import load_workflow

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ui`` to the ``actorflow`` parser."""
    ui = commands.add_parser("ui", help="browse a store in a local web page (actorflow[ui])")
    ui.add_argument("store")
    ui.add_argument("--workflow", help="MODULE:ATTRIBUTE of the Workflow: enables actions")
    ui.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free)")
    ui.set_defaults(func=_ui)


def _ui(args: argparse.Namespace) -> int:
    try:
        from actorflow.ui import Inspector  # noqa: PLC0415 - an optional extra
    except ModuleNotFoundError as exc:
        raise MissingExtra("actorflow ui", "ui", exc.name or "starlette") from None
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
