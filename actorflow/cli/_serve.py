"""``actorflow serve MODULE:ATTRIBUTE --store STORE [--host H] [--port N] [--token T]``:
the workflow as an HTTP service (the extra ``actorflow[serve]``, imported only when
the command runs). Listens on 127.0.0.1 unless a token guards it. A SQLite path where
nothing is yet becomes a new store (a folder must already be a FileStore)."""

from __future__ import annotations

import argparse
import os
import sys

from ._stores import open_store
from ._workflows import load_workflow

__all__ = ["register"]

TOKEN_ENV = "ACTORFLOW_SERVE_TOKEN"
"""Where the token is read from when ``--token`` is not given (keeps it out of ``ps``)."""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to the ``actorflow`` parser."""
    serve = commands.add_parser(
        "serve", help="serve a workflow over HTTP (threads, runs, SSE; actorflow[serve])"
    )
    serve.add_argument("workflow", help="MODULE:ATTRIBUTE of the Workflow (or a function)")
    serve.add_argument("--store", required=True, help="where threads' checkpoints live")
    serve.add_argument("--host", default="127.0.0.1", help="address (not loopback: needs --token)")
    serve.add_argument("--port", type=int, default=8123, help="port (0: any free)")
    serve.add_argument(
        "--token", help=f"bearer token every request must carry (default: ${TOKEN_ENV})"
    )
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        from actorflow.serve import Server, ServiceApp, check_bind  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise SystemExit(
            f"serve: install the extra: pip install 'actorflow[serve]' ({exc})"
        ) from exc
    token = args.token or os.environ.get(TOKEN_ENV) or None
    check_bind(args.host, token)  # before anything is imported or opened
    workflow = load_workflow(args.workflow, "serve")
    new = not args.store.startswith(("postgresql://", "postgres://")) and not os.path.exists(
        args.store
    )
    # The service is what writes a store: nothing at the path is a store to begin
    # (said on stderr, so a mistyped path is seen), unlike the commands that read one.
    store = open_store(args.store, create=True)
    if new:
        print(f"serve: created a new, empty store at {args.store}", file=sys.stderr, flush=True)
    try:
        server = Server(ServiceApp(workflow, store, token=token), host=args.host, port=args.port)
        print(f"actorflow serving {workflow.name!r} on {server.url} (Ctrl-C to stop)", flush=True)
        server.serve()
    finally:
        store.close()
        workflow.close()
    return 0
