"""A session's history on the supervisor's side: numbered, carried by cuts, watched.

:class:`HistoryLog` outlives the drivers of its session (a ``reset`` keeps the
numbering going). On the supervisor's thread it numbers each history event as it
is emitted (see ``actorflow.runtime._events``), keeps what the next cut will carry
(with a store: entries are written only inside cuts, so they are stored in the
same atomic step as the cut they belong to), and hands each event to the session's
watchers. Any thread may read the recent events and add or remove a watcher.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import actorflow.runtime._events as ev
from actorflow.runtime._history import DURABLE, raw_entry
from actorflow.storage import RawEntry

__all__ = ["RECENT", "HistoryLog", "Watcher"]

RECENT = 10_000
"""How many of the latest history events a session keeps in memory: the whole history
of a session without a store (older ones are dropped), and what a store has not got
yet (the entries since the last cut) for one with."""

Watcher = Callable[[ev.Event | None], None]
"""Called on the supervisor's thread with each history event (values still encoded),
and with ``None`` when the session closes; must be quick and must not raise (a
queue's put)."""


class HistoryLog:
    """Numbers a session's history events and keeps the ones not yet in a cut."""

    def __init__(self, next_seq: int = 0, *, durable: bool) -> None:
        """``next_seq``: the number of the next event (what the store holds, plus one);
        ``durable``: entries are written into cuts (the session has a store)."""
        self.next_seq = next_seq
        """The number the next history event gets (supervisor thread only)."""
        self._durable = durable
        self._pending: list[RawEntry] = []
        self._lock = threading.Lock()
        self._recent: deque[ev.Event] = deque(maxlen=RECENT)
        self._watchers: list[Watcher] = []

    # --- the supervisor's thread ------------------------------------------------------

    def note(self, event: ev.Event) -> ev.Event:
        """Number ``event`` (a history event without ``seq``) and keep its entry for the
        next cut; returns it. Its number is fixed from here on, even if it is emitted
        later (a run's end is noted before the cut that carries it is written, and
        emitted only once that cut is stored)."""
        # The event was made by the supervisor a moment ago and nobody else holds it:
        # setting its number is how it is built, as a frozen dataclass sets its own fields.
        object.__setattr__(event, "seq", self.next_seq)
        self.next_seq += 1
        if self._durable:
            self._pending.append(raw_entry(event))
        return event

    def retract(self, event: ev.Event) -> None:
        """Take back the number of ``event``, the last one :meth:`note` gave, before it
        was emitted (a run's completion whose final cut could not be written: the run
        failed instead, and no number is skipped)."""
        assert event.seq == self.next_seq - 1, "only the last numbered event is retracted"
        if self._durable and self._pending and self._pending[-1][0] == event.seq:
            self._pending.pop()
        self.next_seq -= 1
        object.__setattr__(event, "seq", None)

    def emitter(self, emit: Callable[[object], None]) -> Callable[[object], None]:
        """``emit`` (a run's event sink) with history events numbered and published
        first; other events pass through as they are."""

        def emit_numbered(event: object) -> None:
            if type(event) in DURABLE:
                assert isinstance(event, ev.Event)
                if event.seq is None:
                    self.note(event)
                self._publish(event)
            emit(event)

        return emit_numbered

    def take(self) -> tuple[RawEntry, ...]:
        """The entries the cut being written carries (they are no longer pending)."""
        taken, self._pending = tuple(self._pending), []
        return taken

    def put_back(self, entries: tuple[RawEntry, ...]) -> None:
        """``entries`` were not stored (the cut's write failed): the next cut carries them."""
        self._pending[:0] = entries

    def renew(self) -> None:
        """Start over (a recycled one-off session: a new session id, a new history)."""
        with self._lock:
            self.next_seq = 0
            self._pending.clear()
            self._recent.clear()

    def _publish(self, event: ev.Event) -> None:
        with self._lock:
            self._recent.append(event)
            watchers = tuple(self._watchers)
        for watcher in watchers:
            watcher(event)

    # --- any thread -------------------------------------------------------------------

    def recent(self, since: int) -> list[ev.Event]:
        """The history events in memory numbered ``since`` or more, oldest first."""
        with self._lock:
            return [event for event in self._recent if event.seq is not None and event.seq >= since]

    def watch(self, watcher: Watcher) -> None:
        """Hand ``watcher`` every history event published from now on."""
        with self._lock:
            self._watchers.append(watcher)

    def close(self) -> None:
        """The session closed: every watcher gets ``None`` (no more events will come)."""
        with self._lock:
            watchers, self._watchers = tuple(self._watchers), []
        for watcher in watchers:
            watcher(None)

    def unwatch(self, watcher: Watcher) -> None:
        """Stop handing events to ``watcher`` (no error if it is not watching)."""
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)
