"""A store made by real runs for the inspector's tests: a restart, a fork with a long
session id, a pending request whose answer is a registered dataclass, a run that
failed past its restart policy, and state that holds markup (which the page must
show as text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import actorflow as af
from actorflow.testing import inject_fault

SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '<img src=x onerror="window.__pwned = 2">'
FORK = "order-1-fork-for-the-customer-who-changed-their-mind-about-the-cake-at-the-very-last-minute"
"""A fork's session id long enough that a clipped label would show."""
FAILED = "order-7"
"""A session whose run failed: review cannot handle an order with 'poison' in it."""
POISON = "'poison' is not on the menu"


@af.message(name="tests.ui_scenario.Order")  # other test modules register an "Order" too
@dataclass
class Order:
    id: int
    items: list[str]


@af.message(name="tests.ui_scenario.Decision")
@dataclass
class Decision:
    """A reviewer's answer: the pattern the docs teach for requests."""

    approved: bool
    note: str


class Intake(af.Executor):
    """Keeps every order it saw, and a note that is markup."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.orders: list[int] = []
        self.note = SCRIPT

    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Any]) -> None:
        self.orders.append(order.id)
        ctx.output(f"received order {order.id}")
        ctx.send(order)


class Review(af.Executor):
    """Asks a person to approve each order (a :class:`Decision`); outputs the verdict.
    Fails on an order holding 'poison', however often it is restarted."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.asked: list[int] = []
        self.verdicts: dict[str, bool] = {}

    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Any]) -> None:
        self.asked.append(order.id)
        if "poison" in order.items:
            raise ValueError(f"order {order.id}: {POISON}")
        ctx.request(f"approve order {order.id} with {order.items}?", Decision)

    @af.response_handler
    def on_answer(self, question: str, answer: Decision, ctx: af.Context[Any]) -> None:
        self.verdicts[question] = answer.approved
        ctx.output(f"approved={answer.approved}")


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
    waiting for its answer; session :data:`FORK`: a fork of ``order-1`` from before
    its second order, which took a different order; session :data:`FAILED`: an order
    review fails on, past the restart policy's three restarts."""
    with workflow() as wf:
        with wf.session("order-1", store=store) as s:
            inject_fault(s, "review", 2)  # review fails once and is restarted
            first = s.run(Order(1, ["tea", IMG]))
            (request,) = first.pending_requests
            s.respond({request.request_id: Decision(True, "ok")})
            fork_from = s.last_checkpoint_id
            s.run(Order(2, ["coffee"]))
        assert fork_from is not None
        with wf.resume(store, checkpoint_id=fork_from, as_session=FORK) as fork:
            fork.run(Order(3, ["cake"]))
        with wf.session(FAILED, store=store) as failing:
            try:
                failing.run(Order(7, ["soup", "poison"]))
            except af.ExecutorFailed:
                pass
        assert store.latest(session=FAILED) is not None


def crowd(store: af.CheckpointStore, count: int) -> None:
    """``count`` more sessions ``crowd-000``, ``crowd-001``, ...: every fifth failed,
    the others waiting for an answer."""
    with workflow() as wf:
        for n in range(count):
            with wf.session(f"crowd-{n:03d}", store=store) as s:
                try:
                    s.run(Order(100 + n, ["poison"] if n % 5 == 0 else ["tea"]))
                except af.ExecutorFailed:
                    pass
