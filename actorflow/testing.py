"""Helpers for testing your own workflows: fault injection and event collection.

>>> import actorflow as af
>>> from actorflow.testing import inject_fault, run_to_idle
>>> class Inc(af.Executor):
...     @af.handler
...     def on_num(self, n: int, ctx: af.Context) -> None:
...         ctx.output(n + 1)
>>> wf = af.WorkflowBuilder("t", start=Inc("inc"), restart=af.RestartPolicy()).build()
>>> with wf.session() as s:
...     inject_fault(s, "inc", superstep=1)
...     outcome = run_to_idle(s, 41)
>>> outcome.outputs, outcome.restarts
([42], 1)
>>> wf.close()
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from actorflow.actors import RayBackend, ThreadBackend
from actorflow.runtime import (
    Event,
    ExecutorFailedEvent,
    OutputEvent,
    RunCancelledEvent,
    RunCompletedEvent,
    RunRestartedEvent,
    RunStatus,
    Session,
)
from actorflow.runtime._runner import InjectedFault
from actorflow.runtime.session import NO_INPUT
from actorflow.runtime.supervisor import Fault

__all__ = ["FaultKind", "InjectedFault", "RunOutcome", "inject_fault", "run_to_idle"]

FaultKind = Literal["exception", "timeout", "death", "kill"]


def inject_fault(
    session: Session, executor: str, superstep: int, kind: FaultKind = "exception"
) -> None:
    """Make ``executor`` fail once in ``superstep`` (counted across the session's lineage).

    Kinds:
        ``exception``: the handlers run (state changes), then :class:`InjectedFault`
            is raised, so recovery must restore the pre-step state.
        ``timeout``: the step outlives the executor's ``timeout=`` (which must be set);
            the supervisor abandons and replaces the actor.
        ``death``: the executor's actor is stopped before the step is delivered.
        ``kill``: the handlers run, then the process hosting the executor kills
            itself with ``SIGKILL`` mid-step (a crashed worker). Only on a backend
            whose hosts are processes of their own (``RayBackend``).

    The fault fires on the first attempt only, so a restart policy recovers.

    Raises:
        ValueError: an unknown kind, or ``kill`` on a session hosted in this process.
    """
    if kind not in ("exception", "timeout", "death", "kill"):
        raise ValueError(f"unknown fault kind {kind!r}; use exception, timeout, death or kill")
    if kind == "kill" and isinstance(session.backend, ThreadBackend):
        raise ValueError(
            "a 'kill' fault kills the process hosting the executor, and this session's "
            "executors are threads of the caller's process: use it with RayBackend"
        )
    backend = session.backend
    if kind == "kill" and isinstance(backend, RayBackend) and executor in backend.on_driver:
        raise ValueError(
            f"a 'kill' fault kills the process hosting the executor, and {executor!r} is "
            "hosted on the driver (RayBackend(on_driver=...)): kill an executor in a Ray worker"
        )
    session.inject_fault(Fault(executor, superstep, kind))


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What :func:`run_to_idle` observed. Never raises for a failed run: inspect ``error``."""

    status: RunStatus
    """How the run ended."""
    outputs: list[Any]
    """Output values, in order."""
    events: list[Event] = field(default_factory=list)
    """Every event, in order."""
    error: BaseException | None = None
    """The run's failure, if it failed."""

    @property
    def restarts(self) -> int:
        """How many restarts the supervisor performed."""
        return sum(1 for e in self.events if isinstance(e, RunRestartedEvent))

    @property
    def failures(self) -> list[ExecutorFailedEvent]:
        """Every executor failure seen (restarted or not)."""
        return [e for e in self.events if isinstance(e, ExecutorFailedEvent)]


def run_to_idle(
    session: Session,
    input: Any = NO_INPUT,
    *,
    max_supersteps: int | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> RunOutcome:
    """Run ``session`` until it is idle (or fails), collecting every event."""
    events: list[Event] = []
    try:
        for event in session.stream(input, max_supersteps=max_supersteps, metadata=metadata):
            events.append(event)  # noqa: PERF402 - a loop keeps the events seen before a failure
    except Exception as exc:  # noqa: BLE001 - reported in the outcome, for assertions
        outputs = [e.value for e in events if isinstance(e, OutputEvent)]
        return RunOutcome(RunStatus.FAILED, outputs, events, exc)
    outputs = [e.value for e in events if isinstance(e, OutputEvent)]
    status = _status_of(events)
    return RunOutcome(status, outputs, events)


def _status_of(events: list[Event]) -> RunStatus:
    for event in reversed(events):
        if isinstance(event, RunCompletedEvent):
            return event.status
        if isinstance(event, RunCancelledEvent):
            return RunStatus.CANCELLED
    return RunStatus.FAILED
