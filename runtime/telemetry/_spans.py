"""OpenTelemetry spans and metrics of runs, made only when someone set a provider.

The library depends on the OpenTelemetry *API* only (extra ``actorflow[otel]``) and
never configures it: spans go to the global tracer provider (or the one given to
:func:`set_providers`), metrics to the global meter provider. With neither set, or
without ``opentelemetry`` imported at all, :func:`open_run` returns :data:`SILENT`,
the no-op form of a run's telemetry: the supervisor's only cost is a few calls
that run what they are given.

Trace context crosses every boundary as bytes (:func:`pack_context`: trace id, span
id, flags; 25 bytes) inside the msgpack frames: the caller's context rides in the
``RunJob``, the superstep's in each ``step`` request (its ``trace``), each sent
message's in the ``step`` report (its ``send_contexts``), and the run's in its checkpoints'
metadata (:data:`TRACE_KEY`), so a host thread, another process or a resumed session
rebuilds it from bytes alone.

Span names (attributes under the ``actorflow.`` prefix):

- ``workflow.run``: one run, from the first superstep (or entry checkpoint) to idle,
  failure or cancel; child of the caller's current span; links to the run that wrote
  the checkpoint a resumed session started from.
- ``workflow.superstep``: one superstep, child of the run.
- ``executor.process <executor id>``: one executor handling its batch, on its host;
  child of the superstep; links to the ``message.send`` spans of the messages it
  received since it last ran.
- ``message.send``: one ``ctx.send`` (routing and encoding), child of the sender's
  ``executor.process``.
- ``checkpoint.write``: one checkpoint (kind, bytes, store), child of the run or superstep.
- ``executor.restart``, ``superstep.rollback``: recovery, child of the superstep.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from actorflow._version import __version__
from actorflow.runtime._wire import StepReport
from actorflow.storage import metadata_with

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, SpanContext, Tracer, TracerProvider

__all__ = [
    "PREFIX",
    "SILENT",
    "SPAN_CHECKPOINT",
    "SPAN_PROCESS",
    "SPAN_RESTART",
    "SPAN_ROLLBACK",
    "SPAN_RUN",
    "SPAN_SEND",
    "SPAN_SUPERSTEP",
    "TRACE_KEY",
    "Job",
    "RunTelemetry",
    "Telemetry",
    "Written",
    "capture_context",
    "open_run",
    "pack_context",
    "remote_context",
    "set_providers",
    "tracer",
]

SPAN_RUN = "workflow.run"
SPAN_SUPERSTEP = "workflow.superstep"
SPAN_PROCESS = "executor.process"
SPAN_SEND = "message.send"
SPAN_CHECKPOINT = "checkpoint.write"
SPAN_RESTART = "executor.restart"
SPAN_ROLLBACK = "superstep.rollback"
PREFIX = "actorflow."
TRACE_KEY = "actorflow.trace"
"""Checkpoint metadata key: the packed context of the run span that wrote the checkpoint."""

_MAX_LINKS = 64  # links per receiving span: a fan-in of thousands would bloat the span
_T = TypeVar("_T")

# [tracer provider, meter provider] given to set_providers (None: the global ones).
_given: list[Any] = [None, None]
# (provider, tracer) / (provider, instruments): made once per provider.
_tracers: dict[int, tuple[Any, Tracer]] = {}
_made_instruments: dict[int, tuple[Any, _Instruments]] = {}
_making = threading.Lock()  # two sessions' first runs may ask at once: make each once


def _unlock_after_fork() -> None:
    # A parent thread making a tracer at the fork would hold the lock in the child.
    global _making  # noqa: PLW0603 - the tracers are the process's
    _making = threading.Lock()


os.register_at_fork(after_in_child=_unlock_after_fork)


def set_providers(
    tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
) -> None:
    """Send actorflow's spans and metrics to these providers instead of the global ones.

    Nothing global changes: other libraries keep using the global providers. Call with
    no arguments to go back to the global ones. Takes effect from the next run.
    """
    _given[0], _given[1] = tracer_provider, meter_provider


def tracer() -> Tracer | None:
    """actorflow's tracer, or None when no tracer provider is set (tracing is off)."""
    provider = _given[0]
    if provider is None:
        api = sys.modules.get("opentelemetry.trace")
        if api is None:  # nobody imported OpenTelemetry: nobody can have set a provider
            return None
        provider = api.get_tracer_provider()
        if isinstance(provider, (api.ProxyTracerProvider, api.NoOpTracerProvider)):
            return None
    made = _tracers.get(id(provider))
    if made is None or made[0] is not provider:
        with _making:
            made = _tracers.get(id(provider))
            if made is None or made[0] is not provider:
                made = (provider, provider.get_tracer("actorflow", __version__))
                _tracers[id(provider)] = made
    return made[1]


class _Instruments:
    """The run metrics, made once per meter provider."""

    def __init__(self, provider: MeterProvider) -> None:

        meter = provider.get_meter("actorflow", __version__)
        self.supersteps = meter.create_counter(
            PREFIX + "supersteps", unit="{superstep}", description="Supersteps completed"
        )
        self.checkpoint_bytes = meter.create_histogram(
            PREFIX + "checkpoint.bytes", unit="By", description="Bytes written per checkpoint"
        )
        self.checkpoint_duration = meter.create_histogram(
            PREFIX + "checkpoint.duration", unit="s", description="Time to write a checkpoint"
        )
        self.restarts = meter.create_counter(
            PREFIX + "restarts", unit="{restart}", description="Executor restarts"
        )
        self.pending = meter.create_gauge(
            PREFIX + "requests.pending",
            unit="{request}",
            description="Requests waiting for an answer when a run went idle",
        )
        self.run_duration = meter.create_histogram(
            PREFIX + "run.duration", unit="s", description="Wall time of a run"
        )


def _instruments() -> _Instruments | None:
    provider = _given[1]
    if provider is None:
        api = sys.modules.get("opentelemetry.metrics")
        if api is None:
            return None
        provider = api.get_meter_provider()
        if isinstance(provider, api.NoOpMeterProvider) or type(provider).__name__ == (
            "_ProxyMeterProvider"  # the API's default until an application sets one
        ):
            return None
    made = _made_instruments.get(id(provider))
    if made is None or made[0] is not provider:
        with _making:
            made = _made_instruments.get(id(provider))
            if made is None or made[0] is not provider:
                made = (provider, _Instruments(provider))
                _made_instruments[id(provider)] = made
    return made[1]


# --- context as bytes -----------------------------------------------------------------


def pack_context(context: SpanContext) -> bytes:
    """A span context as 25 bytes: trace id (16), span id (8), trace flags (1)."""
    return (
        context.trace_id.to_bytes(16, "big")
        + context.span_id.to_bytes(8, "big")
        + bytes([int(context.trace_flags) & 0xFF])
    )


def _unpack_context(data: bytes) -> SpanContext | None:
    from opentelemetry.trace import SpanContext, TraceFlags  # noqa: PLC0415 - tracing is on

    if not isinstance(data, bytes) or len(data) != 25:
        return None
    context = SpanContext(
        trace_id=int.from_bytes(data[:16], "big"),
        span_id=int.from_bytes(data[16:24], "big"),
        is_remote=True,
        trace_flags=TraceFlags(data[24]),
    )
    return context if context.is_valid else None


def remote_context(data: bytes | None) -> Any:
    """An OpenTelemetry ``Context`` whose current span is the packed one (or an empty one)."""
    from opentelemetry import context as otel_context  # noqa: PLC0415 - tracing is on
    from opentelemetry import trace  # noqa: PLC0415 - tracing is on

    span_context = _unpack_context(data) if data is not None else None
    if span_context is None:
        return otel_context.Context()
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def links(contexts: list[bytes]) -> list[Any]:
    """Links to the packed span contexts (invalid ones skipped)."""
    from opentelemetry.trace import Link  # noqa: PLC0415 - tracing is on

    found = (_unpack_context(c) for c in contexts[:_MAX_LINKS])
    return [Link(c) for c in found if c is not None]


def capture_context() -> bytes | None:
    """The calling thread's current span, packed; None when there is none (caller's thread)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    context = api.get_current_span().get_span_context()
    return pack_context(context) if context.is_valid else None


def fail_span(span: Span, exc: BaseException) -> None:
    """Mark ``span`` failed with ``exc``."""
    from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415 - tracing is on

    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


# --- the supervisor's side ------------------------------------------------------------


class Job(Protocol):
    """What telemetry reads of a run (a ``RunJob``): its id, the caller's span, and the
    metadata its checkpoints carry (where the run's span context is added)."""

    @property
    def run_id(self) -> str: ...

    @property
    def trace(self) -> bytes | None: ...

    metadata: bytes


class Written(Protocol):
    """What telemetry reads of a checkpointer: the store, what the last write wrote,
    and the span context of the run that wrote the checkpoint a session resumed from."""

    @property
    def store(self) -> object: ...

    @property
    def last_bytes(self) -> int: ...

    @property
    def last_id(self) -> str | None: ...

    resumed_trace: bytes | None


class Telemetry(Protocol):
    """A run's spans and metrics, as the supervisor drives them (supervisor thread only).

    :data:`SILENT` is the form that records nothing; :class:`RunTelemetry` the one
    that records to OpenTelemetry. Each wrapping method runs ``act`` inside its span.
    """

    def superstep(self, superstep: int, act: Callable[[], None]) -> None:
        """Run superstep ``superstep`` (``act()``) inside its span."""

    def checkpoint(self, kind: str, superstep: int, act: Callable[[], None]) -> None:
        """Write the ``kind`` cut after ``superstep`` (``act()``) inside its span."""

    def recovery(
        self, name: str, superstep: int, executor: str | None, act: Callable[[], _T]
    ) -> _T:
        """Run a restart (``executor`` given) or a rollback inside its span."""

    def step_frame(self, target: str) -> list[Any] | None:
        """The trace part of ``target``'s ``step`` request (None: untraced)."""

    def take_sends(self, report: StepReport) -> None:
        """Note the send contexts of a ``step`` report."""

    def end(self, status: str, pending: int, error: BaseException | None) -> None:
        """End the run (always called, whatever ended it)."""


class _Silent:
    """The telemetry of a run nobody listens to: every act runs, nothing is recorded."""

    __slots__ = ()

    def superstep(self, superstep: int, act: Callable[[], None]) -> None:
        act()

    def checkpoint(self, kind: str, superstep: int, act: Callable[[], None]) -> None:
        act()

    def recovery(
        self, name: str, superstep: int, executor: str | None, act: Callable[[], _T]
    ) -> _T:
        return act()

    def step_frame(self, target: str) -> list[Any] | None:
        return None

    def take_sends(self, report: StepReport) -> None:
        pass

    def end(self, status: str, pending: int, error: BaseException | None) -> None:
        pass


SILENT: Telemetry = _Silent()
"""The telemetry of a run when no tracer or meter provider is set."""


def open_run(
    job: Job,
    *,
    workflow: str,
    session: str,
    superstep: int,
    checkpointer: Written | None,
) -> Telemetry:
    """Start a run's telemetry (supervisor thread); :data:`SILENT` when nobody listens."""
    made_tracer = tracer()
    made_instruments = _instruments()
    if made_tracer is None and made_instruments is None:
        return SILENT
    if made_tracer is None:
        from opentelemetry.trace import NoOpTracer  # noqa: PLC0415 - metrics are on

        made_tracer = NoOpTracer()
    return RunTelemetry(
        made_tracer,
        made_instruments,
        job,
        workflow=workflow,
        session=session,
        superstep=superstep,
        checkpointer=checkpointer,
    )


class RunTelemetry:
    """One run's spans and metrics. Supervisor thread only."""

    def __init__(
        self,
        tracer: Tracer,
        instruments: _Instruments | None,
        job: Job,
        *,
        workflow: str,
        session: str,
        superstep: int,
        checkpointer: Written | None,
    ) -> None:
        self._tracer = tracer
        self._checkpointer = checkpointer
        self._metrics = instruments
        self._job = job
        self._workflow = workflow
        self._session = session
        self._started = time.monotonic()
        self._metric_attrs = {PREFIX + "workflow": workflow}
        self.attrs: dict[str, Any] = {
            PREFIX + "workflow": workflow,
            PREFIX + "session": session,
            PREFIX + "run": job.run_id,
        }
        resumed: list[bytes] = []
        if checkpointer is not None and checkpointer.resumed_trace is not None:
            # The first run of a resumed session continues the run that wrote its checkpoint.
            resumed.append(checkpointer.resumed_trace)
            checkpointer.resumed_trace = None
        self.run_span = tracer.start_span(
            SPAN_RUN,
            context=remote_context(job.trace),
            links=links(resumed),
            attributes={**self.attrs, PREFIX + "superstep": superstep},
        )
        self.run_context = pack_context(self.run_span.get_span_context())
        self._run_ctx = remote_context(self.run_context)
        if self.run_span.get_span_context().is_valid:
            # Checkpoints of this run name it, so a resume elsewhere can link to it.
            job.metadata = metadata_with(job.metadata, TRACE_KEY, self.run_context)
        self._step_span: Span | None = None
        self._step_ctx: Any = None
        self._step_packed: bytes | None = None
        self._links: dict[str, list[bytes]] = {}
        """Target -> contexts of the sends it received and has not handled yet."""
        self._new_links: dict[str, list[bytes]] = {}
        """The same, for sends of the superstep under way (theirs from the next one on)."""
        self._given: dict[str, list[bytes]] = {}
        """Links handed to this superstep's targets: again to a restarted one, and back
        to ``_links`` if the superstep is rolled back."""

    # --- spans --------------------------------------------------------------------

    def superstep(self, superstep: int, act: Callable[[], None]) -> None:
        """Run superstep ``superstep`` (``act()``) inside its span."""
        span = self._tracer.start_span(
            SPAN_SUPERSTEP,
            context=self._run_ctx,
            attributes={**self.attrs, PREFIX + "superstep": superstep},
        )
        self._step_span = span
        self._step_packed = pack_context(span.get_span_context())
        self._step_ctx = remote_context(self._step_packed)
        self._new_links, self._given = {}, {}
        try:
            act()
            for target, contexts in self._new_links.items():
                self._links.setdefault(target, []).extend(contexts)
            if self._metrics is not None:
                self._metrics.supersteps.add(1, self._metric_attrs)
        except BaseException as exc:
            for target, contexts in self._given.items():  # rolled back: still to handle
                self._links[target] = contexts + self._links.get(target, [])
            fail_span(span, exc)
            raise
        finally:
            span.end()
            self._step_span = self._step_ctx = self._step_packed = None

    def step_frame(self, target: str) -> list[Any] | None:
        """The trace part of ``target``'s ``step`` request: parent, links, ids."""
        given = self._given.get(target)
        if given is None:
            given = self._given[target] = self._links.pop(target, [])
        return [
            self._step_packed,
            given,
            self._job.run_id,
            self._session,
            self._workflow,
        ]

    def take_sends(self, report: StepReport) -> None:
        """Note the send contexts of a ``step`` report (a host without a provider has none)."""
        if report.send_contexts is not None:
            for send, context in zip(report.sends, report.send_contexts, strict=False):
                self._new_links.setdefault(send[0], []).append(context)

    def _child(self, name: str, attributes: Mapping[str, Any]) -> Span:
        parent = self._step_ctx if self._step_ctx is not None else self._run_ctx
        return self._tracer.start_span(name, context=parent, attributes=attributes)

    def checkpoint(self, kind: str, superstep: int, act: Callable[[], None]) -> None:
        """Write the ``kind`` cut after ``superstep`` (``act()``), in its span.

        A ``MemoryStore``'s step cut is written while the next superstep starts, so its
        span is a child of that superstep; ``actorflow.superstep`` names the cut's.
        """
        checkpointer = self._checkpointer
        assert checkpointer is not None, "only a run with a store checkpoints"
        span = self._child(
            SPAN_CHECKPOINT,
            {
                **self.attrs,
                PREFIX + "superstep": superstep,
                PREFIX + "checkpoint.kind": kind,
                PREFIX + "checkpoint.store": type(checkpointer.store).__name__,
            },
        )
        started = time.monotonic()
        try:
            act()
            written = checkpointer.last_bytes
            span.set_attribute(PREFIX + "checkpoint.bytes", written)
            if checkpointer.last_id is not None:
                span.set_attribute(PREFIX + "checkpoint.id", checkpointer.last_id)
            if self._metrics is not None:
                attrs = {**self._metric_attrs, PREFIX + "checkpoint.kind": kind}
                self._metrics.checkpoint_bytes.record(written, attrs)
                self._metrics.checkpoint_duration.record(time.monotonic() - started, attrs)
        except BaseException as exc:
            fail_span(span, exc)
            raise
        finally:
            span.end()

    def recovery(
        self, name: str, superstep: int, executor: str | None, act: Callable[[], _T]
    ) -> _T:
        """Run a restart (``executor`` given) or a rollback inside its span."""
        attrs = {**self.attrs, PREFIX + "superstep": superstep}
        if executor is not None:
            attrs[PREFIX + "executor"] = executor
        span = self._child(name, attrs)
        try:
            result = act()
            if executor is not None and self._metrics is not None:
                self._metrics.restarts.add(1, {**self._metric_attrs, PREFIX + "executor": executor})
            return result
        except BaseException as exc:
            fail_span(span, exc)
            raise
        finally:
            span.end()

    # --- the end ------------------------------------------------------------------

    def end(self, status: str, pending: int, error: BaseException | None) -> None:
        """End the run span (always called, whatever ended the run)."""
        span = self.run_span
        try:
            span.set_attribute(PREFIX + "run.status", status)
            if error is not None:
                fail_span(span, error)
            if self._metrics is not None:
                attrs = {**self._metric_attrs, PREFIX + "run.status": status}
                self._metrics.run_duration.record(time.monotonic() - self._started, attrs)
                self._metrics.pending.set(pending, self._metric_attrs)
        finally:
            span.end()
