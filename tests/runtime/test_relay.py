"""The relay: one-executor supersteps driven from the hosts' threads (``supervisor/_relay``).

A relayed run must be indistinguishable from one the supervisor drives: the same
events in the same order, the same recovery after a failure, a cancel that stops a
hung handler within a second, the superstep limit, fault injection. Each test runs
the same cycle relayed and, as the reference, with a deadline on its executors (a
deadline keeps a superstep off the relay).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

import actorflow as af
from actorflow.testing import inject_fault

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0
HOLD: dict[str, Any] = {}
"""``{"at": n, "entered": Event, "release": Event}``: where ``Pong`` holds a handler."""


class Ping(af.Executor):
    def __init__(self, executor_id: str, timeout: float | None = None) -> None:
        super().__init__(executor_id, timeout=timeout)
        self.seen = 0

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        if n >= 20:
            ctx.output(n)
        else:
            ctx.send(n)


class Pong(af.Executor):
    def __init__(self, executor_id: str, timeout: float | None = None) -> None:
        super().__init__(executor_id, timeout=timeout)
        self.seen = 0

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        if HOLD.get("at") == n:
            HOLD["entered"].set()
            HOLD["release"].wait(WAIT)
        if n % 5 == 0:
            ctx.output(f"pong {n}")
        ctx.send(n + 1)


def _cycle(*, relayed: bool, restart: af.RestartPolicy | None = None) -> af.Workflow:
    timeout = None if relayed else 30.0  # a deadline keeps the supersteps off the relay
    ping = Ping("ping", timeout)
    builder = af.WorkflowBuilder("cycle", start=ping, restart=restart, max_supersteps=500)
    builder.add_edge(ping, Pong("pong", timeout)).add_edge("pong", "ping")
    return builder.build()


def _shape(events: list[af.Event]) -> list[tuple[Any, ...]]:
    """What each event says, without its run id and time."""
    return [
        (
            type(event).__name__,
            tuple(
                (f.name, getattr(event, f.name))
                for f in dataclasses.fields(event)
                if f.name not in ("run_id", "time", "session")
            ),
        )
        for event in events
    ]


def _events(wf: af.Workflow, value: int) -> list[af.Event]:
    return list(wf.stream(value))


def test_a_relayed_run_emits_what_a_supervised_one_does() -> None:
    with _cycle(relayed=True) as relayed, _cycle(relayed=False) as supervised:
        assert _shape(_events(relayed, 0)) == _shape(_events(supervised, 0))
        assert relayed.run(3).outputs == supervised.run(3).outputs


def test_a_handler_failing_on_the_relay_is_restarted_by_the_supervisor() -> None:
    policy = af.RestartPolicy(max_restarts=3)
    with _cycle(relayed=True, restart=policy) as wf, wf.session() as session:
        inject_fault(session, "pong", superstep=6)
        inject_fault(session, "ping", superstep=11)
        result = session.run(0)
    assert result.outputs == ["pong 0", "pong 5", "pong 10", "pong 15", 20]
    restarts = [e for e in result.events if isinstance(e, af.RunRestartedEvent)]
    assert [(e.superstep, e.executor) for e in restarts] == [(6, "pong"), (11, "ping")]


def test_the_superstep_limit_holds_on_the_relay() -> None:
    with _cycle(relayed=True) as wf, pytest.raises(af.SuperstepLimitExceeded) as raised:
        wf.run(0, max_supersteps=7)
    assert raised.value.superstep == 7


def test_a_cancel_stops_a_hung_relayed_handler_and_the_session_goes_on() -> None:
    release = threading.Event()
    HOLD.update(at=4, entered=threading.Event(), release=release)
    try:
        policy = af.RestartPolicy()  # (a state to roll back to: a cancel rolls the superstep back)
        with _cycle(relayed=True, restart=policy) as wf, wf.session() as session:
            outcome: list[af.RunResult | BaseException] = []

            def run() -> None:
                try:
                    outcome.append(session.run(0))
                except BaseException as exc:
                    outcome.append(exc)

            runner = threading.Thread(target=run)
            runner.start()
            assert HOLD["entered"].wait(WAIT)
            session.cancel()
            runner.join(WAIT)
            assert not runner.is_alive()
            [result] = outcome
            assert isinstance(result, af.RunResult)
            assert result.status is af.RunStatus.CANCELLED
            HOLD.clear()
            continued = session.run()  # the rolled-back superstep, then the rest
            assert continued.outputs[-1] == 20
    finally:
        release.set()  # the abandoned handler finishes in the background
        HOLD.clear()


def test_many_sessions_relay_at_once_without_mixing_their_states() -> None:
    with _cycle(relayed=True) as wf:
        results: dict[int, list[Any]] = {}

        def run(start: int) -> None:
            results[start] = wf.run(start).outputs

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
    for start in range(8):
        assert results[start] == [*(f"pong {n}" for n in range(start, 20) if n % 5 == 0), 20]


class Source(af.Executor):
    def __init__(self, executor_id: str, timeout: float | None = None) -> None:
        super().__init__(executor_id, timeout=timeout)

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n)


class Worker(af.Executor):
    def __init__(self, executor_id: str, factor: int, timeout: float | None = None) -> None:
        super().__init__(executor_id, timeout=timeout)
        self.factor = factor

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n * self.factor)


class Sum(af.Executor):
    def __init__(self, executor_id: str, timeout: float | None = None) -> None:
        super().__init__(executor_id, timeout=timeout)

    @af.handler
    def on_parts(self, parts: list[int], ctx: af.Context[None]) -> None:
        ctx.output(sum(parts))


def _fan(*, relayed: bool) -> af.Workflow:
    timeout = None if relayed else 30.0
    source = Source("source", timeout)
    workers = [Worker(f"w{i}", i, timeout) for i in range(4)]
    builder = af.WorkflowBuilder("fan", start=source, restart=af.RestartPolicy())
    builder.add_fan_out(source, workers).add_fan_in(workers, Sum("sum", timeout))
    return builder.build()


def test_a_fan_out_and_in_closed_by_the_last_host_emits_what_the_supervisor_does() -> None:
    with _fan(relayed=True) as relayed, _fan(relayed=False) as supervised:
        assert _shape(_events(relayed, 2)) == _shape(_events(supervised, 2))
        assert relayed.run(2).outputs == [12]
        with relayed.session() as session:
            inject_fault(session, "w2", superstep=2)
            result = session.run(3)
    assert result.outputs == [18]
    assert [e.executor for e in result.events if isinstance(e, af.RunRestartedEvent)] == ["w2"]
