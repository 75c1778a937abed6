"""The lean actor plumbing keeps pykka's semantics: answers, errors, timeouts, stop."""

from __future__ import annotations

import os
import pickle
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest

import actorflow as af
from actorflow.actors import LeanActor, ReplyFuture
from actorflow.actors._reply import Raised


class Boom(RuntimeError):
    pass


class Worker(LeanActor):
    def __init__(self, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.gate = gate
        self.label = "worker"

    def double(self, n: int) -> int:
        return n * 2

    def on_receive(self, message: Any) -> Any:
        if message == "wait":
            assert self.gate is not None and self.gate.wait(10)
        if message == "boom":
            raise Boom("handler failed")
        return ("echo", message)


@pytest.fixture
def worker() -> Iterator[pykka.ActorRef[Worker]]:
    ref = Worker.start()
    yield ref
    ref.stop()


def test_ask_returns_the_answer_through_a_reply_future(worker: pykka.ActorRef[Worker]) -> None:
    future = worker.ask(7, block=False)
    assert isinstance(future, ReplyFuture)
    assert future.get(timeout=5) == ("echo", 7)
    assert future.get(timeout=0) == ("echo", 7)  # a second get sees the same answer


def test_errors_are_raised_to_every_getter_with_their_traceback(
    worker: pykka.ActorRef[Worker],
) -> None:
    future = worker.ask("boom", block=False)
    for _ in range(2):
        with pytest.raises(Boom, match="handler failed") as info:
            future.get(timeout=5)
        assert any(frame.name == "on_receive" for frame in info.traceback)


def test_get_times_out_with_pykka_timeout_and_can_wait_again() -> None:
    gate = threading.Event()
    ref = Worker.start(gate)
    try:
        future = ref.ask("wait", block=False)
        with pytest.raises(pykka.Timeout):
            future.get(timeout=0.01)
        gate.set()
        assert future.get(timeout=5) == ("echo", "wait")
    finally:
        ref.stop()


def test_callbacks_fire_once_on_completion_or_at_once_if_complete() -> None:
    future = ReplyFuture()
    calls: list[str] = []
    future.add_done_callback(lambda: calls.append("before"))
    assert calls == []
    future.set(3)
    assert calls == ["before"]
    future.add_done_callback(lambda: calls.append("after"))
    assert calls == ["before", "after"]
    assert future.get(timeout=0) == 3


class _LockThenAct:
    """A lock that runs ``act`` (once, when armed) right after its holder lets go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.act: Any = None

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        act, self.act = self.act, None
        if act is not None:
            act()


def test_a_callback_added_while_the_answer_is_set_sees_the_answer() -> None:
    """A callback added on another thread at any moment of completing (here: right after
    the completing thread first lets go of the callbacks' lock) runs once the answer is
    published: ``get(timeout=0)`` in it returns the answer, never ReplyTimeout."""
    future = ReplyFuture()
    lock = _LockThenAct()
    future._callbacks_lock = lock  # type: ignore[assignment]  # an instrumented lock, this future only
    seen: list[object] = []

    def in_callback() -> None:
        try:
            seen.append(future.get(timeout=0))
        except BaseException as exc:  # what the callback met, for the assertion
            seen.append(exc)

    def add_from_another_thread() -> None:
        adder = threading.Thread(target=future.add_done_callback, args=(in_callback,))
        adder.start()
        adder.join(timeout=10)

    lock.act = add_from_another_thread
    future.set("answer")
    assert seen == ["answer"]


def test_a_future_completes_only_once() -> None:
    future = ReplyFuture()
    future.set(1)
    with pytest.raises(queue.Full):
        future.set(2)
    with pytest.raises(queue.Full):
        future.set_exception((Boom, Boom("late"), None))
    assert future.get(timeout=0) == 1


def test_stop_and_asking_a_stopped_actor_behave_as_in_pykka() -> None:
    ref = Worker.start()
    assert ref.stop(timeout=5) is True
    assert ref.stop(timeout=5) is False  # already stopped: pykka answers False
    with pytest.raises(pykka.ActorDeadError):
        ref.ask(1, timeout=5)


def test_an_interrupt_inside_get_does_not_strand_later_getters() -> None:
    """The answer is published before the lock is released, so a getter that was
    interrupted while holding the lock leaves a complete future behind."""
    future = ReplyFuture()
    future.set("answer")
    assert future._done.acquire(timeout=0)  # as if an interrupt hit between acquire and release
    assert future.get(timeout=0.01) == "answer"


def test_pykka_messages_still_reach_pykkas_own_dispatch(worker: pykka.ActorRef[Worker]) -> None:
    """Plain tuples skip pykka's checks; its proxy and stop messages (NamedTuples) do not."""
    proxy = worker.proxy()
    assert proxy.double(21).get(timeout=5) == 42
    assert proxy.label.get(timeout=5) == "worker"
    assert worker.ask(("a", "tuple"), timeout=5) == ("echo", ("a", "tuple"))
    assert worker.ask(len, timeout=5) == ("echo", len)  # a builtin is not a plain function


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="scheduling policies are Linux's")
def test_actor_threads_keep_the_default_scheduling_policy() -> None:
    """Hosts and supervisors run under the process's own policy (``SCHED_OTHER``): a host
    woken while another process has the CPU runs at once, instead of waiting out that
    process's slice (``SCHED_BATCH`` made W1 five times slower beside two busy processes)."""

    class Probe(af.Executor):
        @af.handler
        def on_num(self, n: int, ctx: af.Context[Any]) -> None:
            ctx.output(_policy())

    with af.WorkflowBuilder("probe", start=Probe("p")).build() as wf:
        assert wf.run(1).outputs == [os.SCHED_OTHER]


def _policy() -> int:
    return os.sched_getscheduler(0)


class Slotted(Exception):
    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        super().__init__(f"code {code}")
        self.code = code


class Refusal(Exception):
    """Made from other parameters than its message (pickle's own way would fail)."""

    def __init__(self, order: str, *, reason: str) -> None:
        super().__init__(f"{order}: {reason}")
        self.reason = reason


def _slotted() -> Slotted:
    return Slotted(7)


ERRORS: list[Callable[[], BaseException]] = [
    lambda: FileNotFoundError(2, "No such file", "/etc/absent"),
    lambda: StopIteration(5),
    lambda: UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    lambda: KeyError("order"),
    _slotted,
    lambda: Refusal("o1", reason="declined"),
]


@pytest.mark.parametrize("make", ERRORS)
def test_an_error_answered_from_another_process_arrives_with_its_data(
    make: Callable[[], BaseException],
) -> None:
    """What an error's ``args`` do not hold (an ``OSError``'s file name, a
    ``StopIteration``'s value, a slot) arrives too: its message says the same."""
    error = make()
    arrived = pickle.loads(pickle.dumps(Raised(error))).error
    assert type(arrived) is type(error)
    assert (str(arrived), arrived.args) == (str(error), error.args)
    for name in ("filename", "errno", "value", "start", "reason", "code"):
        assert getattr(arrived, name, None) == getattr(error, name, None), name
