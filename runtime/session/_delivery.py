"""Handing a run's events to the caller: sinks, and decoding payloads in the caller's thread.

The supervisor emits events whose values are still bytes (:class:`Payload`); the
caller's side decodes each one, so every value a caller sees is its own copy.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import actorflow.runtime._events as ev
from actorflow.actors import decode
from actorflow.runtime.supervisor import Payload

__all__ = [
    "AsyncSink",
    "End",
    "EndSink",
    "EventStream",
    "QueueSink",
    "collected",
    "materialize",
    "pending_of",
]


def materialize(event: ev.Event) -> ev.Event:
    """Return ``event`` with any encoded value decoded into a fresh object."""
    kind = type(event)
    if kind is ev.OutputEvent:
        e: Any = event
        if type(e.value) is Payload:
            return ev.OutputEvent(
                e.run_id, e.superstep, e.time, e.executor, decode(e.value), seq=e.seq
            )
    elif kind is ev.RequestEvent:
        e = event
        if type(e.value) is Payload:
            return ev.RequestEvent(
                e.run_id,
                e.superstep,
                e.time,
                e.request_id,
                e.executor,
                decode(e.value),
                e.response_type,
                seq=e.seq,
            )
    elif kind is ev.RunStartedEvent:
        e = event
        if type(e.input) is Payload:
            started: ev.Event = replace(e, input=decode(e.input))
            return started
    elif kind is ev.RequestAnsweredEvent:
        e = event
        if type(e.value) is Payload:
            answered: ev.Event = replace(e, value=decode(e.value))
            return answered
    return event  # most events: nothing encoded inside


def collected(raw: list[ev.Event]) -> tuple[list[ev.Event], list[Any], int]:
    """A finished run's events and outputs for the caller, and its superstep count.

    One pass. Each output is decoded twice, so the events and the outputs list are
    independent copies: the caller may mutate either.
    """
    events: list[ev.Event] = []
    outputs: list[Any] = []
    supersteps = 0
    for event in raw:
        kind = type(event)
        if kind is ev.SuperstepCompletedEvent:
            supersteps += 1
        elif kind is ev.OutputEvent:
            outputs.append(decode(event.value))  # type: ignore[attr-defined]  # an OutputEvent
        events.append(materialize(event))
    return events, outputs, supersteps


def pending_of(pending: Mapping[str, list[Any]]) -> tuple[ev.PendingRequest, ...]:
    """Open requests (``RunState.pending``), decoded for the caller, sorted by id."""
    return tuple(
        ev.PendingRequest(request_id, executor, decode(payload), response_type)
        for request_id, (executor, payload, response_type) in sorted(pending.items())
    )


class QueueSink:
    """Events into a thread-safe queue, for a blocking ``stream()`` consumer."""

    __slots__ = ("queue",)

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def __call__(self, event: Any) -> None:
        self.queue.put(event)


class EventStream(Iterator[ev.Event]):
    """What ``Session.stream`` returns: the run's events, decoded in the caller's thread.

    Unlike a generator, closing it stops the run even before the first ``next()``;
    so do an exception (``KeyboardInterrupt``) while waiting for an event, and
    dropping it unfinished. ``stop`` is called at most once, on the caller's thread.
    """

    __slots__ = ("_done", "_sink", "_stop")

    def __init__(self, sink: QueueSink, stop: Callable[[], None]) -> None:
        self._sink = sink
        self._stop = stop
        self._done = False

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> ev.Event:
        if self._done:
            raise StopIteration
        try:
            item = self._sink.queue.get()
        except BaseException:
            self.close()  # Ctrl-C while waiting: stop the run, then let it propagate
            raise
        if type(item) is End:
            self._done = True
            item.raise_error()
            raise StopIteration
        return materialize(item)

    def close(self) -> None:
        """Stop the run if it is still going (waits a bounded time; see ``Session.cancel``)."""
        if not self._done:
            self._done = True
            self._stop()

    def __del__(self) -> None:
        self.close()


class AsyncSink:
    """Events into an asyncio queue owned by ``loop``; safe to call from any thread."""

    __slots__ = ("_put", "loop", "queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._put: Callable[[Any], None] = self.queue.put_nowait

    def __call__(self, event: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self._put, event)
        except RuntimeError:
            pass  # the consumer's loop is closed: nobody is left to receive the event


class EndSink:
    """Events into a list; only the :class:`End` is handed to ``loop`` (as ``end``'s result).

    For ``arun``: the caller needs the events only once the run is over, so the
    loop is woken once per run. Safe to call from any thread.
    """

    __slots__ = ("end", "events", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: list[Any] = []
        self.end: asyncio.Future[End] = loop.create_future()

    def __call__(self, event: Any) -> None:
        if type(event) is not End:
            self.events.append(event)  # atomic; read by the loop only after the End
            return
        try:
            self.loop.call_soon_threadsafe(self._settle, event)
        except RuntimeError:
            pass  # the consumer's loop is closed: nobody is left to receive the end

    def _settle(self, end: End) -> None:
        if not self.end.done():
            self.end.set_result(end)


class End:
    """Last item of a run's event stream: how it ended."""

    __slots__ = ("error", "status")

    def __init__(self, status: ev.RunStatus, error: BaseException | None) -> None:
        self.status = status
        self.error = error

    def raise_error(self) -> None:
        """Raise the run's failure in the caller's thread, if it failed."""
        if self.error is not None:
            raise self.error
