"""Ctrl-C in tests that may run with SIGINT ignored (``nohup make test &``, a CI runner).

A process started with SIGINT ignored passes that on to its children, and
``_thread.interrupt_main()`` does nothing while it is ignored. So a child that must
get Ctrl-C installs Python's handler itself (:data:`CHILD_PRELUDE`), and an
in-process test that simulates one installs it for its own duration
(:func:`sigint_handled`).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CHILD_PRELUDE", "sigint_handled", "sigint_ignored"]

CHILD_PRELUDE = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
"""First line of a ``python -c`` child that must turn SIGINT into KeyboardInterrupt."""


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
