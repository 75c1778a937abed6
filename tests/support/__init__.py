"""What several tests share: graph corpora, stores, held runs, and the subprocess children.

Import them as ``from tests.support import graphs``. A child process runs one as
``python -m tests.support.crash_child`` with :func:`child_env`, which puts the
repository root (where the ``tests`` package lives) on its ``PYTHONPATH``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["ROOT", "Closeable", "child_env", "python_path"]

ROOT = Path(__file__).resolve().parent.parent.parent
"""The repository root: ``tests`` is importable from here."""


def python_path() -> str:
    """``PYTHONPATH`` for a child: the repository root first, then what this process had."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child that imports ``tests.*`` (plus ``extra``)."""
    return {**os.environ, **(extra or {}), "PYTHONPATH": python_path()}


@runtime_checkable
class Closeable(Protocol):
    """What ``Session.stream`` returns besides iterating: ``close()`` abandons the run."""

    def close(self) -> None: ...
