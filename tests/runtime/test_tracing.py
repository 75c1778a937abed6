"""OpenTelemetry spans and metrics: names, parents, links, ends, across every boundary."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import actorflow as af
from actorflow import otel
from actorflow.testing import inject_fault
from tests.support import Closeable, child_env

CURRENT_IN_HANDLER: list[int] = []


class Ends(SpanProcessor):
    """Counts spans started and ended: every started span must end."""

    def __init__(self) -> None:
        self.started: dict[int, str] = {}
        self.ended: set[int] = set()
        self.lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        with self.lock:
            self.started[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        with self.lock:
            self.ended.add(span.context.span_id)

    def open_spans(self) -> list[str]:
        with self.lock:
            return [name for sid, name in self.started.items() if sid not in self.ended]


@dataclass
class Telemetry:
    provider: TracerProvider
    exporter: InMemorySpanExporter
    ends: Ends
    metrics: InMemoryMetricReader

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = self.exporter.get_finished_spans()
        return [s for s in found if name is None or s.name == name or s.name.startswith(name + " ")]

    def metric(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == name
            for point in m.data.data_points
        ]


@pytest.fixture
def tel() -> Iterator[Telemetry]:
    """actorflow's spans and metrics go to in-memory SDK providers for this test only."""
    exporter = InMemorySpanExporter()
    ends = Ends()
    provider = TracerProvider()
    provider.add_span_processor(ends)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    otel.set_providers(provider, MeterProvider(metric_readers=[reader]))
    yield Telemetry(provider, exporter, ends, reader)
    otel.set_providers()
    assert not ends.open_spans(), f"spans never ended: {ends.open_spans()}"


class Ping(af.Executor):
    """Sends n on until n reaches ``stop``; then outputs it."""

    def __init__(self, id: str, stop: int = 3) -> None:
        super().__init__(id)
        self.stop = stop

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        if n >= self.stop:
            ctx.output(n)
        else:
            ctx.send(n)


class Pong(af.Executor):
    @af.handler
    async def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        await asyncio.sleep(0)
        # A handler's own spans nest under its executor.process span (async too).
        CURRENT_IN_HANDLER.append(trace.get_current_span().get_span_context().span_id)
        ctx.send(n + 1)


class Boom(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        raise ValueError(f"boom at {n}")


class Ask(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.request(f"approve {n}?", bool)

    @af.response_handler
    def on_answer(self, question: str, answer: bool, ctx: af.Context[Any]) -> None:
        ctx.output(answer)


class Collect(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.output(["outer", n])


def ping_pong(stop: int = 3) -> af.Workflow:
    return (
        af.WorkflowBuilder("pingpong", start=Ping("ping", stop))
        .add_edge("ping", Pong("pong"))
        .add_edge("pong", "ping")
        .build()
    )


def by_id(spans: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans if s.context is not None}


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_run_superstep_process_send_checkpoint_spans_nest_and_link(tel: Telemetry) -> None:
    """A traced run: run under the caller, supersteps under the run, executors under their
    superstep, sends under their sender and linked from the receiver, checkpoints with
    kind, bytes and store; attributes carry the ids."""
    caller = tel.provider.get_tracer("app")
    with (
        ping_pong() as wf,
        caller.start_as_current_span("request") as request,
        wf.session("s-1", store=af.MemoryStore()) as s,
    ):
        result = s.run(0)
    assert result.outputs == [3]
    spans = by_id(tel.spans())
    (run,) = tel.spans(otel.SPAN_RUN)
    assert parent_of(run) == request.get_span_context().span_id
    assert run.attributes is not None
    assert run.attributes["actorflow.workflow"] == "pingpong"
    assert run.attributes["actorflow.session"] == "s-1"
    assert run.attributes["actorflow.run"] == result.run_id
    assert run.attributes["actorflow.run.status"] == "completed"
    steps = tel.spans(otel.SPAN_SUPERSTEP)
    assert len(steps) == result.supersteps == 7
    assert all(parent_of(s) == run.context.span_id for s in steps)
    processes = tel.spans(otel.SPAN_PROCESS)
    assert {p.name for p in processes} == {"executor.process ping", "executor.process pong"}
    for process in processes:
        parent = spans[parent_of(process) or 0]
        assert parent.name == otel.SPAN_SUPERSTEP
        assert process.attributes is not None and parent.attributes is not None
        assert process.attributes["actorflow.superstep"] == parent.attributes["actorflow.superstep"]
        assert process.attributes["actorflow.run"] == result.run_id
    sends = tel.spans(otel.SPAN_SEND)
    assert len(sends) == 6
    for send in sends:
        sender = spans[parent_of(send) or 0]
        assert sender.name.startswith(otel.SPAN_PROCESS)
        # Linked, not nested: exactly one process span links to it, a later one.
        receivers = [
            p
            for p in processes
            if any(link.context.span_id == send.context.span_id for link in p.links)
        ]
        assert len(receivers) == 1
        assert receivers[0].attributes is not None and send.attributes is not None
        received = receivers[0].attributes["actorflow.superstep"]
        sent = send.attributes["actorflow.superstep"]
        assert isinstance(received, int) and isinstance(sent, int)
        assert received == sent + 1
    pongs = [p.context.span_id for p in processes if p.name == "executor.process pong"]
    assert CURRENT_IN_HANDLER[-3:] == pongs
    checkpoints = tel.spans(otel.SPAN_CHECKPOINT)
    kinds = [c.attributes["actorflow.checkpoint.kind"] for c in checkpoints if c.attributes]
    assert kinds[0] == "entry" and kinds[-1] == "final" and "step" in kinds
    for c in checkpoints:
        assert c.attributes is not None
        assert c.attributes["actorflow.checkpoint.store"] == "MemoryStore"
        size = c.attributes["actorflow.checkpoint.bytes"]
        assert isinstance(size, int) and size > 0
        assert c.context is not None and c.context.trace_id == run.context.trace_id


def test_metrics_count_supersteps_checkpoints_restarts_pending_and_duration(
    tel: Telemetry,
) -> None:
    """Metrics go through the same API: supersteps, checkpoint bytes and latency,
    restarts, pending requests, run duration."""
    with (
        af.WorkflowBuilder("ask", start=Ping("ping", 2))
        .add_edge("ping", Pong("pong"))
        .add_edge("pong", "ping")
        .build() as wf,
        wf.session(store=af.MemoryStore(), restart=af.RestartPolicy(max_restarts=3)) as s,
    ):
        inject_fault(s, "pong", 2)
        supersteps_run = s.run(0).supersteps
    with af.WorkflowBuilder("asking", start=Ask("ask")).build() as wf2, wf2.session() as s2:
        assert s2.run(1).status is af.RunStatus.IDLE_WITH_PENDING_REQUESTS
    (supersteps,) = [
        p for p in tel.metric("actorflow.supersteps") if p.attributes["actorflow.workflow"] == "ask"
    ]
    assert supersteps.value == supersteps_run == 5
    assert sum(p.count for p in tel.metric("actorflow.checkpoint.bytes")) >= 4
    assert all(p.sum > 0 for p in tel.metric("actorflow.checkpoint.bytes"))
    assert sum(p.count for p in tel.metric("actorflow.checkpoint.duration")) >= 4
    (restarts,) = tel.metric("actorflow.restarts")
    assert restarts.value == 1 and restarts.attributes["actorflow.executor"] == "pong"
    pending = {
        p.attributes["actorflow.workflow"]: p.value
        for p in tel.metric("actorflow.requests.pending")
    }
    assert pending == {"ask": 0, "asking": 1}
    assert sum(p.count for p in tel.metric("actorflow.run.duration")) == 2
    (restart,) = tel.spans(otel.SPAN_RESTART)
    assert restart.attributes is not None and restart.attributes["actorflow.executor"] == "pong"
    assert restart.attributes["actorflow.superstep"] == 2
    # Both attempts of the restarted executor link to the message they handled.
    attempts = [
        p
        for p in tel.spans("executor.process pong")
        if p.attributes and p.attributes["actorflow.superstep"] == 2
    ]
    assert len(attempts) == 2
    assert attempts[0].links[0].context == attempts[1].links[0].context


def test_a_failed_run_ends_every_span_with_an_error(tel: Telemetry) -> None:
    """A run that fails (no restart policy) ends run, superstep and process spans, all
    marked as errors; the rollback has its span too."""
    with (
        af.WorkflowBuilder("boom", start=Ping("ping", 5))
        .add_edge("ping", Boom("boom"))
        .build() as wf,
        wf.session(store=af.MemoryStore()) as s,
        pytest.raises(af.ExecutorFailed),
    ):
        s.run(0)
    (run,) = tel.spans(otel.SPAN_RUN)
    assert run.status.status_code is trace.StatusCode.ERROR
    assert run.attributes is not None and run.attributes["actorflow.run.status"] == "failed"
    (boom,) = tel.spans("executor.process boom")
    assert boom.status.status_code is trace.StatusCode.ERROR
    assert any(e.name == "exception" for e in boom.events)
    assert tel.spans(otel.SPAN_ROLLBACK)
    assert tel.spans(otel.SPAN_SUPERSTEP)[-1].status.status_code is trace.StatusCode.ERROR
    assert not tel.ends.open_spans()


def test_an_abandoned_stream_ends_every_span_and_parents_stay_right(tel: Telemetry) -> None:
    """Breaking out of a stream cancels the run: its spans end (status cancelled), and
    they hang under the span current when the stream was asked for, not under whatever
    the caller does while iterating."""
    caller = tel.provider.get_tracer("app")
    with ping_pong(stop=1000) as wf, wf.session() as s:
        with caller.start_as_current_span("streaming") as streaming:
            events = s.stream(0)
        assert isinstance(events, Closeable)
        with caller.start_as_current_span("consumer"):
            for event in events:
                if isinstance(event, af.SuperstepCompletedEvent) and event.superstep >= 3:
                    break
        events.close()
    (first,) = tel.spans(otel.SPAN_RUN)
    assert first.attributes is not None and first.attributes["actorflow.run.status"] == "cancelled"
    assert parent_of(first) == streaming.get_span_context().span_id
    assert not tel.ends.open_spans()


def test_async_stream_parents_under_the_awaiting_task(tel: Telemetry) -> None:
    """astream: the run's parent is the span current in the task that iterates."""
    caller = tel.provider.get_tracer("app")

    async def main() -> int:
        with caller.start_as_current_span("task") as task:
            with ping_pong() as wf, wf.session() as s:
                async for _ in s.astream(0):
                    pass
            return task.get_span_context().span_id

    task_id = asyncio.run(main())
    (run,) = tel.spans(otel.SPAN_RUN)
    assert parent_of(run) == task_id


def test_an_abandoned_async_stream_ends_its_spans(tel: Telemetry) -> None:
    """Leaving an astream early cancels the run; its spans end (status cancelled)."""

    async def main() -> None:
        with ping_pong(stop=1000) as wf, wf.session() as s:
            stream = s.astream(0)
            async for event in stream:
                if isinstance(event, af.SuperstepCompletedEvent) and event.superstep >= 2:
                    break
            await stream.aclose()

    asyncio.run(main())
    (run,) = tel.spans(otel.SPAN_RUN)
    assert run.attributes is not None and run.attributes["actorflow.run.status"] == "cancelled"
    assert not tel.ends.open_spans()


def test_a_sub_workflow_run_is_a_child_of_its_executor_span(tel: Telemetry) -> None:
    """The inner run's span hangs under the outer executor.process span of its host."""
    inner = ping_pong()
    with (
        af.WorkflowBuilder("outer", start=af.WorkflowExecutor(inner, "nested"))
        .add_edge("nested", Collect("collect"))
        .build() as wf,
        wf.session() as s,
    ):
        assert s.run(0).outputs == [["outer", 3]]
    spans = by_id(tel.spans())
    runs = {r.attributes["actorflow.workflow"]: r for r in tel.spans(otel.SPAN_RUN) if r.attributes}
    inner_parent = spans[parent_of(runs["pingpong"]) or 0]
    assert inner_parent.name == "executor.process nested"
    assert runs["pingpong"].context.trace_id == runs["outer"].context.trace_id
    inner.close()


def test_a_resume_in_another_process_links_to_the_run_it_continues(
    tel: Telemetry, tmp_path: Path
) -> None:
    """A child process runs traced and stops at its superstep limit; resuming here makes a
    run whose span links to the child's run span (carried in the checkpoint as bytes)."""
    store_path = tmp_path / "runs.db"
    child = subprocess.run(
        [sys.executable, "-m", "tests.runtime.test_tracing", str(store_path)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        env=child_env(),
    )
    assert child.returncode == 0, child.stderr
    trace_id, span_id = (int(x, 16) for x in child.stdout.split())
    store = af.SQLiteStore(str(store_path))
    with ping_pong() as wf, wf.resume(store, session="far") as s:
        assert s.run().outputs == [3]
    store.close()
    (run,) = tel.spans(otel.SPAN_RUN)
    assert [(link.context.trace_id, link.context.span_id) for link in run.links] == [
        (trace_id, span_id)
    ]


def test_no_provider_means_no_span_and_no_opentelemetry_import() -> None:
    """Without a provider, a run makes nothing; without an import, nothing imports it."""
    code = (
        "import sys, actorflow as af\n"
        "class Echo(af.Executor):\n"
        "    @af.handler\n"
        "    def on(self, n: int, ctx: af.Context) -> None:\n"
        "        ctx.output(n)\n"
        "with af.WorkflowBuilder('e', start=Echo('e')).build() as wf:\n"
        "    with wf.session(store=af.MemoryStore()) as s:\n"
        "        assert s.run(3).outputs == [3]\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], sorted(sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    from actorflow.runtime.supervisor import RunJob
    from actorflow.runtime.telemetry._spans import SILENT, open_run, tracer

    assert tracer() is None  # the API is imported here, but no provider was set globally
    job = RunJob("r", lambda _: None, threading.Event(), 1)
    assert open_run(job, workflow="w", session="s", superstep=0, checkpointer=None) is SILENT


def _child(store_path: str) -> None:
    """In a child process: a traced run that stops at its limit; prints its run span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # a process of its own: the global provider
    store = af.SQLiteStore(store_path)
    with ping_pong() as wf, wf.session("far", store=store) as s:
        try:
            s.run(0, max_supersteps=2)
        except af.SuperstepLimitExceeded:
            pass
    store.close()
    (run,) = [s for s in exporter.get_finished_spans() if s.name == otel.SPAN_RUN]
    assert run.context is not None
    print(f"{run.context.trace_id:x} {run.context.span_id:x}")


if __name__ == "__main__":
    import importlib

    # The classes by their importable names, as the parent has them (not __main__'s).
    importlib.import_module("tests.runtime.test_tracing")._child(sys.argv[1])
