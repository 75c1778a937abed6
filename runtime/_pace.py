"""Pacing: how many supervisors of this process do their own work at once.

With the GIL, only one thread runs Python at a time, and CPython hands it on to
no thread in particular: an event loop waking for a timer or a finished run
waits until the threads ahead of it have had their turn. Each session's run is
a chain of such turns (the supervisor, then a host, then the supervisor again),
so N sessions running short handlers at once keep about N threads asking for
the GIL, and the caller's loop waits behind all of them. Running them at once
buys nothing there: the GIL serializes their work anyway.

So a supervisor holds one of :data:`SLOTS` slots while it drives its run, and
keeps it while it waits at a barrier for up to :data:`QUICK` s; a longer wait
(a handler doing I/O, sleeping or working for real), a store write, a snapshot,
a restore or a restart backoff gives the slot back until it ends, so a slow
handler or store never holds other sessions up. Measured with ``bench.loop_lag``
(20 sessions of short runs on one loop, ``MemoryStore``, 2 cores): the loop's lag
went from p50 2.7 / p90 9.0 / p99 14 ms to p50 0.4 / p90 1.2 / p99 5 ms, at the
same throughput; two slots gave p99 10 ms. Without a GIL (a free-threaded
build) nothing is paced.

Thread-safe; each thread knows whether it holds a slot.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

from actorflow._forks import forget_in_children

__all__ = ["PACE", "QUICK", "SLOTS", "Pace", "unpaced"]

P = ParamSpec("P")
R = TypeVar("R")

SLOTS = 1
"""Supervisors working at once (with a GIL)."""

QUICK = 0.002
"""Seconds a supervisor waits at a barrier before giving its slot back: a few turns
of short handlers, well under anything that waits on I/O."""

_POLL = 0.05
"""How often a run waiting for a slot looks at its cancel event."""


class Pace:
    """Slots for supervisors; ``slots=None``: no pacing at all."""

    def __init__(self, slots: int | None) -> None:
        self._count = slots
        self._slots = threading.Semaphore(slots) if slots is not None else None
        self._local = threading.local()

    def forget_parent(self) -> None:
        """In a forked child (its only thread): slots the parent's supervisors held at
        the fork are free, their threads do not exist here."""
        self._slots = threading.Semaphore(self._count) if self._count is not None else None
        self._local = threading.local()

    def holding(self) -> bool:
        """Whether the calling thread holds a slot."""
        return bool(getattr(self._local, "held", False))

    @contextmanager
    def run(self, cancel: threading.Event) -> Iterator[None]:
        """Hold a slot for the calling thread's run.

        Waits for a free slot; a run cancelled while it waits goes on without one
        (it stops at its first barrier anyway).
        """
        slots = self._slots
        if slots is None or self.holding():
            yield
            return
        while not slots.acquire(timeout=_POLL):
            if cancel.is_set():
                yield
                return
        self._local.held = True
        try:
            yield
        finally:
            if self._local.held:
                self._local.held = False
                slots.release()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give the calling thread's slot back (if it holds one) around a wait."""
        slots = self._slots
        if slots is None or not self.holding():
            yield
            return
        self._local.held = False
        slots.release()
        try:
            yield
        finally:
            # Holders give slots back at their next wait, within a stretch of work.
            slots.acquire()
            self._local.held = True

    def wait(self, lock: threading.Lock) -> bool:
        """Acquire ``lock`` within :data:`QUICK` s keeping the slot; False if not by then."""
        return lock.acquire(True, QUICK) if self.holding() else False


_gil: bool = getattr(sys, "_is_gil_enabled", lambda: True)()

PACE = Pace(SLOTS if _gil else None)
"""The process's supervisor slots."""
forget_in_children(PACE)


def unpaced(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` runs with the caller's slot given back (it waits on hosts, stores or time)."""

    @wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with PACE.released():
            return fn(*args, **kwargs)

    return call
