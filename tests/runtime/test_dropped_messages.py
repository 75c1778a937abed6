"""A value that targets handle but every condition declines is reported, never silent:
a ``MessageDroppedEvent``, an INFO log line, and with ``strict_routing`` a failed run."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import actorflow as af


class Src(af.Executor):
    @af.handler
    def on_int(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n)


class Sink(af.Executor):
    @af.handler
    def on_int(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)


def _big(v: int) -> bool:
    return v > 5


def _conditional(**options: Any) -> af.Workflow:
    return (
        af.WorkflowBuilder("drops", start=Src("src"), **options)
        .add_edge("src", Sink("sink"), when=_big)
        .build()
    )


def test_a_value_every_condition_declines_is_an_event() -> None:
    """Sent 1, declined by ``when=v > 5``: the run completes with no output and one
    MessageDroppedEvent naming the sender, the type and the target passed over."""
    with _conditional() as wf, wf.session("s") as s:
        events = list(s.stream(1))
    dropped = [e for e in events if isinstance(e, af.MessageDroppedEvent)]
    assert [(e.executor, e.type_name, e.targets, e.superstep) for e in dropped] == [
        ("src", "int", ("sink",), 1)
    ]
    assert not [e for e in events if isinstance(e, af.OutputEvent)]
    assert isinstance(events[-1], af.RunCompletedEvent)


def test_a_value_one_edge_takes_is_not_a_drop() -> None:
    """Declined by one condition but taken by another edge: delivered, nothing reported."""
    builder = af.WorkflowBuilder("drops", start=Src("src"))
    builder.add_edge("src", Sink("big"), when=_big)
    builder.add_edge("src", Sink("small"), when=lambda v: v <= 5)
    with builder.build() as wf, wf.session("s") as s:
        events = list(s.stream(1))
    assert not [e for e in events if isinstance(e, af.MessageDroppedEvent)]
    assert [e.executor for e in events if isinstance(e, af.OutputEvent)] == ["small"]


def test_a_switch_without_default_and_an_empty_selection_are_drops() -> None:
    """No case holds and no Default; a fan-out selector that picks nobody: both reported."""
    builder = af.WorkflowBuilder("drops", start=Src("src"))
    builder.add_switch("src", [af.Case(_big, Sink("big"))])
    with builder.build() as wf, wf.session("s") as s:
        switch = [e for e in s.stream(1) if isinstance(e, af.MessageDroppedEvent)]
    assert [(e.executor, e.targets) for e in switch] == [("src", ("big",))]
    fan = af.WorkflowBuilder("drops", start=Src("src"))
    fan.add_fan_out("src", [Sink("a"), Sink("b")], select=lambda v, targets: [])
    with fan.build() as wf, wf.session("s") as s:
        selected = [e for e in s.stream(1) if isinstance(e, af.MessageDroppedEvent)]
    assert [(e.executor, e.targets) for e in selected] == [("src", ("a", "b"))]


def test_a_drop_is_logged_with_its_context(caplog: pytest.LogCaptureFixture) -> None:
    """One INFO line saying what was dropped, bound with workflow, session, run,
    superstep and executor like the supervisor's other lines."""
    caplog.set_level(logging.INFO, logger="actorflow")
    with _conditional() as wf, wf.session("logged") as s:
        s.run(1)
    [record] = [r for r in caplog.records if "every condition declined" in r.getMessage()]
    assert record.levelno == logging.INFO
    message = record.getMessage()
    assert "executor 'src' sent an int" in message and "'sink'" in message
    bound = {k: getattr(record, k, None) for k in ("workflow", "session", "superstep", "executor")}
    assert bound == {"workflow": "drops", "session": "logged", "superstep": 1, "executor": "src"}
    assert getattr(record, "run", None) and getattr(record, "type", None) == "int"


def test_strict_routing_fails_the_run_naming_executor_type_and_fix() -> None:
    """``strict_routing=True``: the drop fails the run with MessageDropped (also an
    ExecutorFailed), naming the executor, the value's type and what to change."""
    with _conditional(strict_routing=True) as wf:
        with pytest.raises(af.MessageDropped) as failed:
            wf.run(1)
        assert wf.run(7).outputs == [7]  # what a condition takes still flows
    error = failed.value
    assert isinstance(error, af.ExecutorFailed) and isinstance(error, af.UnroutableMessage)
    assert isinstance(error.__cause__, af.MessageDropped)
    text = str(error)
    assert "executor 'src' sent an int" in text
    assert "strict_routing" in text and "Default" in text
