"""The relay: a chain of one-executor supersteps driven from the hosts' own threads.

A superstep is two thread hand-offs when the supervisor drives it: the supervisor
wakes the host with its batch, the host wakes the supervisor with its answer. On a
cloud VM each wake-up of a sleeping thread can cost half a millisecond (see
``bench.wake_latency``), so a chain of one-executor supersteps (a cycle, a
pipeline: W1) ran at the pace of the scheduler, not of the handlers.

The relay runs the supervisor's own code for such supersteps on the thread of the
host whose answer ended the last one: the answer's future calls back on that
thread, which closes the superstep (routing, events: the driver's ``close``) and
opens and sends the next, so the next host is the only thread woken. One hand-off
a one-executor superstep, as two bare actors passing a message on with ``tell``. Measured with
``bench.w1`` (W1 against that tell floor, interleaved): see ``docs/architecture.md``.

The host whose answer comes last closes a superstep of several executors (a
fan-out, a fan-in): each answer's callback counts down, and the last one goes on.
Only what needs nothing but the answers is relayed (the driver's ``relays``): no
store, no tracing, no deadline. Everything else gives the baton back to
the supervisor's thread, with the superstep in flight if there is one: a failed
answer (restarts and rollbacks restore hosts, which must not be asked from a host's
own thread), a cancel (the supervisor takes the superstep in flight over and waits
for it as its barrier would), the superstep limit, a store. One thread holds the
baton at a time; the futures' completion orders their work, so the driver's state
is never touched by two threads at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from actorflow.actors import HostFuture, ReplyFuture
from actorflow.runtime._pace import PACE
from actorflow.runtime._wire import StepReport

from ._job import RunJob

__all__ = ["Opened", "Relay", "Sent", "Superstepper"]

Sent = tuple[dict[str, HostFuture], float]
"""A superstep's parts handed out: each target's answer to come, and when they left."""

_POLL = 0.05
"""How often the supervisor, waiting for the baton, looks at the run's cancel event."""


class Opened(NamedTuple):
    """A superstep taken out of the run state and announced, not yet run."""

    superstep: int
    targets: list[str]
    inbox: dict[str, list[Any]]
    announced: list[bool]
    """A cell: whether the caller heard of the superstep (set later with a deferred cut)."""
    on_sent: Callable[[], None] | None
    """To call once every host has its part (a deferred cut, then the announcement)."""
    want_snapshot: bool
    persist: bool
    checkpoint_now: bool


class Superstepper(Protocol):
    """What the relay needs of the driver."""

    def relays(self, job: RunJob, steps: int) -> bool:
        """Whether the next superstep can be relayed (``steps``: run so far)."""
        ...

    def open_superstep(self, job: RunJob) -> Opened:
        """Take the next superstep out of the state and announce it."""
        ...

    def send(
        self,
        superstep: int,
        targets: list[str],
        inbox: dict[str, list[Any]],
        *,
        want_snapshot: bool,
    ) -> Sent:
        """Hand each target its part."""
        ...

    def close_superstep(self, job: RunJob, opened: Opened, sent: Sent | None = None) -> None:
        """Take the answers, recover, route, checkpoint."""
        ...


class Relay:
    """One relayed chain of supersteps of one run (see the module docstring)."""

    def __init__(self, stepper: Superstepper, job: RunJob, steps: int) -> None:
        self._stepper = stepper
        self._job = job
        self.steps = steps
        """Supersteps the run has taken, the relayed ones included."""
        self.in_flight: tuple[Opened, Sent | None] | None = None
        """The superstep handed back unfinished (or taken over): the supervisor closes it."""
        self.error: BaseException | None = None
        """What closing a superstep on a host's thread raised (re-raised by the supervisor)."""
        self._lock = threading.Lock()
        self._back = threading.Lock()
        self._back.acquire()  # released when the baton comes back to the supervisor
        self._owner: str | None = None
        """Who handles the answer in flight: None (nobody yet), "relay" or "supervisor"."""
        self._waiting = 0
        """Answers of the superstep in flight still to come."""
        self._given_back = False
        self._registering = False
        self._landed_early = False

    def run(self) -> None:
        """Relay from the calling (supervisor) thread; returns once the baton is back."""
        self._advance()
        if PACE.wait(self._back):
            return
        with PACE.released():  # the hosts' threads do the work meanwhile
            cancel = self._job.cancel
            while not self._back.acquire(True, _POLL):
                if cancel.is_set() and self._take_over():
                    return

    def _advance(self) -> None:
        """Open and send supersteps while they can be relayed (the baton holder's thread)."""
        stepper, job = self._stepper, self._job
        while True:
            if not stepper.relays(job, self.steps):
                self._give_back()
                return
            self.steps += 1
            opened = stepper.open_superstep(job)
            try:
                sent = stepper.send(
                    opened.superstep,
                    opened.targets,
                    opened.inbox,
                    want_snapshot=opened.want_snapshot,
                )
            except Exception:  # noqa: BLE001 - the supervisor sends it again and handles it
                self.in_flight = (opened, None)
                self._give_back()
                return
            self.in_flight = (opened, sent)
            futures = list(sent[0].values())
            if not all(isinstance(f, ReplyFuture) for f in futures):
                self._give_back()  # not a thread host's: no thread to call back on
                return
            with self._lock:
                self._owner = None
                self._waiting = len(futures)
                self._registering = True
            for future in futures:
                future.add_done_callback(self._landed)
            with self._lock:
                self._registering = False
                if self._owner is not None or not self._landed_early:
                    return  # the last host's thread goes on (or the supervisor took over)
                self._landed_early = False
                self._owner = "relay"
            if not self._close(futures):
                return

    def _landed(self) -> None:
        """An answer is in (on its host's thread, or in ``add_done_callback``)."""
        with self._lock:
            if self._owner == "supervisor":
                return  # taken over: the supervisor reads the answers itself
            self._waiting -= 1
            if self._waiting:
                return  # the last one closes the superstep
            if self._registering:
                self._landed_early = True  # the registering thread goes on
                return
            self._owner = "relay"
        try:
            assert self.in_flight is not None and self.in_flight[1] is not None
            if self._close(list(self.in_flight[1][0].values())):
                self._advance()
        except BaseException as exc:  # noqa: BLE001 - never into the host's own loop
            self.error = exc
            self._give_back()

    def _close(self, futures: list[HostFuture]) -> bool:
        """Close the superstep in flight here if every answer is a report; whether to go on."""
        try:
            for future in futures:
                StepReport.unpacked(future.get(timeout=0))
        except Exception:  # noqa: BLE001 - a failure: restarting is the supervisor's work
            self._give_back()
            return False
        assert self.in_flight is not None
        opened, sent = self.in_flight
        self.in_flight = None
        try:
            self._stepper.close_superstep(self._job, opened, sent)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the supervisor's thread
            self.error = exc
            self._give_back()
            return False
        return True

    def _give_back(self) -> None:
        """Hand the baton back to the supervisor's thread (once)."""
        with self._lock:
            if self._given_back:
                return
            self._given_back = True
        self._back.release()

    def _take_over(self) -> bool:
        """Take the superstep in flight over (a cancel); False while a host's thread has it."""
        with self._lock:
            if self.in_flight is None or self._owner is not None:
                return False
            self._owner = "supervisor"
            return True
