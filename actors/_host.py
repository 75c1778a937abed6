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
from typing import Any, Protocol, TypeVar

from ._reply import LeanActor, Raised

__all__ = [
    "ExecutorHost",
    "HandlerAborted",
    "HostLoop",
    "Hosted",
    "HostedFactory",
    "ProgramSlot",
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


class ProgramSlot:
    """The place one :class:`Hosted` program lives in a host, whatever the host is.

    ``receive`` answers the host messages (tuples):

    - ``("call", method, payload)``: forward to the program; returns bytes.
    - ``("load_call", factory, method, payload)``: stop the current program, build
      ``factory()``, start it on this thread, then ``call`` it: a run's first call
      to a host, one round trip for both.
    - ``("unload",)``: stop the current program; the host stays alive for reuse.

    A ``BaseException`` the program raises fails only its call, as
    :class:`HandlerAborted`. Used by the thread host (:class:`ExecutorHost`) and the
    Ray host, so every backend runs programs the same way. Host thread only.
    """

    __slots__ = ("_loop", "_program")

    def __init__(self) -> None:
        self._program: Hosted | None = None
        self._loop = HostLoop()

    def receive(self, message: Any) -> Any:
        """Dispatch one host message."""
        kind = message[0]
        try:
            if kind == "call":
                program = self._program
                if program is None:
                    raise RuntimeError("host has no program loaded; load one first")
                return program.call(message[1], message[2])
            if kind == "load_call":
                self._load(message[1])
                return self._program.call(message[2], message[3])  # type: ignore[union-attr]  # just loaded
            if kind == "unload":
                self._unload()
                return None
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            return Raised(exc)  # the caller's future raises it; pykka logs nothing
        except BaseException as exc:  # noqa: BLE001 - would stop every pykka actor (see HandlerAborted)
            aborted = HandlerAborted(f"a hosted program raised {type(exc).__name__}: {exc}")
            aborted.__cause__ = exc
            return Raised(aborted)
        return Raised(ValueError(f"unknown host message {kind!r}"))

    def close(self) -> None:
        """Stop the program and close the loop (the host is going away)."""
        self._unload()
        self._loop.close()

    def _load(self, factory: HostedFactory) -> None:
        self._unload()
        program = factory()
        program.start(self._loop)
        self._program = program

    def _unload(self) -> None:
        program, self._program = self._program, None
        if program is not None:
            program.stop()


class ExecutorHost(LeanActor):
    """A pykka actor that hosts one :class:`Hosted` program at a time.

    Messages are the tuples of :class:`ProgramSlot`, answered by ``ask``.
    Daemon thread: a forgotten host never keeps the interpreter alive.
    """

    def __init__(self) -> None:
        super().__init__()
        self._slot = ProgramSlot()
        self.on_receive = self._slot.receive  # type: ignore[method-assign]  # one call less per message

    def on_receive(self, message: Any) -> Any:
        """Dispatch one request (runs on the host's thread)."""
        return self._slot.receive(message)

    def on_stop(self) -> None:
        """Stop the program and close the loop when the actor stops."""
        self._slot.close()
