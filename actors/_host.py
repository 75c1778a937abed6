"""The executor host: one pykka actor per executor, speaking bytes only.

A host is generic. It knows nothing of graphs or handlers: it owns a thread, an
asyncio event loop private to that thread, and at most one *hosted program* (an
object implementing :class:`Hosted`), which the runtime loads into it. Every call
into the program carries bytes and returns bytes, so another backend (a Ray actor,
a subprocess) can host the same program without the runtime changing.

Hosts are reusable: ``load_call`` installs a program with its first call,
``unload`` removes it, and the host can then be handed to the next run (the warm
pool in :mod:`._backend`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, Protocol, TypeVar

import pykka

from ._reply import LeanActor, Raised

__all__ = [
    "UNLOAD",
    "Call",
    "ExecutorHost",
    "HandlerAborted",
    "HostLoop",
    "HostMessage",
    "Hosted",
    "HostedFactory",
    "LoadCall",
    "OnAnswer",
    "ProgramSlot",
    "Relay",
    "Unload",
]

T = TypeVar("T")


class HandlerAborted(Exception):
    """A hosted program raised a ``BaseException`` (``SystemExit``, ...).

    pykka stops *every* actor when a ``BaseException`` escapes one, so the host
    converts it into this ordinary exception, which fails only the one call.
    The original is chained as ``__cause__``.
    """


class HostLoop:
    """The asyncio event loop private to one host's thread.

    ``run`` drives a coroutine to completion on that loop. It is called only from
    the host's own thread (from inside a hosted program), so an ``async def``
    handler never stalls another actor and never touches the caller's loop.
    """

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion on this host's loop and return its result."""
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        """Close the loop, cancelling whatever a program left scheduled on it."""
        loop, self._loop = self._loop, None
        if loop is None or loop.is_closed():
            return
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


class Hosted(Protocol):
    """A program a host runs. Every method runs on the host's own thread."""

    def start(self, loop: HostLoop) -> None:
        """Build private state (and resources) inside the actor."""

    def call(self, method: str, payload: bytes) -> bytes:
        """Handle one request; bytes in, bytes out. Exceptions fail only this call."""

    def stop(self) -> None:
        """Release what ``start`` acquired. Must not raise."""


HostedFactory = Callable[[], Hosted]


# --- the host messages ---------------------------------------------------------------


class Call(NamedTuple):
    """Call the loaded program: ``method`` with ``payload``; answered with its bytes."""

    method: str
    payload: bytes


class LoadCall(NamedTuple):
    """Stop the current program, build ``factory()``, start it on the host's thread,
    then :class:`Call` it: a run's first call to a host, one round trip for both."""

    factory: HostedFactory
    method: str
    payload: bytes


OnAnswer = Callable[[bytes | BaseException], None]
"""What a :class:`Relay` hands its answer to: the call's bytes, or what it raised."""


class Relay(NamedTuple):
    """Call the loaded program like :class:`Call`, then hand the answer to ``then``, on
    the host's thread: sent with a ``tell``, it answers nobody (see ``HostRef.relay``)."""

    method: str
    payload: bytes
    then: OnAnswer


class Unload(NamedTuple):
    """Stop the current program; the host stays alive for reuse."""


UNLOAD = Unload()
"""The one :class:`Unload` message (it carries nothing)."""

HostMessage = Call | LoadCall | Relay | Unload
"""What :meth:`ProgramSlot.receive` answers. Built in the host's own process (a
pykka ask or tell, or a Ray worker from its call's arguments), so never decoded."""


class ProgramSlot:
    """The place one :class:`Hosted` program lives in a host, whatever the host is.

    ``receive`` answers the host messages (:data:`HostMessage`): :class:`Call`,
    :class:`LoadCall` and :class:`Unload`; a :class:`Relay` is answered to its ``then``.

    A ``BaseException`` the program raises fails only its call, as
    :class:`HandlerAborted`. Used by the thread host (:class:`ExecutorHost`) and the
    Ray host, so every backend runs programs the same way. Host thread only.
    """

    __slots__ = ("_loop", "_program")

    def __init__(self) -> None:
        self._program: Hosted | None = None
        self._loop = HostLoop()

    def receive(self, message: HostMessage) -> Any:
        """Dispatch one host message."""
        if type(message) is Relay:
            answer = self._answer(message)
            message.then(answer.error if type(answer) is Raised else answer)
            return None
        return self._answer(message)

    def _answer(self, message: HostMessage) -> Any:
        try:
            if type(message) is Call or type(message) is Relay:
                program = self._program
                if program is None:
                    raise RuntimeError("host has no program loaded; load one first")
                return program.call(message.method, message.payload)
            if type(message) is LoadCall:
                return self._load(message.factory).call(message.method, message.payload)
            if type(message) is Unload:
                self._unload()
                return None
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            return Raised(exc)  # the caller's future raises it; pykka logs nothing
        except BaseException as exc:  # noqa: BLE001 - would stop every pykka actor (see HandlerAborted)
            aborted = HandlerAborted(f"a hosted program raised {type(exc).__name__}: {exc}")
            aborted.__cause__ = exc
            return Raised(aborted)
        return Raised(ValueError(f"unknown host message {message!r}"))

    def close(self) -> None:
        """Stop the program and close the loop (the host is going away)."""
        self._unload()
        self._loop.close()

    def _load(self, factory: HostedFactory) -> Hosted:
        self._unload()
        program = factory()
        program.start(self._loop)
        self._program = program
        return program

    def _unload(self) -> None:
        program, self._program = self._program, None
        if program is not None:
            program.stop()


class ExecutorHost(LeanActor):
    """A pykka actor that hosts one :class:`Hosted` program at a time.

    Messages are the :data:`HostMessage` of :class:`ProgramSlot`, answered by ``ask``.
    Daemon thread: a forgotten host never keeps the interpreter alive.
    """

    plain_messages = (Call, LoadCall, Relay, Unload)

    def __init__(self) -> None:
        super().__init__()
        self._slot = ProgramSlot()
        self.on_receive = self._slot.receive  # type: ignore[method-assign]  # one call less per message

    def on_receive(self, message: HostMessage) -> Any:
        """Dispatch one request (runs on the host's thread)."""
        return self._slot.receive(message)

    def on_stop(self) -> None:
        """Stop the program and close the loop when the actor stops."""
        self._slot.close()

    def _actor_loop_teardown(self) -> None:
        # pykka's own teardown answers the asks left in a stopped actor's inbox with
        # ActorDeadError, and drops its tells. A relay is a tell whose sender waits for
        # its ``then``: it gets that error too, or its sender would wait for ever.
        # (A private pykka hook, like LeanActor's: should pykka rename it, the test
        # test_a_relay_to_a_stopped_host_hears_that_it_stopped fails.)
        inbox = self.actor_inbox
        left = []
        while not inbox.empty():
            envelope = inbox.get()
            if type(envelope.message) is Relay:
                envelope.message.then(
                    pykka.ActorDeadError(f"{self.actor_ref} stopped before handling the call")
                )
            else:
                left.append(envelope)
        for envelope in left:
            inbox.put(envelope)
        super()._actor_loop_teardown()
