"""Human-in-the-loop requests: pending, answered, checked, durable across processes."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

import actorflow as af
from actorflow.storage import CheckpointKind
from tests.support import ROOT
from tests.support.pg import Durable


@af.message
@dataclass
class Approval:
    amount: int


class Approver(af.Executor):
    """Asks for two approvals per amount; records and outputs each answer."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.answers: list[list[object]] = []

    @af.handler
    def on_amount(self, amount: int, ctx: af.Context[Any]) -> None:
        ctx.request(Approval(amount), bool)
        ctx.request(Approval(amount * 2), bool)

    @af.response_handler
    def on_answer(self, request: Approval, ok: bool, ctx: af.Context[Any]) -> None:
        self.answers.append([request.amount, ok])
        ctx.output([request.amount, ok, len(self.answers)])


def build() -> af.Workflow:
    return af.WorkflowBuilder("approvals", start=Approver("ap")).build()


def test_request_makes_run_idle_with_pending_requests() -> None:
    """ctx.request leaves the run idle with its requests listed, values decoded."""
    with build() as wf, wf.session() as s:
        result = s.run(10)
    assert result.status is af.RunStatus.IDLE_WITH_PENDING_REQUESTS
    assert [(p.request_id, p.value, p.response_type) for p in result.pending_requests] == [
        ("ap:1:0", Approval(10), "bool"),
        ("ap:1:1", Approval(20), "bool"),
    ]
    assert any(isinstance(e, af.RequestEvent) for e in result.events)
    assert isinstance(result.events[-2], af.RunIdleWithPendingRequestsEvent)


def test_answering_some_leaves_the_rest_pending() -> None:
    """An answer runs the response handler; other requests stay pending until answered."""
    with build() as wf, wf.session() as s:
        s.run(10)
        first = s.respond({"ap:1:1": False})
        assert first.outputs == [[20, False, 1]]
        assert [p.request_id for p in first.pending_requests] == ["ap:1:0"]
        second = s.respond({"ap:1:0": True})
    assert second.outputs == [[10, True, 2]]
    assert second.status is af.RunStatus.COMPLETED


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"ap:9:9": True}, "not a pending request"),
        ({"ap:1:0": "yes"}, "expects a bool, got a str"),
        ({"ap:1:0": True, "ghost": True}, "not a pending request"),
        (
            True,
            r"must be a mapping of request id to answer, got a bool; answer with \{'ap:1:0': answer\}",
        ),
        (["ap:1:0", True], "must be a mapping of request id to answer, got a list"),
    ],
)
def test_bad_answers_raise_and_consume_nothing(answers: object, message: str) -> None:
    """Unknown ids, wrong types and answers that are not a mapping raise RequestError; no
    answer of the batch is consumed."""
    with build() as wf, wf.session() as s:
        s.run(10)
        with pytest.raises(af.RequestError, match=message):
            s.respond(answers)  # type: ignore[arg-type]  # what an untyped caller passes
        assert [p.request_id for p in s.pending_requests] == ["ap:1:0", "ap:1:1"]


def test_second_answer_to_the_same_request_raises() -> None:
    """A request answered once cannot be answered again."""
    with build() as wf, wf.session() as s:
        s.run(10)
        s.respond({"ap:1:0": True})
        with pytest.raises(af.RequestError, match="already answered"):
            s.respond({"ap:1:0": True})


def test_response_checkpoint_replays_the_answer_step(durable: Durable) -> None:
    """Restoring the `response` checkpoint re-runs the answer handling with the same outputs."""
    store = durable.open()
    with build() as wf:
        with wf.session("c", store=store) as s:
            s.run(5)
            answered = s.respond({"ap:1:0": True})
        responses = store.list(session="c", kind=CheckpointKind.RESPONSE)
        assert len(responses) == 1
        with wf.resume(store, checkpoint_id=responses[0].id) as replay:
            again = replay.run()
    assert again.outputs == answered.outputs == [[5, True, 1]]
    store.close()


ANSWER_IN_CHILD = """
import actorflow as af
import tests.runtime.test_requests as t
store = {store}
with t.build() as wf, wf.resume(store, session="c", responses={{"ap:1:1": True}}) as s:
    print([p.request_id for p in s.pending_requests])
    result = s.run()
    print(result.outputs)
"""


def test_request_answered_from_the_store_in_a_new_process(durable: Durable) -> None:
    """A request raised, the process exits, a new process answers: the handler runs once, with the original request."""
    store = durable.open()
    with build() as wf, wf.session("c", store=store) as s:
        s.run(7)
    store.close()
    code = ANSWER_IN_CHILD.format(store=durable.source())
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,  # `-c` code imports the tests package from its working folder
    )
    assert out.returncode == 0, out.stderr
    pending_line, outputs_line = out.stdout.strip().splitlines()
    assert pending_line == "['ap:1:0']"
    assert outputs_line == "[[14, True, 1]]"
    reopened = durable.open()
    with build() as wf, wf.resume(reopened, session="c") as s:
        assert [p.request_id for p in s.pending_requests] == ["ap:1:0"]
        assert s.respond({"ap:1:0": False}).outputs == [[7, False, 2]]
    reopened.close()
