"""Lean actor plumbing: a C-level inbox and a one-lock reply future.

pykka's threading actors use ``queue.Queue`` inboxes and futures built on
``threading.Condition``: every ask takes and releases about a dozen Python-level
locks. A superstep is a handful of asks, so that cost *is* the runtime's floor.
:class:`LeanActor` swaps in pykka's two extension points: ``queue.SimpleQueue``
(implemented in C) as the inbox, and :class:`ReplyFuture`, which waits on one
plain lock. Measured on 2 cores, eight actors asked at once and gathered take
~165 us instead of ~260 us, and a supervisor driving three supersteps through
ten actors ~270 us instead of ~430 us. Semantics are pykka's: ``ask``, ``tell``,
``stop``, ``get(timeout=...)`` raising ``pykka.Timeout`` (here also a
``TimeoutError``), errors re-raised with their traceback.
"""

from __future__ import annotations

import os
import pickle
import queue
import sys
import threading
import types
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pykka

__all__ = [
    "LeanActor",
    "Raised",
    "ReplyFuture",
    "ReplyTimeout",
    "error_parts",
    "rebuilt_error",
    "said_by",
]

_PENDING: Any = object()


class ReplyTimeout(pykka.Timeout, TimeoutError):
    """No answer within the timeout: both pykka's ``Timeout`` and the builtin ``TimeoutError``."""


class Raised:
    """An error an actor hands back as its answer: the :class:`ReplyFuture` raises it.

    Returning the error, rather than raising it out of ``on_receive``, keeps pykka
    from logging an "Exception returned from ... to caller" traceback at INFO for
    every failure the caller handles (a handler error the supervisor restarts from).
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (an answer from another process) so that the error always arrives.

        Pickle's own way rebuilds an exception by calling it with ``args``, which fails
        for one whose ``__init__`` or ``__new__`` takes other parameters
        (``PaymentDeclined(order, reason)``), and the answer would be lost. Here the
        type, ``args`` and attributes travel (the results of its effects among them: see
        ``runtime._effects``) and the error is rebuilt without calling ``__init__``.
        What does not pickle is left out: an attribute (a lock, say) is dropped, and
        ``args`` that do not pickle become the error's message."""
        error = self.error
        args, attrs = error_parts(error, _pickles)
        if args is None:
            args = (said_by(error),)
        return (
            _raised,
            (type(error), args, attrs, f"{type(error).__qualname__}: {said_by(error)}"),
        )


def _pickles(value: object) -> bool:
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - any failure means: not this value
        return False
    return True


def _raised(
    cls: type[BaseException], args: tuple[Any, ...], attrs: dict[str, Any], said: str
) -> Raised:
    """The error of :meth:`Raised.__reduce__`, rebuilt (see :func:`rebuilt_error`)."""
    return Raised(rebuilt_error(cls, args, attrs, said))


def error_parts(
    error: BaseException, keeps: Callable[[object], bool]
) -> tuple[tuple[Any, ...] | None, dict[str, Any]]:
    """What :func:`rebuilt_error` needs to make ``error`` again: the arguments it was
    made with (``args``, or what its type's ``__reduce__`` gives, which holds more for
    some built-in types: an ``OSError``'s file name), None if they are not all kept;
    and its attributes, from its ``__dict__`` and its slots, each if ``keeps`` it."""
    args: tuple[Any, ...] = error.args
    try:
        reduced = error.__reduce__()
        if reduced[0] is type(error) and type(reduced[1]) is tuple:
            args = reduced[1]
    except Exception:  # noqa: BLE001 - a __reduce__ of its own that fails: its args
        pass
    attrs = {name: value for name, value in vars(error).items() if keeps(value)}
    for name in _slot_names(type(error)):
        value = getattr(error, name, _PENDING)
        if value is not _PENDING and keeps(value):
            attrs[name] = value
    return (args if keeps(args) else None), attrs


def said_by(error: BaseException) -> str:
    """``str(error)``, or a stand-in if its ``__str__`` raises: an error whose message
    fails must still arrive as itself."""
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - any failure: the stand-in
        return f"<{type(error).__qualname__} whose str() raised>"


def _slot_names(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in [slots] if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and name not in names:
                names.append(name)
    return names


def rebuilt_error(
    cls: type[BaseException], args: tuple[Any, ...], attrs: dict[str, Any], said: str
) -> BaseException:
    """An exception of type ``cls`` made with ``args`` and given attributes ``attrs``,
    without calling an ``__init__`` of its own (which may take other parameters than
    its ``args``, and is code a stored name must not run); a built-in type's
    ``__init__`` is called, as it is what fills an ``OSError``'s ``filename`` or a
    ``StopIteration``'s ``value`` from the arguments. If the type cannot be made
    without its own constructor, a ``RuntimeError`` saying ``said`` (the attributes
    still go with it)."""
    error: BaseException
    try:
        error = cls.__new__(cls, *args)
    except Exception:  # noqa: BLE001 - a __new__ of its own: made without it
        try:
            error = BaseException.__new__(cls)
        except Exception:  # noqa: BLE001 - a type that must be made its own way
            error, args = RuntimeError(said), (said,)
    init = next(klass for klass in type(error).__mro__ if "__init__" in klass.__dict__)
    try:
        if init.__module__ != "builtins":
            raise TypeError  # an __init__ of its own: not run
        init.__init__(error, *args)  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - arguments its __init__ refuses: set as they are
        object.__setattr__(error, "args", args)  # (past a __setattr__ of its own: frozen)
    slots = _slot_names(type(error))
    for name, value in attrs.items():
        try:
            if name not in slots:
                raise AttributeError(name)
            object.__setattr__(error, name, value)
        except Exception:  # noqa: BLE001 - not a slot (or a read-only one): its __dict__
            vars(error)[name] = value
    return error


class ReplyFuture(pykka.Future[Any]):
    """A pykka future that waits on one lock and can call back when it completes.

    The lock is held from creation until the answer is set; ``get`` acquires it
    (with the caller's timeout) and releases it at once, so any number of ``get``
    calls see the answer. Callbacks let the supervisor take a superstep's answers
    in completion order.
    """

    # One lock for every future's callback list: the critical sections are a few
    # attribute operations, and a lock per future costs more than the contention.
    _callbacks_lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__()
        self._done = threading.Lock()
        self._done.acquire()
        self._value: Any = _PENDING
        self._error: tuple[BaseException, TracebackType | None] | None = None
        self._callbacks: list[Callable[[], None]] | None = []
        self._completing = False

    def get(self, *, timeout: float | None = None) -> Any:
        """The answer, or raise what the call raised; :class:`ReplyTimeout` after ``timeout`` s."""
        if self._get_hook is not None:  # pykka's stop() and combinators wrap a future this way
            return super().get(timeout=timeout)
        if self._value is _PENDING:
            # The answer is published before the lock is released, so once it is in,
            # later gets skip the lock: a KeyboardInterrupt landing between this
            # acquire and release cannot strand them.
            if not self._done.acquire(True, -1 if timeout is None else max(timeout, 0.0)):
                raise ReplyTimeout(f"no answer within {timeout} s")
            self._done.release()
        if self._error is not None:
            value, traceback = self._error
            raise value.with_traceback(traceback)
        return self._value

    def set(self, value: Any | None = None) -> None:
        """Complete with ``value`` (with its error, for a :class:`Raised`).

        Raises ``queue.Full`` if already complete.
        """
        if type(value) is Raised:
            self._complete(None, (value.error, value.error.__traceback__))
        else:
            self._complete(value, None)

    def set_exception(self, exc_info: Any = None) -> None:
        """Complete with an error (``sys.exc_info()`` of the caller by default)."""
        info: Any = exc_info if exc_info is not None else sys.exc_info()
        exc_type, exc_value, traceback = info
        error: BaseException = exc_value if exc_value is not None else exc_type()
        self._complete(None, (error, traceback))

    def set_get_hook(self, func: Any) -> None:
        """pykka's hook for derived futures (``ActorRef.stop`` uses it)."""
        with self._callbacks_lock:
            if self._completing:
                raise queue.Full
            super().set_get_hook(func)

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (on the completing thread) once the answer is in; now if it is."""
        with self._callbacks_lock:
            callbacks = self._callbacks
            if callbacks is not None:
                callbacks.append(callback)
                return
        callback()

    def _complete(
        self,
        value: Any,
        error: tuple[BaseException, TracebackType | None] | None,
    ) -> None:
        with self._callbacks_lock:
            if self._completing or self._get_hook is not None:
                raise queue.Full  # pykka's contract: a future completes once
            self._completing = True
        self._error = error
        self._value = value  # last: a value other than _PENDING means the answer is complete
        self._done.release()  # publishes the answer: getters wake after the fields are set
        # Only now is the callback list closed: a callback added while the answer was
        # being published joins the list and runs below, one added later runs at once.
        # Either way it runs after the answer is in (closed first, a callback added in
        # between ran at once and met no answer: ReplyTimeout from get(timeout=0)).
        with self._callbacks_lock:
            callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            callback()


def _unlock_futures_in_child() -> None:
    # A thread of the parent may have held the shared lock at the fork: nobody would
    # release it in the child, whose every future would then wait on it.
    ReplyFuture._callbacks_lock = threading.Lock()


os.register_at_fork(after_in_child=_unlock_futures_in_child)


class LeanActor(pykka.ThreadingActor):
    """A pykka threading actor with a C-level inbox whose asks return :class:`ReplyFuture`.

    Daemon thread: a forgotten actor never keeps the interpreter alive.
    Its threads keep the default scheduling policy: under ``SCHED_BATCH`` (which
    drops wakeup preemption, and once saved context switches) a host woken while
    another process used the CPU waited out that process's slice. Measured on 2 cores
    with two busy processes beside the benchmark: W1 4,013 supersteps/s under
    ``SCHED_BATCH`` against 20,097 without, W2 120 runs/s against 638, W2-io 44 ms
    against 21 ms; on idle cores within 3% of each other.
    """

    use_daemon_thread = True

    plain_messages: tuple[type, ...] = (tuple, types.FunctionType)
    """Message types that go straight to ``on_receive`` (see ``_handle_receive``):
    pykka's own control and proxy messages are none of them."""

    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:
        # pykka's inbox protocol is put/get/empty, which SimpleQueue implements in C.
        return queue.SimpleQueue()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        # pykka's hook for the future type its asks return (ActorRef.ask calls it).
        return ReplyFuture()

    def _handle_receive(self, message: Any) -> Any:
        # pykka first tests every message against its four control and proxy types;
        # the runtime's own messages (plain_messages) are never those, so they skip
        # the four isinstance calls. Should pykka rename this hook, its
        # own dispatch runs instead: slower, never wrong.
        if type(message) in self.plain_messages:
            return self.on_receive(message)
        return super()._handle_receive(message)
