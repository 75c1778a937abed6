"""Reading a session's history and following it as it grows.

:class:`Chronicle` is the session's collaborator for its history: what the store
holds (entries written with the session's cuts, by this process or any before it)
joined with what this process numbered since its last cut (the supervisor's
:class:`~actorflow.runtime.supervisor.HistoryLog`), and a follower that yields the
history from a number and then each new event as it is emitted. Numbers make it
resumable: a consumer that lost its place asks again from the last number it saw
plus one and gets every later event once.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any

import actorflow.runtime._events as ev
from actorflow.runtime._history import event_of, read_entries
from actorflow.runtime.supervisor import HistoryLog
from actorflow.storage import CheckpointStore

from ._delivery import materialize
from ._turn import Turn

__all__ = ["ENDS", "Chronicle"]

ENDS = (ev.RunCompletedEvent, ev.RunFailedEvent, ev.RunCancelledEvent)
"""The history events that end a run."""


class Chronicle:
    """A session's history: read from its store and its log, and followed live.

    Any thread may use it, during a run too; reading never takes the session's turn.
    """

    __slots__ = ("_id", "_log", "_store", "_turn")

    def __init__(
        self, log: HistoryLog, store: CheckpointStore | None, turn: Turn, session: Callable[[], str]
    ) -> None:
        self._log = log
        self._store = store
        self._turn = turn
        self._id = session

    @property
    def log(self) -> HistoryLog:
        """The supervisor's side of the history (numbering, entries for the cuts)."""
        return self._log

    def read(self, since: int = 0) -> list[ev.Event]:
        """Every history event numbered ``since`` or more, in order, decoded for the caller.

        Raises:
            CheckpointCorrupt: a stored record of the session cannot be decoded.
            DecodeError: a stored value is of a type this process has not registered.
        """
        found: list[ev.Event] = []
        if self._store is not None:
            found = [event_of(e) for e in read_entries(self._store, self._id(), since)]
            if found:
                since = max(since, _seq(found[-1]) + 1)
        found.extend(materialize(e) for e in self._log.recent(since))
        return found

    def follow(self, since: int, *, forever: bool) -> Generator[ev.Event, None, None]:
        """The history from ``since``, then each new history event as it is emitted.

        Without ``forever`` it ends when no run is going: after the backlog if the
        session is idle, else once the run in progress ends. With it, it ends only when
        the session closes (or the caller closes the iterator).
        """
        inbox: queue.SimpleQueue[ev.Event | None] = queue.SimpleQueue()
        self._log.watch(inbox.put)
        try:
            last = since - 1
            for event in self.read(since):
                last = _seq(event)
                yield event
                if not forever and isinstance(event, ENDS) and not self._turn.busy:
                    return
            while True:
                if not forever and not self._turn.busy and inbox.empty():
                    return
                try:
                    item = inbox.get(timeout=0.5 if not forever else None)
                except queue.Empty:
                    continue  # look again whether a run is going
                if item is None:
                    return  # the session closed
                if _seq(item) <= last:
                    continue  # also in the backlog
                last = _seq(item)
                event = materialize(item)
                yield event
                if not forever and isinstance(event, ENDS):
                    return
        finally:
            self._log.unwatch(inbox.put)

    async def afollow(self, since: int, *, forever: bool) -> AsyncIterator[ev.Event]:
        """:meth:`follow` for a coroutine: never blocks the event loop."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[ev.Event | None] = asyncio.Queue()

        def watcher(item: ev.Event | None) -> None:
            try:
                loop.call_soon_threadsafe(inbox.put_nowait, item)
            except RuntimeError:
                pass  # the consumer's loop is closed: nobody is left to receive it

        self._log.watch(watcher)
        try:
            last = since - 1
            for event in await asyncio.to_thread(self.read, since):
                last = _seq(event)
                yield event
                if not forever and isinstance(event, ENDS) and not self._turn.busy:
                    return
            while True:
                if not forever and not self._turn.busy and inbox.empty():
                    return
                try:
                    async with asyncio.timeout(None if forever else 0.5):
                        item = await inbox.get()
                except TimeoutError:
                    continue  # look again whether a run is going
                if item is None:
                    return
                if _seq(item) <= last:
                    continue
                last = _seq(item)
                event = materialize(item)
                yield event
                if not forever and isinstance(event, ENDS):
                    return
        finally:
            self._log.unwatch(watcher)

    def after(self, events: list[ev.Event], since: int) -> list[ev.Event]:
        """What the log holds after ``events`` (a :meth:`read` from ``since`` made earlier):
        the events numbered after the last of them, decoded."""
        start = _seq(events[-1]) + 1 if events else since
        return [materialize(e) for e in self._log.recent(start)]


def _seq(event: Any) -> int:
    seq: int | None = event.seq
    assert seq is not None, "history events are numbered"
    return seq
