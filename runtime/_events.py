"""Events a run emits, and the result a finished run returns.

Events are small immutable records. Every event names its run, its superstep
and its wall-clock time. Values inside events (outputs, request payloads) are
decoded from bytes for each caller, so they are the caller's own.

Some events are also the session's *history* (see ``docs/history.md``): a run
started (with its input), an output, an executor that failed, a restart, a
rolled-back superstep, a request asked or answered, and how the run ended. Those
carry a per-session sequence number, ``seq``, and a store keeps them with the
checkpoint they belong to, so they can be read back (``Session.history``) and a
stream can be resumed from a number. The others (supersteps started and
completed, executors invoked and completed, checkpoints written) have no ``seq``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CheckpointFailedEvent",
    "CheckpointedEvent",
    "Event",
    "ExecutorCompletedEvent",
    "ExecutorFailedEvent",
    "ExecutorInvokedEvent",
    "MessageDroppedEvent",
    "OutputEvent",
    "PendingRequest",
    "RequestAnsweredEvent",
    "RequestEvent",
    "RunCancelledEvent",
    "RunCompletedEvent",
    "RunFailedEvent",
    "RunIdleEvent",
    "RunIdleWithPendingRequestsEvent",
    "RunRestartedEvent",
    "RunResult",
    "RunStartedEvent",
    "RunStatus",
    "SuperstepCompletedEvent",
    "SuperstepRolledBackEvent",
    "SuperstepStartedEvent",
]


class RunStatus(enum.Enum):
    """How a run ended."""

    COMPLETED = "completed"
    """No message left in flight and no request pending."""
    IDLE_WITH_PENDING_REQUESTS = "idle_with_pending_requests"
    """No message in flight, but requests wait for answers (``session.respond``)."""
    FAILED = "failed"
    """A handler failed past the restart policy, or the run broke a rule."""
    CANCELLED = "cancelled"
    """``cancel()`` stopped the run at a barrier."""


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event."""

    run_id: str
    """The run that emitted it."""
    superstep: int
    """Superstep it belongs to (0 before the first)."""
    time: float
    """Wall-clock time, seconds since the epoch."""
    seq: int | None = field(default=None, kw_only=True)
    """Its number in the session's history (see the module docstring), or ``None``
    for an event that is not part of it."""


@dataclass(frozen=True, slots=True)
class RunStartedEvent(Event):
    """A run began (history)."""

    workflow: str = ""
    """Workflow name."""
    session: str = ""
    """Session (checkpoint lineage) id."""
    input: Any = None
    """The run's input (the caller's own copy); ``None`` for a run without one (it
    continues what is in flight, or handles queued answers)."""


@dataclass(frozen=True, slots=True)
class SuperstepStartedEvent(Event):
    """A superstep began; ``executors`` are the ones with messages to handle."""

    executors: tuple[str, ...] = ()
    """Ids of the executors invoked in this superstep, sorted."""


@dataclass(frozen=True, slots=True)
class SuperstepCompletedEvent(Event):
    """Every executor of the superstep reached the barrier."""


@dataclass(frozen=True, slots=True)
class ExecutorInvokedEvent(Event):
    """An executor was handed its inbox for this superstep."""

    executor: str = ""
    """Executor id."""
    messages: int = 0
    """How many deliveries its inbox held."""


@dataclass(frozen=True, slots=True)
class ExecutorCompletedEvent(Event):
    """An executor finished its part of the superstep."""

    executor: str = ""
    """Executor id."""


@dataclass(frozen=True, slots=True)
class ExecutorFailedEvent(Event):
    """An executor's handler raised, timed out or its actor died (history)."""

    executor: str = ""
    """Executor id."""
    error_type: str = ""
    """Qualified name of the exception type."""
    error: str = ""
    """The exception's message."""
    traceback: str = ""
    """The last frames of where it was raised, as text (empty for a timeout or a dead
    actor, which raise nothing in the handler)."""


@dataclass(frozen=True, slots=True)
class MessageDroppedEvent(Event):
    """A value an executor sent reached no executor: targets handle its type, but every
    condition on the way declined it (a ``when``, a switch without a ``Default``, a
    fan-out selector choosing nobody). Not an error unless the workflow was built
    with ``strict_routing=True`` (then the run fails with ``MessageDropped``)."""

    executor: str = ""
    """Executor that sent it."""
    type_name: str = ""
    """Name of the value's type."""
    targets: tuple[str, ...] = ()
    """The out-edge targets that handle the type and were passed over."""


@dataclass(frozen=True, slots=True)
class OutputEvent(Event):
    """A handler called ``ctx.output(value)`` (history)."""

    executor: str = ""
    """Executor that emitted it."""
    value: Any = None
    """The output (the caller's own copy)."""


@dataclass(frozen=True, slots=True)
class RequestEvent(Event):
    """A handler called ``ctx.request(value, response_type)`` (history)."""

    request_id: str = ""
    """Id to answer with ``session.respond({request_id: answer})``."""
    executor: str = ""
    """Executor that asked."""
    value: Any = None
    """The request (the caller's own copy)."""
    response_type: str = ""
    """Name of the type the answer must have."""


@dataclass(frozen=True, slots=True)
class RequestAnsweredEvent(Event):
    """An answer to a request was queued for the executor that asked (history)."""

    request_id: str = ""
    """The request answered."""
    executor: str = ""
    """Executor that asked."""
    value: Any = None
    """The answer (the caller's own copy)."""


@dataclass(frozen=True, slots=True)
class CheckpointedEvent(Event):
    """A checkpoint was written, or (``queued``) handed to the background writer.

    With ``Durability.SYNC`` (the default) every such event means the record is in
    the store. With ``Durability.ASYNC`` a ``step`` or ``response`` cut is only
    queued when the event is emitted (``queued=True``): if its write then fails,
    the run fails at the next barrier with a :class:`CheckpointFailedEvent`, and
    that id never appears in the store. ``entry`` and ``final`` cuts are written
    before their event even then (``queued=False``).
    """

    checkpoint_id: str = ""
    """Its id in the store."""
    kind: str = ""
    """``entry``, ``step``, ``response`` or ``final``."""
    queued: bool = False
    """True: only queued for writing (``Durability.ASYNC``), not known to be stored yet."""


@dataclass(frozen=True, slots=True)
class CheckpointFailedEvent(Event):
    """Writing a checkpoint failed; the run fails rather than continue unsaved."""

    error_type: str = ""
    """Qualified name of the exception type."""
    error: str = ""
    """The exception's message."""


@dataclass(frozen=True, slots=True)
class RunRestartedEvent(Event):
    """The supervisor restored a failed executor and re-ran its part of the superstep
    (history)."""

    executor: str = ""
    """Executor that failed."""
    attempt: int = 0
    """Restarts so far within the policy's window."""
    error_type: str = ""
    """Qualified name of the exception that caused it."""
    error: str = ""
    """Its message."""
    backoff: float = 0.0
    """Seconds the supervisor waited (the policy's backoff) before the re-run."""


@dataclass(frozen=True, slots=True)
class SuperstepRolledBackEvent(Event):
    """A superstep failed for good and was undone (history): every executor it ran is
    back at its state of the last barrier, and its messages are in flight again."""

    executors: tuple[str, ...] = ()
    """Ids of the executors the superstep ran, sorted."""
    reason: str = ""
    """Why: the failure that ended the superstep."""


@dataclass(frozen=True, slots=True)
class RunIdleEvent(Event):
    """No message is in flight and no request is pending."""


@dataclass(frozen=True, slots=True)
class RunIdleWithPendingRequestsEvent(Event):
    """No message is in flight; the listed requests wait for answers."""

    request_ids: tuple[str, ...] = ()
    """Pending request ids."""


@dataclass(frozen=True, slots=True)
class RunCompletedEvent(Event):
    """The run ended normally (status COMPLETED or IDLE_WITH_PENDING_REQUESTS) (history)."""

    status: RunStatus = RunStatus.COMPLETED
    """How it ended."""


@dataclass(frozen=True, slots=True)
class RunFailedEvent(Event):
    """The run failed (history)."""

    executor: str | None = None
    """The executor at fault, if any."""
    error_type: str = ""
    """Qualified name of the exception type."""
    error: str = ""
    """Its message."""


@dataclass(frozen=True, slots=True)
class RunCancelledEvent(Event):
    """The run was cancelled and stopped at a barrier (history)."""


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A request waiting for an answer."""

    request_id: str
    """Id to answer with."""
    executor: str
    """Executor that asked."""
    value: Any
    """The request value (the caller's own copy)."""
    response_type: str
    """Name of the type the answer must have."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a finished run returns. Everything in it is the caller's own."""

    run_id: str
    """Id of the run."""
    status: RunStatus
    """How it ended."""
    outputs: list[Any]
    """Values passed to ``ctx.output``, in superstep order, then executor id, then call order."""
    events: list[Event] = field(default_factory=list)
    """Every event, in order."""
    supersteps: int = 0
    """Supersteps executed in this run."""
    pending_requests: tuple[PendingRequest, ...] = ()
    """Requests still waiting for answers."""
    checkpoint_id: str | None = None
    """Id of the last checkpoint written, when a store is used."""

    def __repr__(self) -> str:
        """The result with the number of its events, not the events: a long run's would
        bury the rest.

        >>> RunResult("r1", RunStatus.COMPLETED, [3], [], supersteps=2)
        RunResult(run_id='r1', status=RunStatus.COMPLETED, outputs=[3], supersteps=2, events=<0 events>, pending_requests=(), checkpoint_id=None)
        """
        return (
            f"RunResult(run_id={self.run_id!r}, status={self.status}, outputs={self.outputs!r}, "
            f"supersteps={self.supersteps}, events=<{len(self.events)} events>, "
            f"pending_requests={self.pending_requests!r}, checkpoint_id={self.checkpoint_id!r})"
        )
