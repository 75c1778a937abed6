"""Traced: a run's spans, exported to the console with the OpenTelemetry SDK.

actorflow depends on the OpenTelemetry API only (``pip install 'actorflow[otel]'``);
the application picks the SDK and the exporter, as here. Spans nest under the
application's own span, also when the caller streams; each message sent is linked
to the span of the executor that received it.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import actorflow as af
from actorflow.testing import inject_fault


@af.message
@dataclass
class Order:
    id: int
    items: list[str]


class Validate(af.Executor):
    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Order]) -> None:
        ctx.send(order)


class Ship(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.shipped: list[int] = []

    @af.handler
    def on_order(self, order: Order, ctx: af.Context) -> None:
        self.shipped.append(order.id)
        ctx.output(f"shipped {order.id}")


def one_line(span: ReadableSpan) -> str:
    """The console exporter's format: one line per span (the SDK default is JSON)."""
    attrs = span.attributes or {}
    ids = " ".join(
        key.removeprefix("actorflow.") + "=" + str(value)
        for key, value in attrs.items()
        if key in ("actorflow.superstep", "actorflow.checkpoint.kind", "actorflow.run.status")
    )
    assert span.context is not None
    return f"span {span.name:<28} id={span.context.span_id:016x} {ids}\n"


def tree(spans: tuple[ReadableSpan, ...]) -> list[str]:
    """The finished spans as an indented tree (links shown with ~>)."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            assert span.context is not None
            linked = f"  ~> {len(span.links)} send(s)" if span.links else ""
            lines.append(f"{'  ' * depth}{span.name}{linked}")
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return lines


def main() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)  # the application's choice, never the library's
    app = trace.get_tracer("shop")

    workflow = (
        af.WorkflowBuilder("orders", start=Validate("validate"), restart=af.RestartPolicy())
        .add_edge("validate", Ship("ship"))
        .build()
    )
    with (
        workflow,
        app.start_as_current_span("handle request"),
        workflow.session("customer-42", store=af.MemoryStore()) as session,
    ):
        inject_fault(session, "ship", 2)  # ship fails once and is restarted
        for event in session.stream(Order(1, ["tea"])):
            if isinstance(event, af.OutputEvent):
                print("output:", event.value)

    spans = memory.get_finished_spans()
    print("\n".join(tree(spans)))
    names = {span.name for span in spans}
    assert {"workflow.run", "executor.process ship", "message.send", "executor.restart"} <= names
    (run,) = [s for s in spans if s.name == "workflow.run"]
    (request,) = [s for s in spans if s.name == "handle request"]
    assert run.parent is not None and request.context is not None
    assert run.parent.span_id == request.context.span_id  # under the caller's span
    provider.shutdown()


if __name__ == "__main__":
    main()
