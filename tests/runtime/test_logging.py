"""Logging: structlog events reach the stdlib ``actorflow`` logger with their context."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

import actorflow as af
from actorflow.testing import inject_fault, run_to_idle
from tests.support import ROOT


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
    restart = next(r for r in records if r.getMessage().startswith("restarting executor"))
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


class Recorded(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def faulted_run() -> None:
    with build() as wf, wf.session("s") as s:
        inject_fault(s, "b", 2)
        assert run_to_idle(s, 0).restarts == 1


CHILD = """
import logging
import tests.runtime.test_logging as test_logging
made = []
factory = logging.getLogRecordFactory()
def counting(*args, **kwargs):
    record = factory(*args, **kwargs)
    made.append(record.name)
    return record
logging.setLogRecordFactory(counting)
test_logging.faulted_run()
print(sorted(set(name for name in made if name.startswith("actorflow"))))
"""


@pytest.mark.timeout(60)
def test_with_logging_unconfigured_no_record_is_made() -> None:
    """WARNING is enabled by default, but only the NullHandler would get the restart's
    record: none is made (it cost ~60 us per restart). A child process, since pytest
    configures logging in its own."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,  # `-c` code imports the tests package from its working folder
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert done.stderr == ""


@pytest.mark.timeout(30)
def test_a_handler_added_later_on_any_ancestor_gets_the_restart_warning() -> None:
    """Configured after the library was imported, on the root logger: the warning arrives;
    a handler above WARNING gets nothing."""
    root = logging.getLogger()
    warnings, errors = Recorded(logging.WARNING), Recorded(logging.ERROR)
    root.addHandler(warnings)
    root.addHandler(errors)
    try:
        faulted_run()
    finally:
        root.removeHandler(warnings)
        root.removeHandler(errors)
    [message] = [r.getMessage() for r in warnings.records if r.name.startswith("actorflow")]
    assert message.startswith("restarting executor 'b'")
    assert errors.records == []


BASIC_CONFIG_CHILD = """
import logging
logging.basicConfig(level=logging.INFO)
import tests.runtime.test_logging as test_logging
test_logging.faulted_run()
"""


@pytest.mark.timeout(60)
def test_with_basic_config_a_restart_says_what_failed_and_what_was_done() -> None:
    """With a plain ``logging.basicConfig(level=INFO)`` the restart line names the executor,
    the error and the action; pykka's traceback for a handled failure never appears."""
    done = subprocess.run(
        [sys.executable, "-c", BASIC_CONFIG_CHILD],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "restarting executor" in line]
    assert line.startswith("WARNING:actorflow.supervisor:restarting executor 'b' (attempt 1)")
    assert "superstep 2" in line and "InjectedFault" in line
    assert "restoring its last good state and running superstep 2 again" in line
    assert "Exception returned from" not in done.stderr
    assert "Traceback" not in done.stderr
