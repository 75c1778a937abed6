"""A session's history on the supervisor's side: numbered, carried by cuts, watched.

:class:`HistoryLog` outlives the drivers of its session (a ``reset`` keeps the
numbering going). On the supervisor's thread it numbers each history event as it
is emitted (see ``actorflow.runtime._events``), keeps what the next cut will carry
(with a store: entries are written only inside cuts, so they are stored in the
same atomic step as the cut they belong to), and hands each event to the session's
watchers. Any thread may read the events it holds and add or remove a watcher.

What it holds in memory is what no store holds: with a store, the events whose cut
is not stored yet (each is dropped once it is, and reads take it from the store);
without one, the latest :data:`RECENT` events, whose values hold at most
:data:`RECENT_BYTES`. So a session keeps a bounded history without a store and next
to none with one: keeping the last 10,000 events of every session, stored or not,
made a service's memory grow by ~720 bytes a run (three events, by ``tracemalloc``)
until every session held them all.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import actorflow.runtime._events as ev
from actorflow.runtime._history import DURABLE, raw_entry
from actorflow.storage import RawEntry

__all__ = ["RECENT", "RECENT_BYTES", "HistoryLog", "Watcher"]

RECENT = 1_000
"""How many history events a session without a store keeps in memory: the latest
(older ones are dropped); they are the whole history it can read."""

RECENT_BYTES = 8 << 20
"""How many bytes of encoded values (inputs, outputs, requests, answers) the events a
session without a store keeps hold at most: with large outputs it keeps fewer events."""

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
        self._recent: deque[tuple[ev.Event, int]] = deque()
        """The events in memory, in order, each with the bytes of its values."""
        self._bytes = 0
        """The bytes of the values of the events in ``_recent``."""
        self._stored_through = -1
        """The number of the newest event the store holds (-1: none, or no store)."""
        self._watchers: list[Watcher] = []
        self._closed = False

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
            self._bytes = 0
            self._stored_through = -1

    def _publish(self, event: ev.Event) -> None:
        with self._lock:
            assert event.seq is not None
            if event.seq > self._stored_through:  # a run's end is emitted once stored
                self._keep(event)
            watchers = tuple(self._watchers)
        for watcher in watchers:
            watcher(event)

    def _keep(self, event: ev.Event) -> None:
        """Hold ``event`` in memory; without a store, drop the oldest past the bounds
        (under the lock). With one, every event is held until its cut is stored: nothing
        else has it yet (as the pending entries, which the cut takes, hold them all)."""
        weight = _value_bytes(event)
        recent = self._recent
        recent.append((event, weight))
        self._bytes += weight
        if self._durable:
            return
        while len(recent) > RECENT or (self._bytes > RECENT_BYTES and len(recent) > 1):
            self._bytes -= recent.popleft()[1]

    # --- any thread -------------------------------------------------------------------

    def stored(self, through: int) -> None:
        """The events numbered up to ``through`` are in the store: no longer kept here.

        Called once the cut that carries them is stored (on the checkpoint writer's
        thread for a background write); cuts are stored in order, so ``through`` grows.
        """
        with self._lock:
            self._stored_through = max(self._stored_through, through)
            recent = self._recent
            while recent and _seq(recent[0][0]) <= through:
                self._bytes -= recent.popleft()[1]

    def recent(self, since: int) -> list[ev.Event]:
        """The history events in memory numbered ``since`` or more, oldest first."""
        with self._lock:
            return [event for event, _ in self._recent if _seq(event) >= since]

    def watch(self, watcher: Watcher) -> None:
        """Hand ``watcher`` every history event published from now on (only ``None`` if
        the session is closed: nothing will come)."""
        with self._lock:
            if not self._closed:
                self._watchers.append(watcher)
                return
        watcher(None)

    def close(self) -> None:
        """The session closed: every watcher gets ``None`` (no more events will come)."""
        with self._lock:
            self._closed = True
            watchers, self._watchers = tuple(self._watchers), []
        for watcher in watchers:
            watcher(None)

    def forget_parent(self) -> None:
        """In a forked child (its only thread): closed, as the session is here (its runs
        are the parent's); the parent's followers do not exist here."""
        self._lock = threading.Lock()
        self._watchers = []
        self._closed = True

    def unwatch(self, watcher: Watcher) -> None:
        """Stop handing events to ``watcher`` (no error if it is not watching)."""
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)


def _seq(event: ev.Event) -> int:
    seq = event.seq
    assert seq is not None, "the log holds numbered events only"
    return seq


def _value_bytes(event: ev.Event) -> int:
    """The bytes of the encoded values ``event`` holds (its input, output, request or answer)."""
    value = event.input if type(event) is ev.RunStartedEvent else getattr(event, "value", None)
    return len(value) if isinstance(value, bytes) else 0
