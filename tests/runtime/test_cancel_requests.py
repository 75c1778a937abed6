"""A run cancelled from another process: ``request_cancel`` on the shared store reaches
the process whose session runs it (``CancelRequests``), which stops it at a barrier."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import actorflow as af
from actorflow.runtime.session import _ownership

TICK = threading.Event()
"""Never set: each tick waits on it briefly, so a run lasts long enough to be asked."""


class Ticker(af.Executor):
    """Outputs n and sends n + 1 to itself until ``limit``, ~10 ms a tick."""

    def __init__(self, id: str, limit: int) -> None:
        super().__init__(id)
        self.limit = limit

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        TICK.wait(0.01)  # the workload
        ctx.output(n)
        if n < self.limit:
            ctx.send(n + 1)


def ticking(limit: int) -> af.Workflow:
    builder = af.WorkflowBuilder("ticking", start=Ticker("ticker", limit), max_supersteps=10_000)
    return builder.add_edge("ticker", "ticker").build()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[af.SQLiteStore, af.SQLiteStore]]:
    """Two handles on one SQLite file: the holder's, and another process's."""
    with (
        af.SQLiteStore(tmp_path / "runs.db") as holder,
        af.SQLiteStore(tmp_path / "runs.db") as other,
    ):
        yield holder, other


def test_a_run_is_cancelled_by_a_request_through_the_store(
    stores: tuple[af.SQLiteStore, af.SQLiteStore],
) -> None:
    """Another handle asks for the run by its id: the holder sees the request within
    a look at its lease and cancels the run at a barrier, with a halt cut that says so
    (the next run goes on from it)."""
    holder, other = stores
    with ticking(limit=2000) as wf, wf.session("s", store=holder) as session:
        events = []
        for event in session.stream(0):
            events.append(event)
            if isinstance(event, af.RunStartedEvent):
                assert other.request_cancel("s", event.run_id) is True
        assert isinstance(events[-1], af.RunCancelledEvent)
        ticks = [e for e in events if isinstance(e, af.OutputEvent)]
        assert len(ticks) < 2000
    halted = holder.latest(session="s")
    assert halted is not None and halted.kind.value == "halt"
    assert halted.history[-1].kind == "run_cancelled"


def test_a_request_for_another_run_leaves_the_run_alone(
    stores: tuple[af.SQLiteStore, af.SQLiteStore],
) -> None:
    """A request naming a run that is not the one going on (an earlier one, say) is
    noted but never acted on: the run completes."""
    holder, other = stores
    with ticking(limit=60) as wf, wf.session("s", store=holder) as session:
        looked = threading.Event()
        real_look = _ownership.Ownership.look

        def counted(self: _ownership.Ownership) -> None:
            real_look(self)
            looked.set()

        events = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_ownership.Ownership, "look", counted)
            for event in session.stream(0):
                events.append(event)
                if isinstance(event, af.RunStartedEvent):
                    assert other.request_cancel("s", "an-earlier-run") is True
                if isinstance(event, af.OutputEvent) and event.value == 40:
                    assert looked.wait(10)  # the holder looked while it ran
        assert isinstance(events[-1], af.RunCompletedEvent)
        assert [e.value for e in events if isinstance(e, af.OutputEvent)] == list(range(61))


def test_nobody_holds_a_session_that_is_not_open(
    stores: tuple[af.SQLiteStore, af.SQLiteStore],
) -> None:
    """A request for a session no process has open notes nothing and says so."""
    holder, other = stores
    with ticking(limit=1) as wf:
        with wf.session("s", store=holder) as session:
            ran = session.run(0)
        assert other.request_cancel("s", ran.run_id) is False


def test_back_to_back_runs_are_each_looked_for(
    stores: tuple[af.SQLiteStore, af.SQLiteStore],
) -> None:
    """The looks a run asks for go on while runs follow one another and stop after the
    first look that finds none; a run watched after that asks for them again; each
    look acts only on a request naming the run it watches."""
    holder, other = stores
    ownership = _ownership.acquire(holder, "s", ttl=30, wait=0)
    try:
        first, second = threading.Event(), threading.Event()
        ownership.watch("run-1", first)
        assert ownership.look_due < float("inf")
        ownership.unwatch()
        ownership.look()  # finds no run: the looks stop
        assert ownership.look_due == float("inf")
        ownership.watch("run-2", second)
        assert ownership.look_due < float("inf")
        assert other.request_cancel("s", "run-1") is True
        ownership.look()
        assert not first.is_set() and not second.is_set()
        assert other.request_cancel("s", "run-2") is True
        ownership.look()
        assert second.is_set() and not first.is_set()
    finally:
        ownership.release()
