"""``actorflow demo``: run the crash-and-resume demo (``actorflow._demo``)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo`` to the ``actorflow`` parser."""
    demo = commands.add_parser("demo", help="run the crash-and-resume demo")
    demo.set_defaults(func=_demo)


def _demo(_: argparse.Namespace) -> int:
    from actorflow._demo import main as demo  # noqa: PLC0415 - only this command needs it

    demo()
    return 0
