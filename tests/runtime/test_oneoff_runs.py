"""One-off runs (``Workflow.run``) reuse idle warm sessions: nothing of one run reaches the next."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pytest

import actorflow as af


class Counter(af.Executor):
    """Counts the values it handled, in mutable state, and sends the count (fails on < 0)."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.seen.append(n)
        if n < 0:
            raise ValueError("negative")
        ctx.send(len(self.seen))


class Echo(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.output(n)


def counter_workflow(policy: af.RestartPolicy | None = None) -> af.Workflow:
    builder = af.WorkflowBuilder("counter", start=Counter("count"), restart=policy)
    builder.add_edge("count", Echo("echo"))
    return builder.build()


def test_back_to_back_runs_each_start_from_the_blueprint() -> None:
    with counter_workflow() as wf:
        results = [wf.run(n) for n in range(5)]
    assert [r.outputs for r in results] == [[1]] * 5
    started = [next(e for e in r.events if isinstance(e, af.RunStartedEvent)) for r in results]
    assert len({e.session for e in started}) == 5, "every one-off run is its own session"
    assert len({r.run_id for r in results}) == 5
    assert all(e.superstep == 0 for e in started), "each run starts a lineage of its own"


class FlakyOnFirstCall(af.Executor):
    """Fails the first time each run reaches it; the restarted attempt succeeds."""

    calls: ClassVar[list[int]] = []  # shared by every instance on purpose: counts across runs

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        FlakyOnFirstCall.calls.append(n)
        if len(FlakyOnFirstCall.calls) % 2 == 1:
            raise RuntimeError("first attempt of this run")
        ctx.send(self.seen)


def test_restart_budget_and_last_good_state_are_per_run() -> None:
    """One restart allowed per minute: each run needs one, which only a per-run count allows;
    and each restart restores the run's own blueprint state (``seen`` back to 0)."""
    FlakyOnFirstCall.calls.clear()
    policy = af.RestartPolicy(max_restarts=1, within_seconds=60)
    builder = af.WorkflowBuilder("flaky", start=FlakyOnFirstCall("flaky"), restart=policy)
    builder.add_edge("flaky", Echo("echo"))
    with builder.build() as wf:
        results = [wf.run(n) for n in range(3)]
    assert [r.outputs for r in results] == [[1]] * 3
    assert [sum(isinstance(e, af.RunRestartedEvent) for e in r.events) for r in results] == [1] * 3


def test_a_failed_run_leaves_nothing_for_the_next() -> None:
    with counter_workflow() as wf:
        assert wf.run(1).outputs == [1]
        with pytest.raises(af.ExecutorFailed):
            wf.run(-1)
        assert wf.run(2).outputs == [1]
        assert wf.run(3).outputs == [1]


def test_threads_stay_bounded_over_many_runs_and_close_stops_them() -> None:
    before = threading.active_count()
    wf = counter_workflow()
    wf.run(0)
    after_one = threading.active_count()
    for n in range(50):
        assert wf.run(n).outputs == [1]
    assert threading.active_count() == after_one
    wf.close()
    with pytest.raises(af.SessionClosed):
        wf.run(1)
    # (the autouse fixture then checks that every thread the workflow started ends)
    assert after_one > before


def test_concurrent_runs_never_share_a_recycled_session() -> None:
    with counter_workflow() as wf:
        wf.run(0)  # leave one idle session for the threads to compete for
        outputs: list[list[int]] = []
        lock = threading.Lock()

        def go() -> None:
            for n in range(20):
                result = wf.run(n)
                with lock:
                    outputs.append(result.outputs)

        threads = [threading.Thread(target=go) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert outputs == [[1]] * 120
