"""Supervisor pacing: one supervisor works at a time, and never holds others up while it waits."""

from __future__ import annotations

import threading

import actorflow as af
from actorflow.runtime._pace import Pace


class Step(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n + 1)


class Out(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)


class Blocked(af.Executor):
    """Waits until the test lets it go: a handler doing I/O, as far as pacing can tell."""

    entered = threading.Event()
    go = threading.Event()

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        Blocked.entered.set()
        Blocked.go.wait(30)
        ctx.output(n)


def test_a_waiting_handler_does_not_hold_up_other_sessions() -> None:
    """While one session's handler waits, another session's runs go on to the end."""
    slow = af.WorkflowBuilder("slow", start=Blocked("b")).build()
    fast = af.WorkflowBuilder("fast", start=Step("a")).add_edge("a", Out("out")).build()
    Blocked.entered.clear()
    Blocked.go.clear()
    results: list[af.RunResult] = []
    with slow, fast, slow.session(store=af.MemoryStore()) as a:
        waiting = threading.Thread(target=lambda: results.append(a.run(1)), daemon=True)
        waiting.start()
        try:
            assert Blocked.entered.wait(10)
            with fast.session(store=af.MemoryStore()) as b:
                assert [b.run(n).outputs for n in range(3)] == [[1], [2], [3]]
            assert results == []  # the other run was still waiting meanwhile
        finally:
            Blocked.go.set()
            waiting.join(10)
    assert [r.outputs for r in results] == [[1]]


def test_released_hands_the_slot_over_and_takes_it_back() -> None:
    pace = Pace(1)
    never = threading.Event()
    other_ran = threading.Event()

    def other() -> None:
        with pace.run(never):
            other_ran.set()

    with pace.run(never):
        assert pace.holding()
        thread = threading.Thread(target=other, daemon=True)
        thread.start()
        assert not other_ran.wait(0.1)  # the slot is taken
        with pace.released():
            assert not pace.holding()
            assert other_ran.wait(10)
        assert pace.holding()
        thread.join(10)
    assert not pace.holding()


def test_a_cancelled_run_does_not_wait_for_a_slot() -> None:
    pace = Pace(1)
    cancel = threading.Event()
    taken = threading.Event()
    release = threading.Event()
    went_on = threading.Event()

    def holder() -> None:
        with pace.run(threading.Event()):
            taken.set()
            release.wait(30)

    def waiter() -> None:
        with pace.run(cancel):
            assert not pace.holding()
            went_on.set()

    threads = [threading.Thread(target=holder, daemon=True)]
    threads[0].start()
    assert taken.wait(10)
    threads.append(threading.Thread(target=waiter, daemon=True))
    threads[1].start()
    cancel.set()
    assert went_on.wait(10)
    release.set()
    for thread in threads:
        thread.join(10)


def test_no_pacing_without_slots() -> None:
    pace = Pace(None)
    with pace.run(threading.Event()), pace.released():
        assert not pace.holding()
