"""The driver's handle on one Ray worker (:class:`RayHost`) and its pending answers.

Kept apart from :mod:`._backend` (placement, spawning, checks) because it is the
per-call path. A host is given what it shares with the backend, the pickled
programs (:class:`~._programs.Programs`) and the reserve it parks its worker in
(:class:`~._reserve.Reserve`), never the backend itself. Every call goes out with ``bytes``
arguments only, which Ray passes raw (it pickles anything else).
The barrier waits for a superstep's answers with :meth:`RayFuture.wait_any`
(one ``ray.wait`` on the supervisor's thread) instead of a callback per answer,
which Ray delivers through a thread hop that costs more than the call.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from actorflow.actors._backend import HostFuture, relay_answer
from actorflow.actors._host import HostedFactory, OnAnswer
from actorflow.actors._reply import Raised
from actorflow.errors import HostLost

from ._programs import Programs
from ._reserve import Reserve
from ._runtime import kill, label, ray_module, running
from ._worker import CACHED_PROGRAMS, LoadHead

__all__ = ["RayFuture", "RayHost"]

_UNREAD: Any = object()


class RayHost:
    """A handle on one worker. Driver side; thread-safe."""

    __slots__ = (
        "_handle",
        "_in_flight",
        "_key",
        "_known",
        "_lock",
        "_programs",
        "_reserve",
        "_state",
    )

    def __init__(
        self,
        handle: Any,
        key: Hashable,
        *,
        programs: Programs,
        reserve: Reserve,
        known: Sequence[str] = (),
    ) -> None:
        self._programs = programs
        self._reserve = reserve
        self._handle = handle
        self._key = key
        self._lock = threading.Lock()
        self._in_flight = 0
        self._state = "live"  # "live", "stopped" or "lost"
        self._known: OrderedDict[str, None] = OrderedDict.fromkeys(known)
        """The digests of the programs the worker holds, in its cache's order."""

    def call(self, method: str, payload: bytes) -> RayFuture:
        if not self._enter():
            return self._refused()
        return RayFuture(self, self._handle.call.remote(method.encode(), payload))

    def relay(self, method: str, payload: bytes, then: OnAnswer) -> None:
        relay_answer(self.call(method, payload), then)

    def load_call(self, factory: HostedFactory, method: str, payload: bytes) -> RayFuture:
        digest, blob = self._programs.pickled(factory)
        with self._lock:
            # The worker's cache sees the same sequence of digests as this mirror.
            if digest in self._known:
                self._known.move_to_end(digest)
                blob = b""  # the worker has it
            else:
                self._known[digest] = None
                if len(self._known) > CACHED_PROGRAMS:
                    self._known.popitem(last=False)
        if not self._enter():
            return self._refused()
        head = LoadHead(digest, blob, label(factory) if blob else "", method)
        ref = self._handle.load_call.remote(head.pack(), payload)
        return RayFuture(self, ref)

    def unload(self) -> RayFuture:
        if not self._enter():
            return self._refused()
        return RayFuture(self, self._handle.unload.remote())

    def _enter(self) -> bool:
        """Count a call in flight; False if the worker takes no more calls."""
        with self._lock:
            if self._state != "live":
                return False
            self._in_flight += 1
            return True

    def _refused(self) -> RayFuture:
        return RayFuture.failed(self, HostLost(f"the Ray worker was {self._state}"))

    def lost(self) -> None:
        """The worker died: never call it again, and kill what may remain of it."""
        with self._lock:
            if self._state == "lost":
                return
            self._state = "lost"
        kill(self._handle)

    def stop(self) -> None:
        """Idle: unload and park the worker for reuse. Busy (a hung handler): kill it."""
        with self._lock:
            if self._state != "live":
                return
            self._state = "stopped"
            idle = self._in_flight == 0
        if idle and running() is not None:
            self._handle.unload.remote()
            if self._reserve.park(self._handle, self._key, known=tuple(self._known)):
                return
        kill(self._handle)

    @property
    def alive(self) -> bool:
        return self._state == "live"

    def pid(self) -> int:
        """The worker's process id (for tests and tools that kill a worker on purpose)."""
        return int(ray_module().get(self._handle.pid.remote(), timeout=60))


class RayFuture:
    """A pending answer from a worker, a :class:`~actorflow.actors.HostFuture`.

    ``get`` waits with ``ray.get`` itself, and :meth:`wait_any` for several at
    once; a ``concurrent.futures`` twin (a thread hop per answer) is made only
    when someone asks for a callback.
    """

    __slots__ = ("_error", "_future", "_host", "_ref", "_settled", "_value")

    def __init__(self, host: RayHost, ref: Any, error: BaseException | None = None) -> None:
        self._host = host
        self._ref = ref
        self._error = error
        self._future: concurrent.futures.Future[Any] | None = None
        self._settled = error is not None  # a call never sent is not in flight
        self._value: Any = _UNREAD
        """The answer, once :meth:`wait_any` took it from Ray."""

    @classmethod
    def failed(cls, host: RayHost, error: BaseException) -> RayFuture:
        """A call that was never sent (the worker was stopped or lost)."""
        return cls(host, None, error)

    @staticmethod
    def wait_any(futures: Sequence[HostFuture], count: int, timeout: float | None) -> list[int]:
        """Wait until ``count`` of ``futures`` (RayFutures) have their answer, or
        ``timeout`` s; returns the positions of those that have it (in order).
        On the calling thread: one ``ray.get`` (every answer) or ``ray.wait``, no
        thread hop per answer."""
        refs: dict[Any, int] = {}
        done: list[int] = []
        for i, future in enumerate(futures):
            assert isinstance(future, RayFuture)
            if future._ref is None:
                done.append(i)  # never sent: its error is its answer
            else:
                refs[future._ref] = i
        if not refs or len(done) >= count:
            return done
        ray = ray_module()
        pending = list(refs)
        if count >= len(futures):
            # Every answer wanted: one ray.get takes them all, and ``get`` then returns
            # each without asking Ray again. A wait that timed out or a call that
            # failed is sorted out by the ray.wait below, answer by answer.
            try:
                values = ray.get(pending, timeout=timeout)
            except Exception:  # noqa: BLE001 - see ray.wait below
                timeout = 0
            else:
                for ref, value in zip(pending, values, strict=True):
                    futures[refs[ref]]._value = value  # type: ignore[attr-defined]  # RayFutures
                return list(range(len(futures)))
        wanted = min(count - len(done), len(refs))
        ready, _ = ray.wait(pending, num_returns=wanted, timeout=timeout)
        done.extend(refs[ref] for ref in ready)
        return sorted(done)

    def get(self, *, timeout: float | None = None) -> Any:
        """The answer, or what the call raised (the handler's own exception; a dead
        worker as :class:`HostLost`); ``TimeoutError`` after ``timeout`` s."""
        if self._error is not None:
            raise self._error
        value = self._value
        if value is not _UNREAD:
            self._settle()
            if type(value) is Raised:
                raise value.error
            return value
        ray = ray_module()
        try:
            value = ray.get(self._ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise  # a TimeoutError: the wait timed out, the call goes on
        except Exception as exc:  # noqa: BLE001 - every failure of the call is translated, raised
            self._settle()
            raise self._translate(ray, exc) from None
        self._settle()
        if type(value) is Raised:  # the program's failure, handed back as an answer
            raise value.error
        return value

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        if self._error is not None:
            callback()
            return
        future = self._future
        if future is None:
            future = self._future = self._ref.future()

        def landed(_future: concurrent.futures.Future[Any]) -> None:
            self._settle()
            callback()

        future.add_done_callback(landed)

    def _settle(self) -> None:
        """The call is over: the worker no longer counts it (once, from any thread)."""
        host = self._host
        with host._lock:
            if self._settled:
                return
            self._settled = True
            host._in_flight -= 1

    def _translate(self, ray: Any, exc: Exception) -> BaseException:
        if isinstance(exc, ray.exceptions.RayTaskError):
            cause = exc.cause
            if isinstance(cause, BaseException):
                return cause
        if isinstance(exc, ray.exceptions.RayError):
            self._host.lost()
            error = HostLost(f"the Ray worker died: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return error
        return exc
