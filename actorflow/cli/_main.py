"""``main``: the ``actorflow`` parser, built from each command's ``register``, and the
dispatch that turns a mistake into one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from actorflow.errors import ActorflowError

from . import _cancel, _checkpoints, _demo, _graph, _replay, _serve, _ui
from ._usage import Usage

__all__ = ["main"]

_DESCRIPTION = (
    "Inspect actorflow checkpoint stores, draw workflow graphs, run the demo. "
    "STORE is a SQLite file (SQLiteStore), a folder (FileStore) or a postgresql:// URI "
    "(PostgresStore, extra actorflow[postgres]); no command creates a file, a folder or a schema."
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``actorflow`` command (and of ``python -m actorflow``).

    Returns:
        The exit status: 0, 1 (``verify`` found problems), 2 (a mistake or an
        error, printed as one line on stderr), or 130 (interrupted: Ctrl-C, one
        line on stderr).
    """
    parser = argparse.ArgumentParser(prog="actorflow", description=_DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    # In the order ``--help`` lists them.
    _checkpoints.register(commands)
    _cancel.register(commands)
    _graph.register(commands)
    _replay.register(commands)
    _ui.register(commands)
    _serve.register(commands)
    _demo.register(commands)

    args = parser.parse_args(argv)
    _quiet_pool_logs()
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except (ActorflowError, Usage) as exc:
        print(f"actorflow: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C is how a user stops a command (``ui`` runs until it): no traceback.
        # Whatever the command opened was closed on the way out (its finally blocks).
        print("actorflow: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (``| head``): nothing more to say, and no traceback. Point
        # stdout at devnull so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code


def _quiet_pool_logs() -> None:
    """Keep psycopg_pool's warnings (one per failed connection attempt, on the
    ``psycopg.pool`` logger) off the terminal: a command reports the failure itself,
    as one line. Only the command does this; the library configures no logging."""
    pool_logger = logging.getLogger("psycopg.pool")
    if not any(isinstance(h, logging.NullHandler) for h in pool_logger.handlers):
        pool_logger.addHandler(logging.NullHandler())
    pool_logger.propagate = False
