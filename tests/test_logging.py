"""Logging: structlog events reach the stdlib ``actorflow`` logger with their context."""

from __future__ import annotations

import logging

import pytest

import actorflow as af
from actorflow.testing import inject_fault, run_to_idle


class Count(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        if n < 3:
            ctx.send(n + 1)
        else:
            ctx.output(n)


def build() -> af.Workflow:
    builder = af.WorkflowBuilder("logged", start=Count("a"), restart=af.RestartPolicy())
    builder.add_edge("a", Count("b")).add_edge("b", "a")
    return builder.build()


@pytest.mark.timeout(30)
def test_events_carry_workflow_session_run_superstep_and_executor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="actorflow")
    with build() as wf, wf.session("logged-session") as s:
        inject_fault(s, "b", 2)
        outcome = run_to_idle(s, 0)
    assert outcome.restarts == 1
    records = [r for r in caplog.records if r.name.startswith("actorflow")]
    started = next(r for r in records if r.getMessage() == "run started")
    assert (started.workflow, started.session) == ("logged", "logged-session")  # type: ignore[attr-defined]
    restart = next(r for r in records if r.getMessage() == "restarting executor")
    assert restart.levelno == logging.WARNING
    assert (restart.executor, restart.superstep, restart.attempt) == ("b", 2, 1)  # type: ignore[attr-defined]
    assert restart.run == started.run  # type: ignore[attr-defined]
    assert "InjectedFault" in restart.error  # type: ignore[attr-defined]


@pytest.mark.timeout(30)
def test_nothing_is_logged_below_the_applications_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="actorflow")
    with build() as wf:
        assert wf.run(0).outputs == [3]
    assert [r for r in caplog.records if r.name.startswith("actorflow")] == []


def test_the_library_attaches_only_a_null_handler() -> None:
    handlers = logging.getLogger("actorflow").handlers
    assert handlers and all(isinstance(h, logging.NullHandler) for h in handlers)
