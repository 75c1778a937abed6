"""Running a test's code in a forked child (``os.fork``), bounded."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

BOUND = 20
"""Seconds a child may run before its alarm ends it."""


def in_child(body: Callable[[], None]) -> int:
    """Run ``body`` in a forked child; its exit code (0: it returned; else it raised, or
    was still running after :data:`BOUND` s). The child leaves without running any
    cleanup (``os._exit``): the parent's fixtures are the parent's.

    (An alarm, not faulthandler's watchdog: re-arming that in a child waits for the
    parent's watchdog thread, which does not exist there.)
    """
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(BOUND)
            body()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
