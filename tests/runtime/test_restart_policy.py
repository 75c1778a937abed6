"""Restart policies: per-executor overrides, intensity windows, backoff."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

import actorflow as af
from actorflow.testing import inject_fault, run_to_idle


class Step(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.count = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.count += 1
        if n < 6:
            ctx.send(n + 1)
        else:
            ctx.output((self.id, self.count))


def build(
    restart: af.RestartPolicy | None, overrides: dict[str, af.RestartPolicy | None]
) -> af.Workflow:
    builder = af.WorkflowBuilder("policy", start=Step("a"), restart=restart)
    builder.add_edge("a", Step("b")).add_edge("b", "a")
    for executor, policy in overrides.items():
        builder.set_restart(executor, policy)
    return builder.build()


@pytest.mark.timeout(30)
def test_an_override_restarts_one_executor_under_a_fail_fast_workflow() -> None:
    """Default fail-fast, b overridden: a fault in b is restarted, a fault in a fails the run."""
    with build(None, {"b": af.RestartPolicy()}) as wf:
        clean = wf.run(0).outputs
        with wf.session() as s:
            inject_fault(s, "b", 2)
            restarted = run_to_idle(s, 0)
        with wf.session() as s:
            inject_fault(s, "a", 3)
            failed = run_to_idle(s, 0)
    assert restarted.outputs == clean
    assert restarted.restarts == 1
    assert isinstance(failed.error, af.ExecutorFailed)
    assert failed.error.executor == "a"


@pytest.mark.timeout(30)
def test_overriding_with_none_makes_one_executor_fail_fast() -> None:
    """A workflow that restarts everything, with a overridden to None: a fault in a fails at once."""
    with build(af.RestartPolicy(), {"a": None}) as wf, wf.session() as s:
        inject_fault(s, "a", 1)
        outcome = run_to_idle(s, 0)
    assert isinstance(outcome.error, af.ExecutorFailed)
    assert outcome.restarts == 0


@pytest.mark.timeout(30)
def test_a_session_policy_replaces_the_workflows_and_keeps_executor_overrides() -> None:
    """wf.session(restart=...) and wf.resume(restart=...) set the policy for that session only."""
    with build(None, {"b": None}) as wf:
        clean = wf.run(0).outputs
        with wf.session(restart=af.RestartPolicy()) as s:
            inject_fault(s, "a", 1)
            restarted = run_to_idle(s, 0)
        with wf.session(restart=af.RestartPolicy()) as s:
            inject_fault(s, "b", 2)  # b's own override (fail fast) still wins
            overridden = run_to_idle(s, 0)
        with wf.session() as s:  # the workflow's policy again: fail fast
            inject_fault(s, "a", 1)
            default = run_to_idle(s, 0)
        store = af.MemoryStore()
        with wf.session("first", store=store) as s:
            s.run(0)
        latest = store.latest(session="first")
        assert latest is not None
        with wf.resume(store, session="first", restart=af.RestartPolicy()) as s:
            inject_fault(s, "a", latest.superstep + 1)
            resumed = run_to_idle(s, 0)
        with wf.session() as s:
            s.run(0)
            second_clean = s.run(0).outputs  # what the resumed session's run must equal
    assert restarted.outputs == clean and restarted.restarts == 1
    assert isinstance(overridden.error, af.ExecutorFailed) and overridden.error.executor == "b"
    assert isinstance(default.error, af.ExecutorFailed) and default.restarts == 0
    assert resumed.restarts == 1 and resumed.outputs == second_clean


def test_backoff_grows_geometrically_up_to_the_maximum() -> None:
    """Delays are initial * multiplier**(n-1), capped at maximum; jitter adds at most its fraction."""
    backoff = af.Backoff(initial=0.1, maximum=0.5, multiplier=2.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 4, 5)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    jittered = af.Backoff(initial=0.1, maximum=1.0, jitter=0.5)
    assert all(0.1 <= jittered.delay(1) <= 0.15 for _ in range(100))


def test_policies_refuse_nonsense() -> None:
    """Negative restart counts, empty windows and every < 1 are refused at construction."""
    with pytest.raises(ValueError, match="max_restarts"):
        af.RestartPolicy(max_restarts=-1)
    with pytest.raises(ValueError, match="within_seconds"):
        af.RestartPolicy(within_seconds=0)
    with pytest.raises(ValueError, match="every"):
        af.CheckpointPolicy(every=0)


@pytest.mark.parametrize(
    ("make", "named"),
    [
        # every=1.5 would checkpoint every 3rd superstep; on_idle_only="no" only when idle
        (lambda: af.CheckpointPolicy(every=1.5), "every"),  # type: ignore[arg-type]
        (lambda: af.CheckpointPolicy(every=None), "every"),  # type: ignore[arg-type]
        (lambda: af.CheckpointPolicy(on_idle_only="no"), "on_idle_only"),  # type: ignore[arg-type]
        (lambda: af.CheckpointPolicy(durability="bogus"), "durability"),  # type: ignore[arg-type]
        (lambda: af.RestartPolicy(max_restarts=1.5), "max_restarts"),  # type: ignore[arg-type]
        (lambda: af.RestartPolicy(within_seconds=math.nan), "within_seconds"),
        (lambda: af.RestartPolicy(retry_on=[KeyError]), "retry_on"),  # type: ignore[arg-type]
        (lambda: af.RestartPolicy(retry_on=()), "retry_on"),
        (lambda: af.RestartPolicy(backoff=0.5), "backoff"),  # type: ignore[arg-type]
        (lambda: af.Backoff(initial=-1), "initial"),
        (lambda: af.Backoff(maximum=math.inf), "maximum"),
        (lambda: af.Backoff(multiplier=0.5), "multiplier"),
        (lambda: af.Backoff(jitter=math.nan), "jitter"),
    ],
)
def test_policy_fields_of_the_wrong_kind_are_refused_naming_the_field(
    make: Callable[[], object], named: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=named):
        make()


def test_a_restart_window_may_be_the_whole_run_and_one_type_is_a_tuple_of_one() -> None:
    policy = af.RestartPolicy(within_seconds=math.inf, retry_on=KeyError)  # type: ignore[arg-type]
    assert policy.retry_on == (KeyError,)
