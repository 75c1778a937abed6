"""Server-sent events of a session's history: a run's, or a thread's, resumable.

Every SSE event made from a history event carries that event's ``seq`` as its
``id:``; a client that reconnects with ``Last-Event-ID: N`` gets every event after
``N`` exactly once: the stream reads the session's history (``Session.afollow``),
the stored part first and then each new event live. One history event becomes one
SSE event per stream mode that has something to say about it:

- ``values``: ``{"outputs": [...]}``, the run's outputs so far, after each output
  (with ``"__interrupt__"`` when a request is asked);
- ``updates``: ``{executor: output}`` for each output, ``{"__interrupt__": [...]}``
  for each request;
- ``events``: every history event (``{"seq", "event", "run_id", ...}``).

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

__all__ = ["MODES", "run_stream", "sse", "thread_stream"]

MODES = ("values", "updates", "events")
"""The stream modes the service speaks."""

_ENDS = (RunCompletedEvent, RunFailedEvent, RunCancelledEvent)


def _closable(events: AsyncIterator[Event]) -> AsyncGenerator[Event, None]:
    """``Session.afollow``'s iterator is an async generator: closing it stops following."""
    assert isinstance(events, AsyncGenerator)
    return events


def sse(event: str, data: Any, seq: int | None = None) -> bytes:
    """One SSE event: its name, its data as one line of JSON, and its id when given."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    head = f"event: {event}\ndata: {text}\n"
    return (head + (f"id: {seq}\n\n" if seq is not None else "\n")).encode()


def _parts(event: Event, modes: Sequence[str], outputs: list[Any]) -> list[bytes]:
    """The SSE events ``event`` becomes under ``modes`` (``outputs``: the run's so far,
    ``event``'s own included)."""
    seq = event.seq
    found: list[bytes] = []
    interrupt: dict[str, Any] | None = None
    if isinstance(event, RequestEvent):
        interrupt = interrupt_json(
            event.request_id, event.executor, event.value, event.response_type
        )
    for mode in modes:
        if mode == "events":
            found.append(sse("events", event_json(event), seq))
        elif mode == "updates":
            if isinstance(event, OutputEvent):
                found.append(sse("updates", {event.executor: outputs[-1]}, seq))
            elif interrupt is not None:
                found.append(sse("updates", {"__interrupt__": [interrupt]}, seq))
        elif mode == "values":
            if isinstance(event, OutputEvent):
                found.append(sse("values", {"outputs": list(outputs)}, seq))
            elif interrupt is not None:
                values = {"outputs": list(outputs), "__interrupt__": [interrupt]}
                found.append(sse("values", values, seq))
    if isinstance(event, RunFailedEvent):
        found.append(sse("error", {"error": event.error_type, "message": event.error}, seq))
    return found


async def run_stream(
    session: Session, run: Run, modes: Sequence[str], last_seen: int | None
) -> AsyncIterator[bytes]:
    """The run's events from its start (or after ``last_seen``, a ``Last-Event-ID``) to its
    end. The run must have started (``run.started`` done without error)."""
    first = run.first_seq
    assert first is not None, "the run has started"
    skip = max(first, last_seen + 1 if last_seen is not None else first)
    if run.end_seq is not None and skip > run.end_seq:
        return  # everything was seen
    outputs: list[Any] = []
    # From the run's first event even when resuming: "values" needs the outputs before.
    async with aclosing(_closable(session.afollow(first, forever=True))) as events:
        async for event in events:
            seq = event.seq
            assert seq is not None
            if isinstance(event, OutputEvent):
                outputs.append(to_json(event.value))
            if seq >= skip:
                for part in _parts(event, modes, outputs):
                    yield part
            if isinstance(event, _ENDS):
                return


async def thread_stream(
    session: Session, modes: Sequence[str], last_seen: int | None
) -> AsyncIterator[bytes]:
    """The thread's history after ``last_seen`` (from its start without it), then each new
    history event, until the session closes or the client leaves. ``values`` count the
    outputs of each run from its start, or from where this stream began in mid-run."""
    outputs: list[Any] = []
    since = last_seen + 1 if last_seen is not None else 0
    async with aclosing(_closable(session.afollow(since, forever=True))) as events:
        async for event in events:
            if isinstance(event, RunStartedEvent):
                outputs = []
            elif isinstance(event, OutputEvent):
                outputs.append(to_json(event.value))
            for part in _parts(event, modes, outputs):
                yield part
