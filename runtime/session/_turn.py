"""A session's turn: one thing at a time (a run, a reset, taking answers), and closing.

The turn is taken by whoever acts on the session and given back when that is done;
a run gives it back on the supervisor's thread, as it ends. A ``close()`` that
cannot get the turn within :data:`STOP_WAIT` (a run stuck outside any handler)
leaves the session closed and its actors to the run's end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from actorflow.errors import SessionBusy, SessionClosed
from actorflow.runtime.supervisor import CANCEL_GRACE

__all__ = ["STOP_WAIT", "Turn"]

STOP_WAIT = CANCEL_GRACE + 0.5
"""Seconds a caller that stops waiting (Ctrl-C, a cancelled task, a closed stream,
``close()``) gives the run to end: the barrier's grace, plus room to roll back and
replace abandoned hosts."""


class Turn:
    """Who acts on a session now, and whether it is closed. Thread-safe."""

    __slots__ = ("_busy", "_closed", "_ending", "_left", "_owner")

    def __init__(self) -> None:
        self._busy = threading.Lock()
        self._ending = threading.Lock()
        """Orders a run's end against a close that could not wait for it."""
        self._left: Callable[[bool], None] | None = None
        """The teardown a close left to the end of the run it could not wait for."""
        self._closed = False
        self._owner: int | None = None
        """Set in a forked child: the pid of the process the session belongs to."""

    def leave_to_parent(self, parent: int) -> None:
        """In a forked child (its only thread, right after the fork): the session, its
        run and its actors are process ``parent``'s. Closed here, with nothing to tear
        down: its actors' threads do not exist here and its lease is the parent's."""
        self._busy = threading.Lock()
        self._ending = threading.Lock()
        self._left = None
        # A session closed before the fork stays just closed; one forked on again
        # stays its first owner's.
        if self._owner is None and not self._closed:
            self._owner = parent
        self._closed = True

    @property
    def closed(self) -> bool:
        """Whether the session is closed (or left to close at its run's end)."""
        return self._closed

    @property
    def busy(self) -> bool:
        """Whether something holds the turn now (a run, a reset, a close)."""
        return self._busy.locked()

    def take(self, session: str, what: str) -> None:
        """Take the turn to do ``what`` on ``session``, or raise at once.

        Raises:
            SessionBusy: something else holds the turn (a run, a reset).
        """
        if not self._busy.acquire(blocking=False):
            raise SessionBusy(
                f"session {session!r} is busy and cannot {what} now; wait for the current "
                "run or reset to finish, or use another session"
            )

    def give(self) -> None:
        """Give the turn back (its taker only)."""
        self._busy.release()

    def check_open(self, session: str) -> None:
        """Raise :class:`SessionClosed` if ``session`` is closed."""
        if self._owner is not None:
            raise SessionClosed(
                f"session {session!r} belongs to process {self._owner}, which opened it; "
                "this process was forked from it and has none of its actors: open the "
                "session in this process (wf.resume(store, session=...) once that process "
                "lets it go)"
            )
        if self._closed:
            raise SessionClosed(f"session {session!r} is closed; open a new one")

    def close(self, teardown: Callable[[bool], None], *, wait: bool) -> None:
        """Mark the session closed and run ``teardown(wait)`` holding the turn, once the
        current run (if any) ends; the caller has asked that run to stop.

        A run normally ends within :data:`STOP_WAIT` of a cancel; if it does not, the
        teardown is left to the run's end (:meth:`end_run`, as ``teardown(False)``)
        and this returns at once.
        """
        if not self._busy.acquire(timeout=STOP_WAIT):
            with self._ending:
                if not self._busy.acquire(blocking=False):
                    self._closed = True
                    self._left = teardown
                    return
        try:
            self._closed = True
            teardown(wait)
        finally:
            self._busy.release()

    def end_run(self) -> None:
        """A run ended (supervisor thread): tear down if a close was left to it, give back."""
        with self._ending:
            left, self._left = self._left, None
            if left is not None:
                try:
                    left(False)
                except Exception:  # noqa: BLE001 - closing for a caller that left
                    pass
            self._busy.release()
