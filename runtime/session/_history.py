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
        # The log first: it drops an event only once the store holds it, so what it no
        # longer holds now, the store read after it has. When it still holds the events
        # from ``since`` on, the store has nothing to add.
        held = self._log.recent(since)
        found: list[ev.Event] = []
        if self._store is not None and not (held and _seq(held[0]) == since):
            found = [event_of(e) for e in read_entries(self._store, self._id(), since)]
            if found:
                since = max(since, _seq(found[-1]) + 1)
        found.extend(materialize(e) for e in held if _seq(e) >= since)
        return found

    def follow(self, since: int, *, forever: bool) -> Generator[ev.Event, None, None]:
        """The history from ``since``, then each new history event as it is emitted.

        Without ``forever`` it ends when no run is going: after the backlog if the
        session is idle, else once the run in progress ends. With it, it ends only when
        the session closes (or the caller closes the iterator).
        """
        inbox: queue.SimpleQueue[ev.Event | None] = queue.SimpleQueue()
        self._log.watch(inbox.put)  # before reading the backlog: nothing falls between
        try:
            cursor = _Cursor(since, forever, self._turn)
            for event in self.read(since):
                yield cursor.passed(event)
                if cursor.done:
                    return
            while not cursor.idle(inbox.empty()):
                try:
                    item = inbox.get(timeout=cursor.poll)
                except queue.Empty:
                    continue  # look again whether a run is going
                taken = cursor.take(item)
                if taken is not None:
                    yield taken
                if cursor.done:
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
            cursor = _Cursor(since, forever, self._turn)
            for event in await asyncio.to_thread(self.read, since):
                yield cursor.passed(event)
                if cursor.done:
                    return
            while not cursor.idle(inbox.empty()):
                try:
                    async with asyncio.timeout(cursor.poll):
                        item = await inbox.get()
                except TimeoutError:
                    continue  # look again whether a run is going
                taken = cursor.take(item)
                if taken is not None:
                    yield taken
                if cursor.done:
                    return
        finally:
            self._log.unwatch(watcher)

    def after(self, events: list[ev.Event], since: int) -> list[ev.Event]:
        """The history after ``events`` (a :meth:`read` from ``since`` made earlier): the
        events numbered after the last of them, decoded. Called while no run is going."""
        start = _seq(events[-1]) + 1 if events else since
        if start >= self._log.next_seq:
            return []  # nothing was numbered since (the common case: no store read)
        return self.read(start)


class _Cursor:
    """A follower's place: the last number it yielded, and whether it is done.

    Events come twice around the moment a follower starts (in the backlog it reads
    and from the watcher it registered before reading): the cursor passes each number
    once, in order.
    """

    __slots__ = ("_forever", "_turn", "done", "last")

    def __init__(self, since: int, forever: bool, turn: Turn) -> None:
        self.last = since - 1
        self._forever = forever
        self._turn = turn
        self.done = False
        """The follower is to stop: a run ended (without ``forever``) or the session closed."""

    @property
    def poll(self) -> float | None:
        """How long to wait for the next event before looking whether a run is going."""
        return None if self._forever else 0.5

    def passed(self, event: ev.Event) -> ev.Event:
        """``event`` of the backlog, yielded; done once it ends a run with none going."""
        self.last = _seq(event)
        self.done = not self._forever and isinstance(event, ENDS) and not self._turn.busy
        return event

    def idle(self, nothing_queued: bool) -> bool:
        """Whether to stop waiting: no run is going and nothing is left to yield."""
        return not self._forever and not self._turn.busy and nothing_queued

    def take(self, item: ev.Event | None) -> ev.Event | None:
        """What to yield for ``item`` from the watcher (``None``: nothing, for a number
        already yielded, or because the session closed, which makes it done)."""
        if item is None:
            self.done = True
            return None
        if _seq(item) <= self.last:
            return None  # also in the backlog
        self.last = _seq(item)
        event = materialize(item)
        self.done = not self._forever and isinstance(event, ENDS)
        return event


def _seq(event: Any) -> int:
    seq: int | None = event.seq
    assert seq is not None, "history events are numbered"
    return seq
