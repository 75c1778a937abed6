"""A workflow to serve, a store, and a real uvicorn server on 127.0.0.1 per test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import actorflow as af
from actorflow.serve import Server, ServiceApp


@af.message
@dataclass
class Order:
    id: int
    items: list[str] = field(default_factory=list)


@af.message
@dataclass
class Decision:
    approved: bool
    note: str = ""


class Intake(af.Executor):
    """Counts orders; an order without items needs a person's approval (a request)."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.orders: list[int] = []

    @af.handler
    def on_order(self, order: Order, ctx: af.Context) -> None:
        self.orders.append(order.id)
        if order.items:
            ctx.send(order)
        else:
            ctx.request(order, Decision)

    @af.response_handler
    def on_decision(self, order: Order, decision: Decision, ctx: af.Context) -> None:
        verdict = "approved" if decision.approved else "rejected"
        ctx.output(f"{verdict} {order.id}: {decision.note}")


class Ship(af.Executor):
    """Outputs each item of an order, one output each."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.shipped = 0

    @af.handler
    def on_order(self, order: Order, ctx: af.Context) -> None:
        for item in order.items:
            self.shipped += 1
            ctx.output(item)


def build() -> af.Workflow:
    return (
        af.WorkflowBuilder("orders", start=Intake("intake"))
        .add_edge("intake", Ship("ship"))
        .build()
    )


@pytest.fixture
def workflow() -> Iterator[af.Workflow]:
    wf = build()
    try:
        yield wf
    finally:
        wf.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[af.SQLiteStore]:
    found = af.SQLiteStore(str(tmp_path / "service.db"))
    try:
        yield found
    finally:
        found.close()


@pytest.fixture
def server(workflow: af.Workflow, store: af.SQLiteStore) -> Iterator[Server]:
    """The service on a free port of 127.0.0.1, served by uvicorn on its own thread."""
    with Server(ServiceApp(workflow, store)) as running:
        yield running


@pytest.fixture
def guarded(workflow: af.Workflow, store: af.SQLiteStore) -> Iterator[Server]:
    """The service with a bearer token (``secret``)."""
    with Server(ServiceApp(workflow, store, token="secret")) as running:
        yield running
