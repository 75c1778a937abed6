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
from collections.abc import Callable, Collection, Mapping
from functools import partial

from actorflow.actors import HostFuture, WaitAny, group_wait
from actorflow.errors import ExecutorTimedOut
from actorflow.runtime._pace import PACE

__all__ = ["CANCEL_GRACE", "Interrupted", "Outcome", "TimedOut", "collect", "wait_released"]


TimedOut = ExecutorTimedOut
"""The error of an executor past its deadline (the public :class:`ExecutorTimedOut`)."""

CANCEL_GRACE = 0.25
"""Seconds a cancelled barrier still waits for handlers before abandoning them.

Long enough that a cancel in the middle of ordinary handlers stops at the barrier
they reach; short enough that a run whose handler never returns stops within a
second of being asked (KeyboardInterrupt, a cancelled task, ``close()``)."""

_POLL = 0.05
"""How often a barrier waiting without a deadline looks at its cancel event."""


class Interrupted(Exception):
    """The run was cancelled while this executor was still in its handler: abandoned."""

    def __init__(self, executor: str) -> None:
        super().__init__(executor)
        self.executor = executor


class _Stop:
    """When a cancelled barrier gives up: ``CANCEL_GRACE`` after it first saw the cancel."""

    __slots__ = ("_cancel", "at")

    def __init__(self, cancel: threading.Event | None) -> None:
        self._cancel = cancel
        self.at: float | None = None

    def end(self, deadline: float | None) -> tuple[float | None, float | None]:
        """(time to give up at, longest single wait) given the caller's own ``deadline``."""
        if self.at is None and self._cancel is not None and self._cancel.is_set():
            self.at = time.monotonic() + CANCEL_GRACE
        ends = [t for t in (deadline, self.at) if t is not None]
        end = min(ends) if ends else None
        watching = self._cancel is not None and self.at is None
        return end, (_POLL if watching else None)

    def wait(self, lock: threading.Lock, deadline: float | None) -> bool:
        """Acquire ``lock`` unless ``deadline`` or the cancel's grace passes first.

        A supervisor keeps its slot (see ``_pace``) for a quick answer only.
        """
        if PACE.wait(lock):
            return True
        with PACE.released():
            return self._wait(lock, deadline)

    def _wait(self, lock: threading.Lock, deadline: float | None) -> bool:
        while True:
            end, poll = self.end(deadline)
            timeout = -1.0
            if end is not None:
                timeout = end - time.monotonic()
                if timeout <= 0:
                    return lock.acquire(False)
            if poll is not None:
                timeout = poll if timeout < 0 else min(timeout, poll)
            if lock.acquire(True, timeout):
                return True

    @property
    def over(self) -> bool:
        """Whether the cancel's grace has run out."""
        return self.at is not None and time.monotonic() >= self.at


Outcome = tuple[str, bytes | None, BaseException | None]
"""(executor, answer, error): exactly one of answer and error is set."""


def collect(
    futures: Mapping[str, HostFuture],
    limits: Mapping[str, float | None],
    started: float,
    on_answer: Callable[[str, bytes, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> list[Outcome]:
    """Wait for every future, or its deadline (``started + limit``), or a cancel.

    Args:
        futures: executor id -> pending answer.
        limits: executor id -> seconds allowed (None or absent: no limit).
        started: ``time.monotonic()`` when the batches were handed out.
        on_answer: called as ``on_answer(executor, answer, still_running)`` for each
            successful answer as it arrives, on the calling thread.
        cancel: once set, the barrier waits at most :data:`CANCEL_GRACE` more
            seconds; executors still in their handlers then are abandoned.

    Returns:
        One outcome per executor, sorted by id. A timed-out executor's error is an
        :class:`ExecutorTimedOut`, an abandoned one's an :class:`Interrupted`; their
        futures are abandoned (a late answer is never read).
    """
    stop = _Stop(cancel)
    together = group_wait(futures.values())
    if together is not None:
        # Answers from other processes: the slot (``_pace``) goes to other sessions
        # of this process meanwhile.
        with PACE.released():
            return _collect_waiting(
                together, futures, limits, started, on_answer=on_answer, stop=stop
            )
    finished: set[str] = set()
    if len(futures) == 1:
        # The common case (a chain or a cycle): nothing to order, no need for a queue.
        [(executor, future)] = futures.items()
        limit = limits.get(executor)
        done = threading.Lock()
        done.acquire()
        future.add_done_callback(done.release)
        if stop.wait(done, None if limit is None else started + limit):
            return [_taken(executor, future)]
        if stop.over:
            return [(executor, None, Interrupted(executor))]
        assert limit is not None
        return [(executor, None, TimedOut(executor, limit))]
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
        for executor, future in futures.items():
            future.add_done_callback(partial(_finished, finished, executor, landed))
        if stop.wait(all_in, None):
            return [_taken(executor, futures[executor]) for executor in sorted(futures)]
        return [
            _taken(e, futures[e]) if e in finished else (e, None, Interrupted(e))
            for e in sorted(futures)
        ]
    # Otherwise answers are also queued as they land, to be taken in completion order.
    with PACE.released():
        return _in_order(
            futures,
            limits,
            stop,
            deadlines=deadlines,
            on_answer=on_answer,
            all_in=all_in,
            landed=landed,
        )


def wait_released(lock: threading.Lock, cancel: threading.Event | None) -> bool:
    """Acquire ``lock`` (no deadline), giving up :data:`CANCEL_GRACE` s after a cancel.

    Returns:
        Whether it was acquired; False: the run was cancelled and it was not in time.
    """
    return _Stop(cancel).wait(lock, None)


def _in_order(
    futures: Mapping[str, HostFuture],
    limits: Mapping[str, float | None],
    stop: _Stop,
    *,
    deadlines: dict[str, float],
    on_answer: Callable[[str, bytes, int], None] | None,
    all_in: threading.Lock,
    landed: Callable[[], None],
) -> list[Outcome]:
    """``collect`` with deadlines or ``on_answer``: answers taken as they land."""
    arrived: queue.SimpleQueue[str] = queue.SimpleQueue()
    for executor, future in futures.items():
        future.add_done_callback(partial(_landed, arrived, executor, landed))
    if on_answer is None:
        # On a deadline, the loop below sorts out who is late.
        stop.wait(all_in, min(deadlines.values()))
    outstanding = set(futures)
    outcomes: list[Outcome] = []
    while outstanding:
        pending = [deadlines[e] for e in outstanding if e in deadlines]
        end, poll = stop.end(min(pending) if pending else None)
        wait = None if end is None else max(end - time.monotonic(), 0.0)
        if poll is not None:
            wait = poll if wait is None else min(wait, poll)
        try:
            executor = arrived.get(timeout=wait)
        except queue.Empty:
            if stop.over:
                outcomes.extend((e, None, Interrupted(e)) for e in sorted(outstanding))
                break
            for late in _overdue(outstanding, deadlines, limits):
                outstanding.discard(late[0])
                outcomes.append(late)
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


def _collect_waiting(
    wait: WaitAny,
    futures: Mapping[str, HostFuture],
    limits: Mapping[str, float | None],
    started: float,
    *,
    on_answer: Callable[[str, bytes, int], None] | None,
    stop: _Stop,
) -> list[Outcome]:
    """:func:`collect` for futures that wait together on this thread (``wait_any``).

    One wait for every answer (one per answer with ``on_answer``, taken as they
    land), cut short by the nearest deadline and, while a cancel may come, every
    :data:`_POLL` seconds.
    """
    deadlines = {
        e: started + limit for e, limit in limits.items() if limit is not None and e in futures
    }
    outstanding = list(futures)
    outcomes: list[Outcome] = []
    while outstanding:
        pending = [deadlines[e] for e in outstanding if e in deadlines]
        end, poll = stop.end(min(pending) if pending else None)
        timeout = None if end is None else max(end - time.monotonic(), 0.0)
        if poll is not None:
            timeout = poll if timeout is None else min(timeout, poll)
        count = 1 if on_answer is not None else len(outstanding)
        landed = wait([futures[e] for e in outstanding], count, timeout)
        for executor in [outstanding[i] for i in landed]:
            outstanding.remove(executor)
            outcome = _taken(executor, futures[executor])
            outcomes.append(outcome)
            if on_answer is not None and outcome[1] is not None:
                on_answer(executor, outcome[1], len(outstanding))
        if not outstanding or landed:
            continue
        if stop.over:
            outcomes.extend((e, None, Interrupted(e)) for e in sorted(outstanding))
            break
        for late in _overdue(outstanding, deadlines, limits):
            outstanding.remove(late[0])
            outcomes.append(late)
    outcomes.sort(key=lambda o: o[0])
    return outcomes


def _overdue(
    outstanding: Collection[str],
    deadlines: Mapping[str, float],
    limits: Mapping[str, float | None],
) -> list[Outcome]:
    """The time-outs of the executors in ``outstanding`` whose deadline has passed."""
    now = time.monotonic()
    late = sorted(e for e in outstanding if e in deadlines and deadlines[e] <= now)
    return [(e, None, TimedOut(e, _limit(limits, e))) for e in late]


def _limit(limits: Mapping[str, float | None], executor: str) -> float:
    limit = limits[executor]
    assert limit is not None  # it has a deadline
    return limit


def _count_down(landed: Callable[[], int], count: int, all_in: threading.Lock) -> None:
    # On the answering host's thread; count's __next__ is atomic.
    if landed() == count:
        all_in.release()


def _finished(finished: set[str], executor: str, count_down: Callable[[], None]) -> None:
    finished.add(executor)  # atomic
    count_down()


def _landed(arrived: queue.SimpleQueue[str], executor: str, count_down: Callable[[], None]) -> None:
    arrived.put(executor)  # atomic
    count_down()


def _taken(executor: str, future: HostFuture) -> Outcome:
    """The outcome of a future that has its answer."""
    try:
        return (executor, future.get(timeout=0), None)
    except Exception as exc:  # noqa: BLE001 - any failure of the call is the executor's
        return (executor, None, exc)
