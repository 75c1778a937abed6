"""A workflow to serve, a store, and a real uvicorn server on 127.0.0.1 per test."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.serve import Server, ServiceApp


@af.message(name="tests.serve.Order")  # other test modules register an "Order" too
@dataclass
class Order:
    id: int
    items: list[str] = field(default_factory=list)


@af.message(name="tests.serve.Decision")
@dataclass
class Decision:
    approved: bool
    note: str = ""


GATE = threading.Event()
"""The ticker holds at tick 5 until this is set (a test keeps a run going with it). A
worker process started with ``ACTORFLOW_TEST_GATE=shut`` starts with it cleared."""
if os.environ.get("ACTORFLOW_TEST_GATE") != "shut":
    GATE.set()


class Intake(af.Executor):
    """Counts orders; an order without items needs a person's approval (a request); a
    number starts the ticker."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.orders: list[int] = []

    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Any]) -> None:
        self.orders.append(order.id)
        if order.items:
            ctx.send(order)
        else:
            ctx.request(order, Decision)

    @af.handler
    def on_number(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n)

    @af.response_handler
    def on_decision(self, order: Order, decision: Decision, ctx: af.Context[Any]) -> None:
        verdict = "approved" if decision.approved else "rejected"
        ctx.output(f"{verdict} {order.id}: {decision.note}")


class Ship(af.Executor):
    """Outputs each item of an order, one output each."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.shipped = 0

    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Any]) -> None:
        for item in order.items:
            self.shipped += 1
            ctx.output(item)


class Ticker(af.Executor):
    """Outputs n, then sends n + 1 to itself until 20, one superstep a tick; at tick 5 it
    waits for :data:`GATE`."""

    @af.handler
    def on_tick(self, n: int, ctx: af.Context[Any]) -> None:
        if n == 5:
            GATE.wait(20)
        ctx.output(n)
        if n < 20:
            ctx.send(n + 1, to="ticker")


def build() -> af.Workflow:
    return (
        af.WorkflowBuilder("orders", start=Intake("intake"))
        .add_edge("intake", Ship("ship"))
        .add_edge("intake", Ticker("ticker"))
        .add_edge("ticker", "ticker")
        .build()
    )


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """:data:`GATE`, cleared: the ticker holds at tick 5 until the test sets it."""
    GATE.clear()
    try:
        yield GATE
    finally:
        GATE.set()


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
