"""Opening a session off the caller's event loop, and never leaking it there.

``Workflow.asession`` and ``Workflow.aresume`` open in a worker thread: taking a
lease and reading a store are blocking calls (an SQLite writer may wait its turn,
PostgreSQL is a round trip, ``wait=`` may wait for another owner), and a service
opening many sessions at once would otherwise run every open in one step of its
loop. Measured with ``bench.loop_lag`` (20 sessions opened at once on one loop,
``SQLiteStore``): the loop's longest lag came from those opens, 16-63 ms, growing
with the store.

Each open has a thread of its own, not one of the loop's default executor: an open
may wait (``wait=``) for another owner, and a few such opens would otherwise take
every worker of that executor (6 on 2 cores), and with them every ``asyncio.to_thread``
of the process, ``arun`` included, until they gave up.

A task cancelled while its open waits for another owner stops that wait (see
``_ownership.ABANDONED``): the thread ends at once. One cancelled while the store
is granting the lease or being read cannot stop that step: the open completes in
its thread, and the session nobody will receive is closed there, so its lease is
not renewed until the process exits.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable

from ._ownership import ABANDONED
from ._session import Session

__all__ = ["open_off_loop"]


async def open_off_loop(open_session: Callable[[], Session]) -> Session:
    """``open_session()`` in a worker thread; its session, or what it raised.

    Raises:
        asyncio.CancelledError: the awaiting task was cancelled; the session the open
            makes anyway is closed.
    """
    handover = _Handover(open_session)
    loop = asyncio.get_running_loop()
    opening: asyncio.Future[Session] = loop.create_future()
    context = contextvars.copy_context()
    threading.Thread(
        target=context.run,
        args=(handover.open_for, loop, opening),
        name="actorflow-open",
        daemon=True,
    ).start()
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        opened = handover.abandon()
        if opened is not None:  # the open finished as the cancel landed: nobody has it
            loop.run_in_executor(None, opened.close)
        opening.add_done_callback(_unclaimed)
        raise


def _settle(
    opening: asyncio.Future[Session], session: Session | None, error: BaseException | None
) -> None:
    """Give the awaiting task what the open gave (on the loop's thread)."""
    if opening.cancelled():
        return
    if error is not None:
        opening.set_exception(error)
    else:
        assert session is not None
        opening.set_result(session)


def _unclaimed(opening: asyncio.Future[Session]) -> None:
    """What an abandoned open raised goes to nobody (asyncio would log it as unretrieved)."""
    if not opening.cancelled():
        opening.exception()


class _Handover:
    """Hands the opened session to the awaiting task, or closes it if that task is gone."""

    def __init__(self, open_session: Callable[[], Session]) -> None:
        self._open_session = open_session
        self._lock = threading.Lock()
        self._abandoned = False
        self._abandoned_event = threading.Event()
        """Set with ``_abandoned``: what ends a wait for another owner (``ABANDONED``)."""
        self._opened: Session | None = None

    def open_for(self, loop: asyncio.AbstractEventLoop, opening: asyncio.Future[Session]) -> None:
        """Open (in the open's own thread) and settle ``opening`` on ``loop`` with the
        session or what the open raised."""
        ABANDONED.set(self._abandoned_event)
        session: Session | None = None
        error: BaseException | None = None
        try:
            session = self.open()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            error = exc
        try:
            loop.call_soon_threadsafe(_settle, opening, session, error)
        except RuntimeError:  # the loop is closed: nobody will take the session
            if session is not None:
                session.close()

    def open(self) -> Session:
        """Open; close at once what the abandoned caller will not take."""
        session = self._open_session()
        with self._lock:
            if not self._abandoned:
                self._opened = session
                return session
        session.close()
        return session

    def abandon(self) -> Session | None:
        """The caller gives up: a session already opened for it is returned, to close."""
        self._abandoned_event.set()
        with self._lock:
            self._abandoned = True
            opened, self._opened = self._opened, None
        return opened
