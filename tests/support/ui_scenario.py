"""A store made by real runs for the inspector's tests: a restart, a fork, a pending
request, and state that holds markup (which the page must show as text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import actorflow as af
from actorflow.testing import inject_fault

SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '<img src=x onerror="window.__pwned = 2">'


@af.message(name="tests.ui_scenario.Order")  # other test modules register an "Order" too
@dataclass
class Order:
    id: int
    items: list[str]


class Intake(af.Executor):
    """Keeps every order it saw, and a note that is markup."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.orders: list[int] = []
        self.note = SCRIPT

    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Any]) -> None:
        self.orders.append(order.id)
        ctx.send(order)


class Review(af.Executor):
    """Asks a person to approve each order; outputs the verdict."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.asked: list[int] = []
        self.verdicts: dict[str, bool] = {}

    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Any]) -> None:
        self.asked.append(order.id)
        ctx.request(f"approve order {order.id} with {order.items}?", bool)

    @af.response_handler
    def on_answer(self, question: str, answer: bool, ctx: af.Context[Any]) -> None:
        self.verdicts[question] = answer
        ctx.output(f"approved={answer}")


def workflow() -> af.Workflow:
    """The workflow the inspector is given (``--workflow tests.ui_scenario:workflow``)."""
    return (
        af.WorkflowBuilder(
            "approvals", start=Intake("intake"), restart=af.RestartPolicy(max_restarts=3)
        )
        .add_edge("intake", Review("review"))
        .build()
    )


def make_store(store: af.CheckpointStore) -> None:
    """Session ``order-1``: one order answered, a restart, then a second order left
    waiting for its answer; session ``order-1-fork``: a fork of ``order-1`` from
    before its second order, which took a different order."""
    with workflow() as wf:
        with wf.session("order-1", store=store) as s:
            inject_fault(s, "review", 2)  # review fails once and is restarted
            first = s.run(Order(1, ["tea", IMG]))
            (request,) = first.pending_requests
            s.respond({request.request_id: True})
            fork_from = s.last_checkpoint_id
            s.run(Order(2, ["coffee"]))
        assert fork_from is not None
        with wf.resume(store, checkpoint_id=fork_from, as_session="order-1-fork") as fork:
            fork.run(Order(3, ["cake"]))
