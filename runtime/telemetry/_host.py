"""The host's side of tracing: an executor's batch and its sends, as spans.

Loaded by the runner only when a ``step`` request carries a trace part (see
:mod:`._spans`), so an untraced run never imports it. Host actor thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace

from actorflow.runtime._buffer import StepBuffer
from actorflow.runtime._wire import StepReport, StepRequest
from actorflow.runtime.graph import OutEdge

from ._spans import (
    PREFIX,
    SPAN_PROCESS,
    SPAN_SEND,
    fail_span,
    links,
    pack_context,
    remote_context,
    tracer,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["traced_step"]


class TracedStepBuffer(StepBuffer):
    """A step buffer that makes a ``message.send`` span per send and keeps its context."""

    __slots__ = ("_attrs", "_tracer", "contexts")

    def __init__(
        self,
        executor_id: str,
        edges: tuple[OutEdge, ...],
        superstep: int,
        suffix: str,
        *,
        made_tracer: Tracer,
        attrs: dict[str, Any],
        strict: bool = False,
    ) -> None:
        super().__init__(executor_id, edges, superstep, suffix, strict=strict)
        self._tracer = made_tracer
        self._attrs = attrs
        self.contexts: list[bytes] = []
        """The context of the ``message.send`` span of each send, in send order."""

    def send(self, value: object, to: str | None) -> None:
        span = self._tracer.start_span(SPAN_SEND, attributes=self._attrs)
        try:
            before = len(self.sends)
            super().send(value, to)
            made = self.sends[before:]
            if made:
                span.set_attribute(PREFIX + "message.targets", [s[0] for s in made])
                span.set_attribute(PREFIX + "message.bytes", len(made[0][2]))
            self.contexts.extend([pack_context(span.get_span_context())] * len(made))
        except BaseException as exc:
            fail_span(span, exc)
            raise
        finally:
            span.end()


class _Program(Protocol):
    @property
    def executor_id(self) -> str: ...

    @property
    def edges(self) -> tuple[OutEdge, ...]: ...

    @property
    def strict_routing(self) -> bool: ...


class Runner(Protocol):
    """What a traced step needs of the runner (``_runner.ExecutorRunner``)."""

    @property
    def program(self) -> _Program: ...

    def handle(self, buffer: StepBuffer, step: StepRequest) -> StepReport:
        """Run the request's batch into ``buffer``."""


def traced_step(runner: Runner, request: StepRequest) -> bytes:
    """Handle a traced ``step`` request: the batch runs inside ``executor.process``.

    The span is current while the handlers run (sync and async), so spans a handler
    makes, and runs of a sub-workflow, are its children. The report's ``send_contexts``
    holds the ``message.send`` context of each send.
    """
    superstep, deliveries, suffix = request.superstep, request.deliveries, request.suffix
    assert request.trace is not None
    parent, received, run, session, workflow = request.trace
    program = runner.program
    made_tracer = tracer()
    if made_tracer is None:  # no provider on this side (another process): run untraced
        buffer = StepBuffer(
            program.executor_id, program.edges, superstep, suffix, strict=program.strict_routing
        )
        return runner.handle(buffer, request).packed()
    attrs = {
        PREFIX + "workflow": workflow,
        PREFIX + "session": session,
        PREFIX + "run": run,
        PREFIX + "superstep": superstep,
        PREFIX + "executor": program.executor_id,
    }
    span = made_tracer.start_span(
        f"{SPAN_PROCESS} {program.executor_id}",
        context=remote_context(parent),
        links=links(received),
        attributes={**attrs, PREFIX + "messages": len(deliveries)},
    )
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        buffer = TracedStepBuffer(
            program.executor_id,
            program.edges,
            superstep,
            suffix,
            made_tracer=made_tracer,
            attrs=attrs,
            strict=program.strict_routing,
        )
        report = runner.handle(buffer, request)
        return report._replace(send_contexts=buffer.contexts).packed()
    except BaseException as exc:
        fail_span(span, exc)
        raise
    finally:
        otel_context.detach(token)
        span.end()
