"""A traced run drawn as a waterfall page (for the README's picture of a trace).

The spans come from the OpenTelemetry SDK's in-memory exporter; the page is plain
HTML with an inline SVG, rendered by the browser test and saved as ``docs/trace.png``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import actorflow as af
from actorflow import otel
from actorflow.testing import inject_fault

COLORS = {
    "workflow.run": "#1d2330",
    "workflow.superstep": "#7c8db5",
    "executor.process": "#3b82f6",
    "message.send": "#16a34a",
    "checkpoint.write": "#d97706",
    "executor.restart": "#dc2626",
    "superstep.rollback": "#dc2626",
}


class Split(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n)


class Work(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n * 2)


class Join(af.Executor):
    @af.handler
    def on_values(self, values: list[int], ctx: af.Context[Any]) -> None:
        ctx.output(sum(values))


def traced_run() -> tuple[ReadableSpan, ...]:
    """A fan-out, fan-in run with a checkpoint store and one restart, traced."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.set_providers(provider)
    try:
        workflow = (
            af.WorkflowBuilder("fan", start=Split("split"), restart=af.RestartPolicy())
            .add_fan_out("split", [Work("left"), Work("right")])
            .add_fan_in(["left", "right"], Join("join"))
            .build()
        )
        caller = provider.get_tracer("app")
        with workflow, workflow.session("s", store=af.MemoryStore()) as session:
            inject_fault(session, "right", 2)
            # The application's span covers the run only (not building the session),
            # so the picture's time scale is the run's.
            with caller.start_as_current_span("handle request"):
                assert session.run(5).outputs == [20]
    finally:
        otel.set_providers()
    return exporter.get_finished_spans()


def _order(spans: Sequence[ReadableSpan]) -> list[tuple[int, ReadableSpan]]:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)
    rows: list[tuple[int, ReadableSpan]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            rows.append((depth, span))
            assert span.context is not None
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return rows


def waterfall(spans: Sequence[ReadableSpan]) -> str:
    """The spans as an HTML page: one bar per span, in tree order; dashed lines are
    links from a ``message.send`` to the ``executor.process`` that received it."""
    rows = _order(spans)
    t0 = min(s.start_time or 0 for s in spans)
    t1 = max(s.end_time or 0 for s in spans)
    label_w, bar_w, row_h = 330, 640, 22
    scale = bar_w / max(t1 - t0, 1)
    y_of: dict[int, float] = {}
    x_of: dict[int, float] = {}
    parts: list[str] = []
    for i, (depth, span) in enumerate(rows):
        assert span.context is not None
        y = 30 + i * row_h
        y_of[span.context.span_id] = y
        x = x_of[span.context.span_id] = label_w + ((span.start_time or t0) - t0) * scale
        w = max(((span.end_time or t0) - (span.start_time or t0)) * scale, 2)
        color = COLORS.get(span.name.split(" ")[0], "#6b7385")
        name = html.escape(span.name)
        parts.append(
            f'<text x="{8 + depth * 14}" y="{y + 11}" class="n">{name}</text>'
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="14" rx="3" fill="{color}"/>'
        )
    for span in spans:
        assert span.context is not None
        for link in span.links:
            source = y_of.get(link.context.span_id)
            target = y_of.get(span.context.span_id)
            if source is not None and target is not None:
                x1, x2 = x_of[link.context.span_id], x_of[span.context.span_id]
                parts.append(
                    f'<path d="M{x1:.1f},{source + 14} L{x2:.1f},{target}" class="l"/>'
                    f'<circle cx="{x2:.1f}" cy="{target}" r="2.5" class="d"/>'
                )
    height = 40 + len(rows) * row_h
    width = label_w + bar_w + 20
    return (
        "<!doctype html><html><head><title>A traced run</title><style>"
        "body{margin:0;font:13px system-ui,sans-serif;background:#fff;color:#1d2330}"
        "h1{font-size:16px;margin:14px 16px 0}.n{font:12px ui-monospace,monospace;fill:#1d2330}"
        ".l{stroke:#16a34a;stroke-width:1.4;stroke-dasharray:4 3;fill:none}.d{fill:#16a34a}"
        "</style></head><body><h1>A traced run: spans by time (dashed: message links)</h1>"
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        + "".join(parts)
        + "</svg></body></html>"
    )
