"""Helpers for testing your own workflows: fault injection, event collection, and
replaying stored sessions against new code (:func:`replay`, see ``docs/effects.md``).

A fault is injected by wrapping the executor's host (:meth:`Session.wrap_host`):
the wrapper sees each ``step`` call go by and fails the chosen one, so nothing of
fault injection is on the runtime's own path.

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

import os
import signal
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from actorflow.actors import (
    HostedFactory,
    HostFuture,
    HostProxy,
    HostRef,
    RayBackend,
    ReplyFuture,
    ThreadBackend,
)
from actorflow.runtime import (
    NO_INPUT,
    Divergence,
    Event,
    ExecutorFailedEvent,
    OutputEvent,
    ReplayReport,
    RunCancelledEvent,
    RunCompletedEvent,
    RunRestartedEvent,
    RunStatus,
    Session,
    StepRequest,
    replay,
)

__all__ = [
    "Divergence",
    "Fault",
    "FaultKind",
    "InjectedFault",
    "ReplayReport",
    "RunOutcome",
    "inject_fault",
    "replay",
    "run_to_idle",
]

FaultKind = Literal["exception", "timeout", "death", "kill"]


class InjectedFault(Exception):
    """A failure injected on purpose by :func:`inject_fault`."""


@dataclass(frozen=True, slots=True)
class Fault:
    """A failure to inject (see :func:`inject_fault`)."""

    executor: str
    """Executor to fail."""
    superstep: int
    """Superstep (lineage-wide count) in which to fail."""
    kind: FaultKind = "exception"
    """``exception`` (after the handlers ran), ``timeout``, ``death`` (actor stopped) or
    ``kill`` (the host process killed mid-step)."""


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
    plans = _PLANS.setdefault(session, {})
    plan = plans.get(executor)
    if plan is None:
        plan = plans[executor] = _FaultPlan()
    plan.add(Fault(executor, superstep, kind))
    # The same plan every time: the session wraps the host with it once, and once more
    # after a reset (which drops the wrappers with the hosts).
    session.wrap_host(executor, plan)


class _FaultPlan:
    """The faults still to fire on one executor of one session, by superstep; wraps the
    executor's host (each host that serves it) so that each fires on its first attempt."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending: dict[int, Fault] = {}

    def add(self, fault: Fault) -> None:
        self.pending[fault.superstep] = fault

    def due(self, method: str, payload: bytes) -> Fault | None:
        """The fault of this ``step`` call, taken off the plan; None for any other call."""
        if method != "step" or not self.pending:
            return None
        return self.pending.pop(StepRequest.superstep_of(payload), None)

    def __call__(self, host: HostRef, program: HostedFactory) -> HostRef:
        return _FaultyHost(host, program, self)


_PLANS: weakref.WeakKeyDictionary[Session, dict[str, _FaultPlan]] = weakref.WeakKeyDictionary()


class _FaultyHost(HostProxy):
    """A host whose ``step`` calls fail on purpose where its plan says."""

    __slots__ = ("_plan", "_program")

    def __init__(self, host: HostRef, program: HostedFactory, plan: _FaultPlan) -> None:
        super().__init__(host)
        self._program = program
        self._plan = plan

    def call(self, method: str, payload: bytes) -> HostFuture:
        fault = self._plan.due(method, payload)
        if fault is not None:
            return self._fail(fault, lambda: self._host.call(method, payload))
        return self._host.call(method, payload)

    def load_call(self, factory: HostedFactory, method: str, payload: bytes) -> HostFuture:
        fault = self._plan.due(method, payload)
        if fault is not None:
            return self._fail(fault, lambda: self._host.load_call(factory, method, payload))
        return self._host.load_call(factory, method, payload)

    def _fail(self, fault: Fault, step: Callable[[], HostFuture]) -> HostFuture:
        if fault.kind == "death":
            self._host.stop()  # the step then meets a stopped actor
            return step()
        if fault.kind == "kill":
            return self._kill(step)
        answer = step()
        if fault.kind == "timeout":
            if getattr(self._program, "timeout", None) is None:
                return answer  # no deadline to outlive: the step answers as it would
            # A hung handler: the answer never comes; the supervisor abandons the host
            # at its deadline and replaces it.
            return ReplyFuture()
        failed = ReplyFuture()
        error = InjectedFault(
            f"injected {fault.kind} in executor {fault.executor!r} at superstep {fault.superstep}"
        )

        def landed() -> None:
            try:
                answer.get(timeout=0)
            except BaseException as exc:  # noqa: BLE001 - the step's own failure is its answer
                failed.set_exception((type(exc), exc, exc.__traceback__))
            else:
                failed.set_exception((InjectedFault, error, None))

        answer.add_done_callback(landed)
        return failed

    def _kill(self, step: Callable[[], HostFuture]) -> HostFuture:
        """Run the step, then SIGKILL the process hosting it before its answer is read.

        All on the supervisor's thread (a Ray callback thread must not call Ray): the
        worker's pid is asked for while it is idle, and once the handlers ran, a call
        to the dead worker fails as a crashed worker's step does.
        """
        pid: int = self._host.pid()  # type: ignore[attr-defined]  # a process backend's host
        answer = step()
        try:
            answer.get(timeout=60)
        except Exception:  # noqa: BLE001 - the step failed on its own: that is its answer
            return answer
        os.kill(pid, signal.SIGKILL)
        return self._host.call("snapshot", b"")


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
