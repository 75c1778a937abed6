"""actorflow.testing: faults go through one wrapper per executor, however many are injected."""

from __future__ import annotations

from typing import Any

import pytest

import actorflow as af
from actorflow.actors import HostedFactory, HostFuture, HostProxy, HostRef
from actorflow.testing import inject_fault, run_to_idle


class Counter(af.Executor):
    """Counts to a limit, one superstep a number."""

    def __init__(self, id: str, limit: int) -> None:
        super().__init__(id)
        self.limit = limit
        self.seen = 0

    @af.handler
    def on_int(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        if n >= self.limit:
            ctx.output(n)
        else:
            ctx.send(n + 1, to=self.id)


def _workflow(limit: int) -> af.Workflow:
    builder = af.WorkflowBuilder(
        "count", start=Counter("c", limit), restart=af.RestartPolicy(max_restarts=100)
    )
    return builder.add_edge("c", "c").build()


@pytest.mark.timeout(60)
def test_faults_injected_before_each_run_fire_once_each_and_leave_no_layer_behind() -> None:
    """Twenty faults over four runs: each fires once, at its superstep, and the host of the
    executor is wrapped once (a layer per fault would make every later call slower)."""
    with _workflow(9) as wf, wf.session(store=af.MemoryStore()) as s:
        layers: list[int] = []
        for run in range(4):
            base = run * 10
            supersteps = [base + k for k in (2, 4, 6, 8, 10)]
            for superstep in supersteps:
                inject_fault(s, "c", superstep)
            outcome = run_to_idle(s, 0)
            assert outcome.outputs == [9]
            assert [(e.executor, e.superstep) for e in outcome.failures] == [
                ("c", step) for step in supersteps
            ]
            layers.append(_wrapping_depth(s, "c"))
        assert layers == [1, 1, 1, 1]


def _wrapping_depth(session: af.Session, executor: str) -> int:
    """How many wrappers a call to ``executor``'s host goes through (observed by wrapping
    once more with a probe that counts the faulty hosts beneath it)."""
    seen: list[int] = []

    def probe(host: HostRef, program: HostedFactory) -> HostRef:
        depth, inner = 0, host
        while type(inner).__name__ == "_FaultyHost":
            depth += 1
            inner = inner._host  # type: ignore[attr-defined]  # the wrapped host
        seen.append(depth)
        return host

    session.wrap_host(executor, probe)
    return seen[-1]


@pytest.mark.timeout(60)
def test_a_wrapper_given_twice_wraps_once() -> None:
    """``Session.wrap_host`` with a wrapper it already has changes nothing."""
    calls: list[str] = []

    class Counting(HostProxy):
        def call(self, method: str, payload: bytes) -> HostFuture:
            calls.append(method)
            return self._host.call(method, payload)

        def load_call(self, factory: HostedFactory, method: str, payload: bytes) -> HostFuture:
            calls.append(method)
            return self._host.load_call(factory, method, payload)

    def wrap(host: HostRef, program: Any) -> HostRef:
        return Counting(host)

    with _workflow(3) as wf, wf.session() as s:
        s.wrap_host("c", wrap)
        s.wrap_host("c", wrap)
        assert s.run(0).outputs == [3]
    assert calls.count("step") == 4
