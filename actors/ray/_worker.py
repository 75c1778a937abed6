"""The worker side of the Ray backend: what runs inside a Ray actor process.

Kept apart from the driver side (:mod:`._backend`, :mod:`._host`) because it is
the only code a worker runs: a :class:`Worker` holds one
:class:`~actorflow.actors.ProgramSlot` and a cache of unpickled programs;
:func:`check_programs` is the task that tells, at session start, whether a worker
can import what the programs need. :class:`LoadHead` is the one frame both sides
encode themselves.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, NamedTuple

import msgpack

from actorflow.actors._host import UNLOAD, Call, HostedFactory, LoadCall, ProgramSlot
from actorflow.actors.codec import message
from actorflow.errors import BackendError, WorkerImportFailed

__all__ = [
    "CACHED_PROGRAMS",
    "PRELOADED",
    "LoadHead",
    "Shipped",
    "Worker",
    "check_programs",
]

CACHED_PROGRAMS = 256
"""Programs a worker keeps unpickled (and the driver remembers it keeps), least recent out."""
PRELOADED = 16
"""Programs a spare worker unpickles ahead, per placement: the last ones checked."""


class Shipped:
    """What a worker unpickles: a program factory and the by-value message types it needs."""

    __slots__ = ("factory", "messages")

    def __init__(self, factory: HostedFactory, messages: list[tuple[str, type]]) -> None:
        self.factory = factory
        self.messages = messages

    def install(self) -> HostedFactory:
        for name, cls in self.messages:
            message(cls, name=name)
        return self.factory


def _unpickle(blob: bytes, label: str) -> HostedFactory:
    """Worker side: rebuild a shipped program, or explain why this worker cannot."""
    import ray  # noqa: PLC0415 - runs on a worker, where Ray is imported already

    try:
        shipped = ray.cloudpickle.loads(blob)
    except (ImportError, AttributeError) as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise WorkerImportFailed(
            f"{label}: a Ray worker cannot import the code it needs ({type(exc).__name__}: "
            f"{exc}; missing: {missing!r}). Ship it to the workers: install the package on "
            "every node, pass RayBackend(options={'runtime_env': {'py_modules': [module]}}) "
            "or {'working_dir': '.'}, or call ray.cloudpickle.register_pickle_by_value(module) "
            "before building the workflow",
            type_name=label,
        ) from exc
    assert isinstance(shipped, Shipped)
    return shipped.install()


class LoadHead(NamedTuple):
    """The first argument of :meth:`Worker.load_call`: which program, and which method.

    On the wire a msgpack array of the four fields, in this order. One ``bytes``
    rather than four arguments: Ray checks and moves every argument of a call one
    by one, on the driver as it submits it and on the worker, and every call of a
    fresh run is a ``load_call``. Measured: W2 on Ray went from 0.74-0.76x its
    bare-call floor to 0.79-0.87x (``bench/README.md``, "Ray").
    """

    digest: str
    """The program's digest: the key of the worker's cache."""
    blob: bytes
    """The pickled :class:`Shipped` program, or empty: the worker has it cached."""
    label: str
    """How errors name the program (empty with an empty ``blob``)."""
    method: str
    """The method of the program's first call."""

    def pack(self) -> bytes:
        """The head's bytes (driver side)."""
        head: bytes = msgpack.packb(self, use_bin_type=True)
        return head

    @classmethod
    def unpack(cls, head: bytes) -> LoadHead:
        """The head in ``head``, its shape and field types checked (worker side).

        Raises:
            BackendError: the bytes are no head, as when the driver and the worker
                run different versions of actorflow.
        """
        try:
            fields = msgpack.unpackb(head)
        except Exception as exc:  # noqa: BLE001 - any msgpack failure is a malformed head
            raise _malformed(f"{type(exc).__name__}: {exc}") from None
        if (
            type(fields) is not list
            or len(fields) != len(cls._fields)
            or type(fields[0]) is not str
            or type(fields[1]) is not bytes
            or type(fields[2]) is not str
            or type(fields[3]) is not str
        ):
            raise _malformed(f"got {fields!r:.200}")
        return cls(*fields)


def _malformed(detail: str) -> BackendError:
    return BackendError(
        f"a Ray worker got a load_call head it cannot read ({detail}): the driver and "
        "the workers must run the same version of actorflow; install it on every node "
        "or ship it with RayBackend(options={'runtime_env': ...})"
    )


class Worker:
    """The Ray actor: one :class:`ProgramSlot` in a worker process. Worker side."""

    def __init__(self) -> None:
        self._slot = ProgramSlot()
        self._programs: OrderedDict[str, HostedFactory] = OrderedDict()

    def pid(self) -> int:
        return os.getpid()

    # Every argument is ``bytes``, which Ray passes raw; a tuple it would pickle, at
    # ~0.1 ms a call.

    def call(self, method: bytes, payload: bytes) -> Any:
        """A :class:`~actorflow.actors._host.Call`: a step, a snapshot or a restore."""
        return self._slot.receive(Call(method.decode(), payload))

    def load_call(self, head: bytes, payload: bytes) -> Any:
        """A :class:`~actorflow.actors._host.LoadCall`: ``head`` (:class:`LoadHead`) names the
        program by its digest, with its pickle (``blob``) or, ``blob`` empty, the one
        this worker cached under that digest; its label names it in errors."""
        key, blob, label, method = LoadHead.unpack(head)
        programs = self._programs
        if blob:
            factory = programs[key] = _unpickle(blob, label)
            if len(programs) > CACHED_PROGRAMS:
                programs.popitem(last=False)
        else:
            factory = programs[key]
            programs.move_to_end(key)
        return self._slot.receive(LoadCall(factory, method, payload))

    def unload(self) -> Any:
        return self._slot.receive(UNLOAD)

    def preload(self, programs: list[tuple[str, bytes, str]]) -> list[str]:
        """Unpickle ``programs`` (digest, blob, label) ahead of their first call, as a
        spare; returns the digests now cached, in the cache's order (the driver's mirror).
        One that fails is left out: its first call ships it again, and fails there."""
        for digest, blob, label in programs:
            try:
                self._programs[digest] = _unpickle(blob, label)
            except Exception:  # noqa: BLE001 - reported by the program's own first call
                continue
            if len(self._programs) > CACHED_PROGRAMS:
                self._programs.popitem(last=False)
        return list(self._programs)

    def check(self, executors: list[tuple[str, str, bytes]]) -> None:
        """:func:`check_programs` in this worker (a parked one, already running)."""
        check_programs(executors)


def check_programs(executors: list[tuple[str, str, bytes]]) -> None:
    """Ray task: unpickle each program (worker side); raise WorkerImportFailed if one fails."""
    for _executor, label, blob in executors:
        _unpickle(blob, label)
