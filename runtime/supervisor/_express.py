"""Express supersteps: a run of one-executor supersteps handed from host to host.

In a chain or a cycle (W1), every superstep runs one executor, and the normal path
costs two thread hand-offs per superstep (the supervisor gives the host its batch,
the host gives the report back) plus the supervisor's own bookkeeping in between.
When the supervisor has nothing to do between two such supersteps (no barrier to
checkpoint, no restart policy to snapshot for, no tracing, no deadline: the
driver's ``_expressible``), the host that finished superstep k hands superstep k+1
to the next host itself: the report's sends, all to one executor, become that
executor's batch, framed as bytes as ever. The supervisor sleeps meanwhile; when
the chain stops, it settles each superstep's report in order, exactly as if it had
driven them one by one (same events, same routing, same state, same journals).

A chain stops at the first superstep that needs the supervisor: sends to more than
one executor or to a fan-in; no sends; a superstep that is not expressible; a
failed step; the run's superstep budget; a cancel; or :data:`WINDOW` seconds, so
that a stream's consumer hears of supersteps at least that often.

Isolation is unchanged: each executor's state stays in its host, every boundary
carries bytes, and supersteps stay bulk-synchronous (one executor runs at a time).

Measured on 2 cores (``python -m bench.w1``, its tell floor sampled in turn): W1
went from 10,200-13,000 to 14,200-20,500 supersteps/s against a floor of
~70,000 hops/s, and from ~3 voluntary context switches a superstep to ~1.2. What
is left is the host's own work: the hand-off itself costs about a tell hop
(~15 us with a future and a callback), the runner ~9 us, the framing and the
supervisor's settling (~7.5 us a superstep, on its own thread) the rest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from actorflow.actors import HostFuture
from actorflow.runtime._wire import SINGLE, Delivery, StepReport, StepRequest

from ._hosts import Hosts

__all__ = ["WINDOW", "Chain", "Link", "Stopped"]

WINDOW = 0.005
"""Seconds a chain runs before it hands back to the supervisor."""

MAX_LINKS = 256
"""Supersteps a chain runs at most (a bound on the supervisor's catching up, too)."""


class Link(NamedTuple):
    """One superstep the chain ran: its executor, the batch it got and its report."""

    superstep: int
    target: str
    deliveries: list[Delivery]
    report: StepReport


class Stopped(NamedTuple):
    """The superstep a chain did not complete: its executor, its batch and why."""

    superstep: int
    target: str
    deliveries: list[Delivery]
    error: BaseException | None
    """What the step raised; None when it is still running (the chain was abandoned)."""


class Chain:
    """One chain of one-executor supersteps, from its first dispatch to its end.

    Its steps run on the hosts' threads, one after another, each under ``_lock``;
    the supervisor, meanwhile, only waits on :attr:`done`. Until the chain is done
    or abandoned, the hosts (:class:`Hosts`) are called from the host that holds
    the chain, never from the supervisor: the two never touch them at once.
    """

    def __init__(
        self,
        hosts: Hosts,
        *,
        may_run: Callable[[int, str], bool],
        suffix: str,
        effects: list[Any],
        cancel: threading.Event | None,
        budget: int,
    ) -> None:
        self._hosts = hosts
        self._may_run = may_run
        """``may_run(superstep, executor)``: whether the chain may run that superstep."""
        self._suffix = suffix
        self._effects = effects
        self._cancel = cancel
        self._budget = min(budget, MAX_LINKS)
        self._lock = threading.Lock()
        self._ends = 0.0
        self._abandoned = False
        self.links: list[Link] = []
        """The supersteps completed, in order."""
        self.stopped: Stopped | None = None
        """The superstep that did not complete, if one did not (a failure, or abandoned)."""
        self._current: Stopped | None = None
        self.done = threading.Lock()
        """Released once the chain has ended (its links and ``stopped`` are final)."""
        self.done.acquire()

    def start(self, superstep: int, target: str, deliveries: list[Delivery]) -> None:
        """Hand ``target`` its batch of ``superstep``: the chain's first link."""
        self._ends = time.monotonic() + WINDOW
        with self._lock:
            try:
                future = self._call(superstep, target, deliveries)
            except Exception as exc:  # noqa: BLE001 - the host could not be called: the step failed
                self.stopped = Stopped(superstep, target, deliveries, exc)
                self.done.release()
                return
        self._follow((future, superstep, target, deliveries))

    def abandon(self) -> None:
        """Stop the chain where it is (the run was cancelled and a handler did not return):
        the step in flight is :attr:`stopped` with no error, and no host is called again."""
        with self._lock:
            if not self._abandoned and self.stopped is None and self._current is not None:
                self.stopped = self._current
            self._abandoned = True

    def _call(self, superstep: int, target: str, deliveries: list[Delivery]) -> HostFuture:
        self._current = Stopped(superstep, target, deliveries, None)
        request = StepRequest(superstep, deliveries, False, self._suffix, None, self._effects)
        return self._hosts.call(target, "step", request.packed())

    def _follow(self, following: _Step | None) -> None:
        """Wait for each link's answer by a callback, then take the next link.

        A callback that runs at once (the answer was already in) is not followed from
        inside itself but here, in a loop: a chain of such links never nests deeper.
        """
        while following is not None:
            handoff = _Handoff()
            following[0].add_done_callback(partial(self._answered, handoff, following))
            if handoff.registered():
                return  # the answering host's thread takes it from here
            following = self._landed(*following)

    def _answered(self, handoff: _Handoff, step: _Step) -> None:
        if handoff.fired():
            self._follow(self._landed(*step))

    def _landed(
        self, future: HostFuture, superstep: int, target: str, deliveries: list[Delivery]
    ) -> _Step | None:
        """Take a link's answer; the next link, dispatched, if the chain goes on."""
        # On the answering host's thread. Nothing may escape: an exception here would
        # reach the host's actor loop, not the run.
        with self._lock:
            if self._abandoned:
                return None
            try:
                report = StepReport.unpacked(future.get(timeout=0))
            except Exception as exc:  # noqa: BLE001 - the step failed: the supervisor handles it
                self.stopped = Stopped(superstep, target, deliveries, exc)
                self.done.release()
                return None
            self.links.append(Link(superstep, target, deliveries, report))
            following = self._next(superstep, target, report)
            if following is None:
                self._current = None
                self.done.release()
            return following

    def _next(self, superstep: int, source: str, report: StepReport) -> _Step | None:
        """The next link, dispatched, if ``report`` leads to a superstep of one executor
        the chain may run (under the lock)."""
        sends = report.sends
        if not sends or len(self.links) >= self._budget or time.monotonic() >= self._ends:
            return None
        if self._cancel is not None and self._cancel.is_set():
            return None
        target = sends[0][0]
        for dst, group, _payload in sends:
            if dst != target or group != SINGLE:
                return None
        if not self._may_run(superstep + 1, target):
            return None
        deliveries = [[source, SINGLE, payload] for _dst, _group, payload in sends]
        try:
            future = self._call(superstep + 1, target, deliveries)
        except Exception as exc:  # noqa: BLE001 - the host could not be called: that step failed
            self.stopped = Stopped(superstep + 1, target, deliveries, exc)
            return None
        return future, superstep + 1, target, deliveries


_Step = tuple[HostFuture, int, str, list[Delivery]]
"""A dispatched link: its pending answer, superstep, executor and batch."""


class _Handoff:
    """Whether a link's answer came while its callback was still being registered."""

    __slots__ = ("_lock", "_state")

    _REGISTERING, _REGISTERED, _EARLY = 0, 1, 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = self._REGISTERING

    def registered(self) -> bool:
        """Registration is over: True if the callback will take the answer, False if it
        already came (the registering thread takes it)."""
        with self._lock:
            if self._state == self._EARLY:
                return False
            self._state = self._REGISTERED
            return True

    def fired(self) -> bool:
        """The answer is in: True if the callback takes it, False if the registering
        thread will."""
        with self._lock:
            if self._state == self._REGISTERING:
                self._state = self._EARLY
                return False
            return True
