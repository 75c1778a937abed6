"""The JSON shapes the service answers with, named after the Agent Protocol / LangGraph API.

Plain functions from the library's records to JSON data: a history event, an
interrupt (a pending request), a checkpoint reference, an assistant (the workflow).
Message values go through ``actorflow.actors.to_json``, so a registered dataclass is
an object of its fields plus ``"$type"``.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from actorflow.actors import to_json
from actorflow.runtime import KINDS, Event, Workflow

__all__ = ["assistant_json", "checkpoint_ref", "event_json", "interrupt_json", "iso"]

_SKIPPED = frozenset({"run_id", "superstep", "time", "seq"})


def iso(ts: float) -> str:
    """A time (seconds since the epoch) as ISO 8601 in UTC."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat()


def event_json(event: Event) -> dict[str, Any]:
    """A history event: ``{"seq", "event": its kind, "run_id", "superstep", "time", "data"}``,
    ``data`` holding its other fields (values as JSON, a status as its text)."""
    data: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        if f.name not in _SKIPPED:
            value = getattr(event, f.name)
            data[f.name] = value.value if f.name == "status" else to_json(value)
    return {
        "seq": event.seq,
        "event": KINDS.get(type(event), type(event).__name__),
        "run_id": event.run_id,
        "superstep": event.superstep,
        "time": iso(event.time),
        "data": data,
    }


def interrupt_json(
    request_id: str, executor: str, value: Any, response_type: str
) -> dict[str, Any]:
    """A pending request as an interrupt: ``{"id", "value", "executor", "response_type"}``."""
    return {
        "id": request_id,
        "value": to_json(value),
        "executor": executor,
        "response_type": response_type,
    }


def checkpoint_ref(thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
    """A checkpoint's address as LangGraph names it."""
    return {
        "thread_id": thread_id,
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint_id,
        "checkpoint_map": None,
    }


def assistant_json(workflow: Workflow, created: float) -> dict[str, Any]:
    """The workflow as the one assistant: its id and graph id are its name."""
    when = iso(created)
    return {
        "assistant_id": workflow.name,
        "graph_id": workflow.name,
        "name": workflow.name,
        "description": None,
        "config": {},
        "context": {},
        "metadata": {"start": workflow.start_executor, "signature": workflow.signature},
        "version": 1,
        "created_at": when,
        "updated_at": when,
    }
