"""Ctrl-C in tests that may run with SIGINT ignored (``nohup make test &``, a CI runner).

A process started with SIGINT ignored passes that on to its children, and
``_thread.interrupt_main()`` does nothing while it is ignored. So a child that must
get Ctrl-C installs Python's handler itself (:data:`CHILD_PRELUDE`), and an
in-process test that simulates one installs it for its own duration
(:func:`sigint_handled`).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CHILD_PRELUDE", "CLI_CHILD", "cli_child", "sigint_handled", "sigint_ignored"]

CHILD_PRELUDE = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
"""First line of a ``python -c`` child that must turn SIGINT into KeyboardInterrupt."""

CLI_CHILD = (
    CHILD_PRELUDE + "import sys; from actorflow.cli import main; sys.exit(main(sys.argv[1:]))"
)
"""A ``python -c`` child that runs the ``actorflow`` command on its arguments."""


@contextmanager
def cli_child(*argv: str) -> Iterator[subprocess.Popen[str]]:
    """``actorflow *argv`` in a child process (text pipes for its stdout and stderr),
    stopped with Ctrl-C when the block ends (killed if it does not stop in 30 s)."""
    child = subprocess.Popen(
        [sys.executable, "-c", CLI_CHILD, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def _sigint(handler: signal.Handlers | signal._HANDLER) -> Iterator[None]:
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@contextmanager
def sigint_handled() -> Iterator[None]:
    """Python's own SIGINT handler (KeyboardInterrupt) while the block runs (main thread)."""
    with _sigint(signal.default_int_handler):
        yield


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while the block runs, as under ``nohup ... &`` (main thread)."""
    with _sigint(signal.SIG_IGN):
        yield
