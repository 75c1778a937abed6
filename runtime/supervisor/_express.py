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
is left is the host's own work: the hand-off itself costs about a tell hop, the
runner ~9 us, the framing and the supervisor's settling (~5-7.5 us a superstep, on
its own thread) the rest. Each link is a ``relay`` (``HostRef.relay``): the thread
host calls the chain back itself, with no future and no callback list, ~8% less time
a superstep pinned to one CPU (30.5 against 28.0 us) and 33,770 against 35,142-35,472
supersteps/s in ``bench/run_all.py --only w1``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

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
            first = self._dispatch(superstep, target, deliveries)
            if first is None:
                self.done.release()
                return
        self._follow(first)

    def abandon(self) -> None:
        """Stop the chain where it is (the run was cancelled and a handler did not return):
        the step in flight is :attr:`stopped` with no error, and no host is called again."""
        with self._lock:
            if not self._abandoned and self.stopped is None and self._current is not None:
                self.stopped = self._current
            self._abandoned = True

    def _dispatch(self, superstep: int, target: str, deliveries: list[Delivery]) -> _Handoff | None:
        """Hand ``target`` its batch (under the lock); its answer comes to the handoff
        returned. None if the host could not be called: that step is :attr:`stopped`."""
        step = Stopped(superstep, target, deliveries, None)
        self._current = step
        handoff = _Handoff(step)
        request = StepRequest(superstep, deliveries, False, self._suffix, None, self._effects)
        try:
            self._hosts.relay(target, "step", request.packed(), partial(self._answered, handoff))
        except Exception as exc:  # noqa: BLE001 - the host could not be called: the step failed
            self.stopped = step._replace(error=exc)
            return None
        return handoff

    def _follow(self, handoff: _Handoff | None) -> None:
        """Leave each link's answer to the thread that brings it, or take it here.

        An answer that came while its link was still being dispatched (a host that
        answers at once) is not taken inside the dispatch but here, in a loop: a chain
        of such links never nests deeper.
        """
        while handoff is not None:
            if handoff.registered():
                return  # the answering host's thread takes it from here
            handoff = self._landed(handoff)

    def _answered(self, handoff: _Handoff, answer: bytes | BaseException) -> None:
        if handoff.fired(answer):
            self._follow(self._landed(handoff))

    def _landed(self, handoff: _Handoff) -> _Handoff | None:
        """Take a link's answer; the next link, dispatched, if the chain goes on."""
        # On the answering host's thread. Nothing may escape: an exception here would
        # reach the host's actor loop, not the run.
        with self._lock:
            if self._abandoned:
                return None
            step, answer = handoff.step, handoff.answer
            error: BaseException | None = None
            if isinstance(answer, BaseException):
                error = answer
            else:
                try:
                    report = StepReport.unpacked(answer)
                except Exception as exc:  # noqa: BLE001 - another version's frame: the step failed
                    error = exc
            if error is not None:  # the supervisor handles it
                self.stopped = step._replace(error=error)
                self.done.release()
                return None
            self.links.append(Link(step.superstep, step.target, step.deliveries, report))
            following = self._next(step.superstep, step.target, report)
            if following is None:
                self._current = None
                self.done.release()
            return following

    def _next(self, superstep: int, source: str, report: StepReport) -> _Handoff | None:
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
        return self._dispatch(superstep + 1, target, deliveries)


class _Handoff:
    """One dispatched link, and whether its answer came while it was still being
    dispatched (then the dispatching thread takes it, not the answering one)."""

    __slots__ = ("_lock", "_state", "answer", "step")

    _REGISTERING, _REGISTERED, _EARLY = 0, 1, 2

    def __init__(self, step: Stopped) -> None:
        self._lock = threading.Lock()
        self._state = self._REGISTERING
        self.step = step
        """The link: its superstep, executor and batch."""
        self.answer: bytes | BaseException = b""
        """The host's answer, once :meth:`fired`."""

    def registered(self) -> bool:
        """The dispatch is over: True if the answering thread will take the answer,
        False if it already came (the dispatching thread takes it)."""
        with self._lock:
            if self._state == self._EARLY:
                return False
            self._state = self._REGISTERED
            return True

    def fired(self, answer: bytes | BaseException) -> bool:
        """The answer is in: True if the answering thread takes it, False if the
        dispatching thread will."""
        with self._lock:
            self.answer = answer
            if self._state == self._REGISTERING:
                self._state = self._EARLY
                return False
            return True
