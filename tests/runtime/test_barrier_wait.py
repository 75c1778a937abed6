"""The barrier over futures that wait together (``wait_any``, as Ray's do): the same
outcomes as with callbacks: every answer, in landing order for ``on_answer``, deadlines
and cancels."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from actorflow.actors import HostFuture, group_wait
from actorflow.errors import ExecutorTimedOut
from actorflow.runtime.supervisor._barrier import Interrupted, collect


class Waitable:
    """A future answered by ``land``; waited for only through ``wait_any``."""

    waits = 0

    def __init__(self) -> None:
        self._landed = threading.Event()
        self._value: Any = None

    def land(self, value: Any) -> None:
        self._value = value
        self._landed.set()

    @staticmethod
    def wait_any(futures: Sequence[HostFuture], count: int, timeout: float | None) -> list[int]:
        Waitable.waits += 1
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            done = [i for i, f in enumerate(futures) if f._landed.is_set()]  # type: ignore[attr-defined]
            left = None if end is None else end - time.monotonic()
            if len(done) >= count or (left is not None and left <= 0):
                return done
            time.sleep(0.001 if left is None else min(0.001, left))

    def get(self, *, timeout: float | None = None) -> Any:
        if not self._landed.wait(timeout):
            raise TimeoutError
        if isinstance(self._value, BaseException):
            raise self._value
        return self._value

    def add_done_callback(self, callback: Any) -> None:
        raise AssertionError("futures that wait together are never asked for callbacks")


def _outcomes(futures: dict[str, Waitable], limits: dict[str, float], **kw: Any) -> dict[str, Any]:
    """collect's outcomes as executor -> (answer, error)."""
    return {e: (a, err) for e, a, err in collect(futures, limits, time.monotonic(), **kw)}


def test_only_futures_of_one_waiting_class_wait_together() -> None:
    assert group_wait([Waitable(), Waitable()]) is Waitable.wait_any
    assert group_wait([Waitable(), object()]) is None  # type: ignore[list-item]
    assert group_wait([object()]) is None  # type: ignore[list-item]


def test_every_answer_and_error_is_collected_in_one_wait() -> None:
    futures = {"b": Waitable(), "a": Waitable(), "c": Waitable()}
    futures["a"].land(b"A")
    futures["b"].land(ValueError("b failed"))
    threading.Timer(0.02, futures["c"].land, (b"C",)).start()
    Waitable.waits = 0
    outcomes = collect(futures, {}, time.monotonic())
    assert [(e, a) for e, a, _ in outcomes] == [("a", b"A"), ("b", None), ("c", b"C")]
    assert isinstance(outcomes[1][2], ValueError)
    assert Waitable.waits == 1


def test_answers_reach_on_answer_as_they_land() -> None:
    futures = {"a": Waitable(), "b": Waitable()}
    seen: list[tuple[str, bytes, int]] = []
    futures["b"].land(b"B")
    threading.Timer(0.02, futures["a"].land, (b"A",)).start()
    outcomes = collect(
        futures,
        {},
        time.monotonic(),
        on_answer=lambda e, answer, left: seen.append((e, answer, left)),
    )
    assert seen == [("b", b"B", 1), ("a", b"A", 0)]
    assert [e for e, _, _ in outcomes] == ["a", "b"]


def test_a_late_executor_times_out_and_the_others_answer() -> None:
    futures = {"slow": Waitable(), "fast": Waitable()}
    futures["fast"].land(b"F")
    outcomes = _outcomes(futures, {"slow": 0.05})
    assert outcomes["fast"] == (b"F", None)
    assert isinstance(outcomes["slow"][1], ExecutorTimedOut)


def test_a_cancel_abandons_the_executors_still_running() -> None:
    futures = {"stuck": Waitable(), "done": Waitable()}
    futures["done"].land(b"D")
    cancel = threading.Event()
    threading.Timer(0.02, cancel.set).start()
    started = time.monotonic()
    outcomes = _outcomes(futures, {}, cancel=cancel)
    assert time.monotonic() - started < 5
    assert outcomes["done"] == (b"D", None)
    assert isinstance(outcomes["stuck"][1], Interrupted)
