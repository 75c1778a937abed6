"""Server-sent events of a session's history: a run's, or a thread's, resumable.

Every SSE event made from a history event carries that event's ``seq`` in its
``id:``; a client that reconnects with ``Last-Event-ID`` gets every event after the
one it names exactly once: the stream reads the session's history
(``Session.afollow``), the stored part first and then each new event live. One
history event becomes one SSE event per stream mode that has something to say about
it, a group: the last of a group has the id ``N`` (the history event's seq), the
others ``N:k`` (k its place in the group, from 0), so a client that dropped inside a
group gets the rest of it, and one that saw ``N`` has seen all of it:

- ``values``: ``{"outputs": [...]}``, the run's outputs so far, after each output
  (with ``"__interrupt__"`` when a request is asked);
- ``updates``: ``{executor: output}`` for each output, ``{"__interrupt__": [...]}``
  for each request;
- ``events``: every history event (``{"seq", "event", "run_id", ...}``);
- ``lifecycle`` (a thread's stream only, see :data:`THREAD_MODES`): the events that
  start and end each run, as ``events``.

A failed run also sends ``event: error`` with ``{"error", "message"}``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

from actorflow.actors import to_json
from actorflow.runtime import (
    Event,
    OutputEvent,
    RequestEvent,
    RunCancelledEvent,
    RunCompletedEvent,
    RunFailedEvent,
    RunStartedEvent,
    Session,
)

from ._runs import Run
from ._shapes import event_json, interrupt_json

__all__ = [
    "MODES",
    "THREAD_MODES",
    "Position",
    "listed",
    "position_of",
    "run_history",
    "run_stream",
    "sse",
    "thread_stream",
]

MODES = ("values", "updates", "events")
"""The stream modes the service speaks."""

_ENDS = (RunCompletedEvent, RunFailedEvent, RunCancelledEvent)
_LIFECYCLE = (RunStartedEvent, *_ENDS)

THREAD_MODES = {"run_modes": "events", "state_update": "values", "lifecycle": "lifecycle"}
"""The modes a thread's stream also takes (as LangGraph's SDK names them), and the mode
each is: ``run_modes`` every history event, ``state_update`` the outputs so far after
each, ``lifecycle`` the events that start and end runs (sent as ``events``)."""


def _closable(events: AsyncIterator[Event]) -> AsyncGenerator[Event, None]:
    """``Session.afollow``'s iterator is an async generator: closing it stops following."""
    assert isinstance(events, AsyncGenerator)
    return events


Position = tuple[int, int | None]
"""Where a client's ``Last-Event-ID`` says it stopped: a history event's seq, and the
last part of its group it got (None: all of them)."""


def position_of(event_id: str) -> Position:
    """The :data:`Position` an SSE id this service sent (``N`` or ``N:k``) names.

    Raises:
        ValueError: not such an id.
    """
    seq, colon, part = event_id.strip().partition(":")
    if not seq.isdigit() or (colon and not part.isdigit()):
        raise ValueError(event_id)
    return int(seq), int(part) if colon else None


def sse(event: str, data: Any, event_id: int | str | None = None) -> bytes:
    """One SSE event: its name, its data as one line of JSON, and its id when given."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    head = f"event: {event}\ndata: {text}\n"
    return (head + (f"id: {event_id}\n\n" if event_id is not None else "\n")).encode()


def _parts(
    event: Event, modes: Sequence[str], outputs: list[Any], after: Position | None
) -> list[bytes]:
    """The SSE events ``event`` becomes under ``modes`` (``outputs``: the run's so far,
    ``event``'s own included), those a client at ``after`` has not seen."""
    seq = event.seq
    assert seq is not None
    if after is not None and (seq < after[0] or (seq == after[0] and after[1] is None)):
        return []
    found: list[tuple[str, Any]] = []
    interrupt: dict[str, Any] | None = None
    if isinstance(event, RequestEvent):
        interrupt = interrupt_json(
            event.request_id, event.executor, event.value, event.response_type
        )
    for mode in modes:
        if mode == "events" or (mode == "lifecycle" and isinstance(event, _LIFECYCLE)):
            found.append(("events", event_json(event)))
        elif mode == "updates":
            if isinstance(event, OutputEvent):
                found.append(("updates", {event.executor: outputs[-1]}))
            elif interrupt is not None:
                found.append(("updates", {"__interrupt__": [interrupt]}))
        elif mode == "values":
            if isinstance(event, OutputEvent):
                found.append(("values", {"outputs": list(outputs)}))
            elif interrupt is not None:
                found.append(("values", {"outputs": list(outputs), "__interrupt__": [interrupt]}))
    if isinstance(event, RunFailedEvent):
        found.append(("error", {"error": event.error_type, "message": event.error}))
    last = len(found) - 1
    first = after[1] + 1 if after is not None and seq == after[0] and after[1] is not None else 0
    return [
        sse(name, data, seq if k == last else f"{seq}:{k}")
        for k, (name, data) in enumerate(found)
        if k >= first
    ]


def run_history(session: Session, run: Run) -> AsyncGenerator[Event, None]:
    """The session's history from ``run``'s first event on, live: what
    :func:`run_stream` reads of a run that may still go on. The run must have started
    (``run.started`` done without error)."""
    first = run.first_seq
    assert first is not None, "the run has started"
    # From the run's first event even when resuming: "values" needs the outputs before.
    return _closable(session.afollow(first, forever=True))


async def listed(events: Sequence[Event]) -> AsyncGenerator[Event, None]:
    """``events``, read already (a run that ended: its stored history)."""
    for event in events:
        yield event


async def run_stream(
    history: AsyncGenerator[Event, None], modes: Sequence[str], last_seen: Position | None
) -> AsyncIterator[bytes]:
    """A run's events from its start (or after ``last_seen``, a ``Last-Event-ID``) to its
    end, read from ``history``: the history from the run's first event
    (:func:`run_history`, or :func:`listed` stored events of a run that ended)."""
    outputs: list[Any] = []
    async with aclosing(history) as events:
        async for event in events:
            if isinstance(event, OutputEvent):
                outputs.append(to_json(event.value))
            for part in _parts(event, modes, outputs, last_seen):
                yield part
            if isinstance(event, _ENDS):
                return


async def thread_stream(
    history: AsyncGenerator[Event, None], modes: Sequence[str], last_seen: Position | None
) -> AsyncIterator[bytes]:
    """The thread's history after ``last_seen`` (from its start without it), then each new
    history event, read from ``history`` (the thread's events from ``last_seen``'s seq, or
    0, on), until it ends or the client leaves. ``values`` count the outputs of each run
    from its start, or from where this stream began in mid-run."""
    outputs: list[Any] = []
    async with aclosing(history) as events:
        async for event in events:
            if isinstance(event, RunStartedEvent):
                outputs = []
            elif isinstance(event, OutputEvent):
                outputs.append(to_json(event.value))
            for part in _parts(event, modes, outputs, last_seen):
                yield part
