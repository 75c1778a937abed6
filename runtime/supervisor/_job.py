"""What a run hands the supervisor, and the actor whose thread runs it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actorflow.actors import LeanActor
from actorflow.storage import EMPTY_METADATA

__all__ = ["Payload", "RunJob", "SupervisorActor", "new_run_id"]


class Payload(bytes):
    """An encoded value inside an event, decoded in the caller's thread."""


@dataclass(slots=True)
class RunJob:
    """One run request, handed to the supervisor thread."""

    run_id: str
    """Id of this run."""
    emit: Callable[[Any], None]
    """Event sink (thread-safe; called on the supervisor thread): events, then an end marker."""
    cancel: threading.Event
    """Set to stop at the next barrier."""
    max_supersteps: int
    """Bound on this run's supersteps."""
    metadata: bytes = EMPTY_METADATA
    """User metadata for checkpoints, packed when the run was submitted: what the caller
    does to its dict afterwards changes nothing."""
    input: bytes | None = None
    """The encoded input to queue for the start executor, if any."""
    trace: bytes | None = None
    """The caller's current span when the run was asked for, packed (see ``telemetry``)."""


class SupervisorActor(LeanActor):
    """The actor whose thread runs a :class:`Driver`. Each message is a callable to run.

    Daemon thread: a forgotten supervisor never keeps the interpreter alive.
    """

    def on_receive(self, message: Any) -> Any:
        """Run one job (a zero-argument callable) on this actor's thread."""
        return message()


def new_run_id() -> str:
    """A fresh run id."""
    return os.urandom(8).hex()
