"""``actorflow replay STORE --workflow MODULE:ATTRIBUTE [--session ID ...]``: re-run the
stored sessions against the current code and report the first divergence of each.

Exit status 0: every run replays identically; 1: some session diverges (each printed
on a line); 2: a mistake (no such store, module or workflow). The store is only read.
"""

from __future__ import annotations

import argparse

from actorflow.testing import replay

from ._stores import open_store
from ._workflows import load_workflow

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``replay`` to the ``actorflow`` parser."""
    parser = commands.add_parser(
        "replay",
        help="replay stored sessions against the current code; exit 1 on a divergence",
    )
    parser.add_argument("store", help="the store the sessions were run with")
    parser.add_argument(
        "--workflow",
        required=True,
        help="MODULE:ATTRIBUTE of the Workflow (or a function building it) to replay with",
    )
    parser.add_argument(
        "--session",
        action="append",
        dest="sessions",
        metavar="ID",
        help="replay this session only (repeatable); default: every session of the workflow",
    )
    parser.set_defaults(func=_replay)


def _replay(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    try:
        workflow = load_workflow(args.workflow, "replay")
        try:
            report = replay(store, workflow, args.sessions)
        finally:
            workflow.close()
    finally:
        store.close()
    print(report)
    return 0 if report.identical else 1
