"""Actor backends: where executor hosts live, and the warm pool that reuses them.

The runtime talks to hosts only through :class:`HostRef` (load a program, call it
with bytes, get a :class:`HostFuture`), so a backend is free to put a host on a
thread (:class:`ThreadBackend`, the default) or elsewhere.

Starting a pykka actor costs ~180 us and stopping ~130 us; a run of ten
executors would spend more on that than on its work. So hosts are pooled: a run
borrows warm hosts, loads fresh programs into them (no state survives a run: the
program is rebuilt from blueprint bytes), and gives them back. The pool is
bounded, so the thread count does not grow with the number of runs.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

import pykka

from actorflow._forks import forget_in_children

from ._host import (
    UNLOAD,
    Call,
    ExecutorHost,
    HostedFactory,
    HostMessage,
    LoadCall,
    OnAnswer,
    Relay,
)
from ._reply import Raised, ReplyFuture

__all__ = [
    "ActorBackend",
    "HostFuture",
    "HostPool",
    "HostProxy",
    "HostRef",
    "OnAnswer",
    "ThreadBackend",
    "WaitAny",
    "group_wait",
    "relay_answer",
]


class HostFuture(Protocol):
    """The pending answer of one host call.

    A future class may also offer ``wait_any(futures, count, timeout) -> positions``
    (a static method; see :data:`WaitAny`): the barrier then waits for a superstep's
    answers on its own thread with it, instead of a callback per answer. Ray's
    callbacks cost a thread hop each, more than the call itself; threads' do not.
    """

    def get(self, *, timeout: float | None = None) -> Any:
        """Wait at most ``timeout`` seconds; raise what the call raised, or ``TimeoutError``."""

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the answer (or error) is in; at once if it already is."""


WaitAny = Callable[[Sequence[HostFuture], int, float | None], list[int]]
"""``wait_any(futures, count, timeout)``: block until ``count`` of ``futures`` have
their answer, or ``timeout`` seconds (None: no limit) pass; return the positions of
those that have it, ascending. Their ``get`` then returns at once."""


def group_wait(futures: Iterable[HostFuture]) -> WaitAny | None:
    """The ``wait_any`` that waits for all of ``futures`` together, if they are of one
    class that offers one; None otherwise (wait with ``add_done_callback``)."""
    kinds = {type(future) for future in futures}
    if len(kinds) != 1:
        return None
    wait: WaitAny | None = getattr(kinds.pop(), "wait_any", None)
    return wait


def relay_answer(future: HostFuture, then: OnAnswer) -> None:
    """Hand ``then`` the answer of ``future`` once it is in (see :meth:`HostRef.relay`):
    the relay of a host whose calls answer through futures."""

    def landed() -> None:
        try:
            answer = future.get(timeout=0)
        except BaseException as exc:  # noqa: BLE001 - what the call raised is its answer
            then(exc)
            return
        then(answer)

    future.add_done_callback(landed)


class HostRef(Protocol):
    """A handle on one executor host."""

    def call(self, method: str, payload: bytes) -> HostFuture:
        """Call the loaded program: bytes in, bytes out."""

    def relay(self, method: str, payload: bytes, then: OnAnswer) -> None:
        """Call the loaded program and hand ``then`` its answer: the bytes, or what the
        call raised. For a caller that does nothing but pass the answer on (an express
        chain's next link): a host that can call ``then`` itself saves the future and
        its callback (:func:`relay_answer` gives the same through :meth:`call`).

        ``then`` runs on any thread, perhaps before ``relay`` returns, and must not
        raise. Exceptions ``relay`` itself raises mean the host could not be called.
        """

    def load_call(self, factory: HostedFactory, method: str, payload: bytes) -> HostFuture:
        """Load a program from ``factory``, then call it, in one round trip."""

    def unload(self) -> HostFuture:
        """Stop the loaded program, keeping the host for reuse."""

    def stop(self) -> None:
        """Stop the host for good. Never blocks on a hung program."""

    @property
    def alive(self) -> bool:
        """Whether the host can still take calls."""


class HostProxy:
    """A :class:`HostRef` that forwards every call to another host.

    The base of the wrappers testing tools put around a session's hosts
    (``Session.wrap_host``): a subclass overrides what it changes, such as ``call``.
    """

    __slots__ = ("_host",)

    def __init__(self, host: HostRef) -> None:
        self._host = host

    def call(self, method: str, payload: bytes) -> HostFuture:
        return self._host.call(method, payload)

    def relay(self, method: str, payload: bytes, then: OnAnswer) -> None:
        # Through this proxy's own call, which a subclass may change.
        relay_answer(self.call(method, payload), then)

    def load_call(self, factory: HostedFactory, method: str, payload: bytes) -> HostFuture:
        return self._host.load_call(factory, method, payload)

    def unload(self) -> HostFuture:
        return self._host.unload()

    def stop(self) -> None:
        self._host.stop()

    @property
    def alive(self) -> bool:
        return self._host.alive


class ActorBackend(Protocol):
    """Creates executor hosts.

    Hosts are placed per executor (a GPU-bound executor needs a GPU host), so a
    backend says which hosts are interchangeable (:meth:`placement`), and checks,
    before any host runs a program, that its hosts can build every program at all
    (:meth:`check`: code that a remote worker cannot import fails there, naming
    the class, instead of as a run failure later).
    """

    def spawn(self, executor: str) -> HostRef:
        """Start one new host fit to run ``executor``'s program."""

    def placement(self, executor: str) -> Hashable:
        """A key: hosts spawned for executors with equal keys are interchangeable."""

    def check(self, factories: Mapping[str, HostedFactory]) -> None:
        """Raise if this backend's hosts cannot build these programs (executor id ->
        factory). Called when a session first starts its hosts; cheap when repeated."""


class _ThreadHost:
    """A host on its own daemon thread (a pykka ``ThreadingActor``), started by its first call.

    A session borrows a host for every executor when it starts, but a run may reach
    only a few of them (a resumed session's next superstep often runs one): the
    thread (~180 us to start, and GIL time the running ones then lack) starts with
    the host's first message, so a host never called costs an object. Calls come
    from the one thread driving the host's run, ``stop`` from any thread: the lock
    orders a first start against a stop, so a stopped host never starts.
    """

    __slots__ = ("_lock", "_ref", "_stopped")

    def __init__(self) -> None:
        self._ref: pykka.ActorRef[ExecutorHost] | None = None
        self._stopped = False
        self._lock = threading.Lock()

    def call(self, method: str, payload: bytes) -> HostFuture:
        return self._ask(Call(method, payload))

    def relay(self, method: str, payload: bytes, then: OnAnswer) -> None:
        """A :class:`Relay` told to the host, which calls ``then`` on its thread: no
        future, no callback. Measured on W1 (pinned to one CPU): ~8% less time a
        superstep than an ask whose future calls back (see ``bench/README.md``)."""
        ref = self._ref
        if ref is None:  # its first call starts it (or it was stopped before it ran)
            relay_answer(self.call(method, payload), then)
            return
        try:
            ref.tell(Relay(method, payload, then))
        except pykka.ActorDeadError as exc:
            then(exc)

    def load_call(self, factory: HostedFactory, method: str, payload: bytes) -> HostFuture:
        return self._ask(LoadCall(factory, method, payload))

    def unload(self) -> HostFuture:
        if self._ref is None and not self._stopped:
            done = ReplyFuture()  # never started: no program to unload
            done.set(None)
            return done
        return self._ask(UNLOAD)

    def _ask(self, message: HostMessage) -> ReplyFuture:
        ref = self._ref
        if ref is None:
            with self._lock:
                if self._ref is None and not self._stopped:
                    self._ref = ExecutorHost.start()
                ref = self._ref
            if ref is None:  # stopped before it ever ran: answer as a stopped actor would
                failed = ReplyFuture()
                failed.set(Raised(pykka.ActorDeadError("the executor host was stopped")))
                return failed
        # An ExecutorHost's asks return ReplyFutures (LeanActor), which are HostFutures.
        return cast(ReplyFuture, ref.ask(message, block=False))

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            ref = self._ref
        if ref is not None:
            # block=False: a host stuck in a hung handler must not hang whoever stops
            # it; it is a daemon thread and stops as soon as the handler returns.
            ref.stop(block=False)

    @property
    def alive(self) -> bool:
        ref = self._ref
        return not self._stopped if ref is None else bool(ref.is_alive())


class ThreadBackend:
    """The default backend: every host is a pykka actor on its own daemon thread.

    Threads share this process's code, so every program builds and every host is
    like every other.
    """

    def spawn(self, executor: str) -> HostRef:
        """A new host; its thread starts with its first call (see ``_ThreadHost``)."""
        return _ThreadHost()

    def placement(self, executor: str) -> Hashable:
        """Every thread host suits every executor."""
        return None

    def check(self, factories: Mapping[str, HostedFactory]) -> None:
        """Nothing to check: the programs' code is this process's."""


_LIVE_POOLS: weakref.WeakSet[HostPool] = weakref.WeakSet()


class HostPool:
    """A bounded set of idle, warm hosts shared by the runs of one workflow.

    Thread-safe. ``acquire`` hands out distinct hosts (concurrent runs never share
    one), each fit for its executor's placement; ``release`` keeps at most
    ``max_idle`` and stops the rest. ``close`` stops every idle host; hosts still
    lent out are stopped when given back.
    """

    def __init__(self, backend: ActorBackend, max_idle: int = 64) -> None:
        self._backend = backend
        self._max_idle = max_idle
        self._idle: dict[Hashable, list[HostRef]] = {}
        self._placed: dict[int, Hashable] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._closed = False
        _LIVE_POOLS.add(self)
        forget_in_children(self)

    @property
    def backend(self) -> ActorBackend:
        """The backend that spawns this pool's hosts."""
        return self._backend

    def acquire(self, executors: Sequence[str]) -> list[HostRef]:
        """Borrow one host per executor (in order), starting new ones when too few are idle."""
        backend = self._backend
        keys = [backend.placement(e) for e in executors]
        taken: list[HostRef | None] = []
        with self._lock:
            for key in keys:
                idle = self._idle.get(key)
                taken.append(idle.pop() if idle else None)
                if idle is not None and not idle:
                    del self._idle[key]
            self._count -= sum(host is not None for host in taken)
        hosts: list[HostRef] = []
        for executor, key, warm in zip(executors, keys, taken, strict=True):
            if warm is not None and warm.alive:
                hosts.append(warm)
                continue
            host = backend.spawn(executor)
            with self._lock:
                self._placed[id(host)] = key
            hosts.append(host)
        return hosts

    def release(self, hosts: list[HostRef]) -> None:
        """Give hosts back. Their programs must already be unloaded."""
        surplus: list[HostRef] = []
        with self._lock:
            for host in hosts:
                key = self._placed.get(id(host))
                if not self._closed and host.alive and self._count < self._max_idle:
                    self._idle.setdefault(key, []).append(host)
                    self._count += 1
                else:
                    self._placed.pop(id(host), None)
                    surplus.append(host)
        for host in surplus:
            host.stop()

    def forget(self, host: HostRef) -> None:
        """Stop ``host`` for good (a failed or abandoned host, never pooled again)."""
        with self._lock:
            self._placed.pop(id(host), None)
        host.stop()

    def close(self) -> None:
        """Stop every idle host; later releases stop their hosts."""
        with self._lock:
            self._closed = True
            idle = [host for hosts in self._idle.values() for host in hosts]
            self._idle = {}
            self._count = 0
            for host in idle:
                self._placed.pop(id(host), None)
        for host in idle:
            host.stop()

    def forget_parent(self) -> None:
        """In a forked child, right after the fork (its only thread): the warm hosts are
        the parent's, whose threads do not exist here; the child starts its own.
        Hosts lent out at the fork belong to sessions the child cannot use either."""
        self._lock = threading.Lock()
        self._idle = {}
        self._placed = {}
        self._count = 0

    @property
    def idle_count(self) -> int:
        """How many warm hosts wait in the pool."""
        with self._lock:
            return self._count


@atexit.register
def _close_pools_at_exit() -> None:
    # Hosts run on daemon threads, so exit never hangs on them; stopping them here
    # lets programs release resources (connections, files) in an orderly way.
    for pool in list(_LIVE_POOLS):
        pool.close()
