"""Telemetry: the OpenTelemetry spans and metrics of runs, on both sides of a step.

A new span goes here. ``_spans`` holds the span names, the providers, the trace
context as bytes and the supervisor's side of a run (:class:`Telemetry`, with
:data:`SILENT`, its no-op form, and :class:`RunTelemetry`, the one that records);
``_host`` the host's side of a traced step (``executor.process`` and
``message.send``). Only the host side imports ``opentelemetry`` at import time:
:func:`traced_step` loads it with the first traced step, so an untraced run never
imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actorflow.runtime._wire import StepRequest

from ._spans import (
    PREFIX,
    SILENT,
    SPAN_CHECKPOINT,
    SPAN_PROCESS,
    SPAN_RESTART,
    SPAN_ROLLBACK,
    SPAN_RUN,
    SPAN_SEND,
    SPAN_SUPERSTEP,
    TRACE_KEY,
    Job,
    RunTelemetry,
    Telemetry,
    Written,
    capture_context,
    open_run,
    set_providers,
    tracer,
)

if TYPE_CHECKING:
    from ._host import Runner

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
    "set_providers",
    "traced_step",
    "tracer",
]


def traced_step(runner: Runner, request: StepRequest) -> bytes:
    """Handle a traced ``step`` request on the host (see ``_host.traced_step``)."""
    from ._host import traced_step as run  # noqa: PLC0415 - the extra, loaded when tracing

    return run(runner, request)
