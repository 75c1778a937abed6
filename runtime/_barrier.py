"""The barrier: collect one superstep's answers as they arrive, within deadlines.

Answers are taken in completion order (each host future calls back when its
answer is in), so a finished executor's part can be acted on (persisted) while
slower ones still run, and each executor's timeout is measured from the moment
its batch was handed out. Outcomes are returned sorted by executor id, so what
the supervisor does with them never depends on timing.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial

from actorflow.actors import HostFuture

__all__ = ["Outcome", "TimedOut", "collect"]


class TimedOut(TimeoutError):
    """An executor did not finish its part of a superstep within its ``timeout``."""

    def __init__(self, executor: str, limit: float) -> None:
        super().__init__(f"executor {executor!r} did not finish its superstep within {limit} s")
        self.executor = executor


Outcome = tuple[str, bytes | None, BaseException | None]
"""(executor, answer, error): exactly one of answer and error is set."""


def collect(
    futures: Mapping[str, HostFuture],
    limits: Mapping[str, float | None],
    started: float,
    on_answer: Callable[[str, bytes, int], None] | None = None,
) -> list[Outcome]:
    """Wait for every future, or its deadline (``started + limit``).

    Args:
        futures: executor id -> pending answer.
        limits: executor id -> seconds allowed (None or absent: no limit).
        started: ``time.monotonic()`` when the batches were handed out.
        on_answer: called as ``on_answer(executor, answer, still_running)`` for each
            successful answer as it arrives, on the calling thread.

    Returns:
        One outcome per executor, sorted by id. A timed-out executor's error is a
        :class:`TimedOut`; its future is abandoned (its late answer is never read).
    """
    if len(futures) == 1:
        # The common case (a chain or a cycle): nothing to order, no need for callbacks.
        [(executor, future)] = futures.items()
        return [_one(executor, future, limits.get(executor), started)]
    deadlines = {
        e: started + limit for e, limit in limits.items() if limit is not None and e in futures
    }
    # The last answer to land releases ``all_in``. A caller with nothing to do per
    # answer and no deadline sleeps until then: one wake-up of this thread per
    # superstep instead of one per executor (~25 us of thread hand-off each), and
    # no per-answer bookkeeping at all.
    all_in = threading.Lock()
    all_in.acquire()
    landed = partial(_count_down, itertools.count(1).__next__, len(futures), all_in)
    if on_answer is None and not deadlines:
        for future in futures.values():
            future.add_done_callback(landed)
        all_in.acquire()
        return [_taken(executor, futures[executor]) for executor in sorted(futures)]
    # Otherwise answers are also queued as they land, to be taken in completion order.
    arrived: queue.SimpleQueue[str] = queue.SimpleQueue()
    for executor, future in futures.items():
        future.add_done_callback(partial(_landed, arrived, executor, landed))
    if on_answer is None:
        earliest = min(deadlines.values())
        # On a deadline, the loop below sorts out who is late.
        all_in.acquire(True, max(earliest - time.monotonic(), 0.0))
    outstanding = set(futures)
    outcomes: list[Outcome] = []
    while outstanding:
        pending = [deadlines[e] for e in outstanding if e in deadlines]
        wait = max(min(pending) - time.monotonic(), 0.0) if pending else None
        try:
            executor = arrived.get(timeout=wait)
        except queue.Empty:
            now = time.monotonic()
            for late in sorted(e for e in outstanding if e in deadlines and deadlines[e] <= now):
                outstanding.discard(late)
                limit = limits[late]
                assert limit is not None
                outcomes.append((late, None, TimedOut(late, limit)))
            continue
        if executor not in outstanding:
            continue  # answered after its deadline: abandoned
        outstanding.discard(executor)
        outcome = _taken(executor, futures[executor])
        outcomes.append(outcome)
        if on_answer is not None and outcome[1] is not None:
            on_answer(executor, outcome[1], len(outstanding))
    outcomes.sort(key=lambda o: o[0])
    return outcomes


def _count_down(landed: Callable[[], int], count: int, all_in: threading.Lock) -> None:
    # On the answering host's thread; count's __next__ is atomic.
    if landed() == count:
        all_in.release()


def _landed(arrived: queue.SimpleQueue[str], executor: str, count_down: Callable[[], None]) -> None:
    arrived.put(executor)  # atomic
    count_down()


def _taken(executor: str, future: HostFuture) -> Outcome:
    """The outcome of a future that has its answer."""
    try:
        return (executor, future.get(timeout=0), None)
    except Exception as exc:  # noqa: BLE001 - any failure of the call is the executor's
        return (executor, None, exc)


def _one(executor: str, future: HostFuture, limit: float | None, started: float) -> Outcome:
    remaining = None if limit is None else max(started + limit - time.monotonic(), 0.0)
    try:
        return (executor, future.get(timeout=remaining), None)
    except TimeoutError:
        assert limit is not None
        return (executor, None, TimedOut(executor, limit))
    except Exception as exc:  # noqa: BLE001 - any failure of the call is the executor's
        return (executor, None, exc)
