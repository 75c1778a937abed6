"""Executors: the user's unit of work, its handlers, and its resources.

An :class:`Executor` subclass declares handlers with :func:`handler` and keeps its
private state in instance attributes. The object a user builds is a *blueprint*:
the builder encodes its state to bytes, and every actor rebuilds its own instance
from those bytes (``__init__`` is not run again), so nothing the caller holds is
reachable from inside a run.
"""

from __future__ import annotations

import datetime as dt
import decimal
import inspect
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, overload

from actorflow.actors import has_registered_subclass, is_registered
from actorflow.errors import GraphError

from ._types import TypeSpec, parse_type_spec

__all__ = [
    "Executor",
    "HandlerInfo",
    "Resource",
    "handler",
    "resource",
    "response_handler",
]

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

_HANDLER_MARK = "__actorflow_handler__"


@dataclass(frozen=True, slots=True)
class HandlerInfo:
    """One handler of an executor class, resolved from its annotations."""

    name: str
    """Method name."""
    spec: TypeSpec
    """Message types it accepts (for response handlers: the response type)."""
    is_async: bool
    """Whether the method is ``async def``."""
    is_response: bool
    """Whether it is a ``@response_handler`` ``(request, response, ctx)``."""
    request_spec: TypeSpec | None
    """For response handlers: the request types it pairs with."""


def handler(fn: F) -> F:
    """Mark a method as a message handler: ``def on_x(self, msg: T, ctx: Context)``.

    The annotation of ``msg`` routes messages: a class, a union, ``list[T]`` for
    fan-in deliveries, or ``object`` to accept anything. Sync and ``async def``
    methods both work; an async handler runs on its actor's own event loop.
    """
    setattr(fn, _HANDLER_MARK, "message")
    return fn


def response_handler(fn: F) -> F:
    """Mark a method as a response handler: ``def on_r(self, request: Q, response: A, ctx)``.

    It runs when the caller answers a request this executor made with
    ``ctx.request(value, response_type)``; routed by the annotated types of both.
    """
    setattr(fn, _HANDLER_MARK, "response")
    return fn


class Resource(Generic[R]):
    """A live object a handler uses that is not workflow state (a client, a clock).

    Declare at class level: ``client = actorflow.resource(make_client)``. The
    factory runs inside the actor when it starts (and again after every restart),
    on the actor's own thread; an ``async`` factory runs on the actor's loop. The
    value is never encoded, snapshotted or copied into a checkpoint. A blueprint
    (the object handed to the builder) has no resources: reading one there raises.
    """

    __slots__ = ("factory", "name")

    def __init__(self, factory: Callable[[], R]) -> None:
        self.factory = factory
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Resource[R]: ...
    @overload
    def __get__(self, obj: Executor, owner: type) -> R: ...
    def __get__(self, obj: Executor | None, owner: type) -> Resource[R] | R:
        if obj is None:
            return self
        live = obj._af_live
        if live is None or self.name not in live:
            raise AttributeError(
                f"resource {self.name!r} of executor {obj.id!r} exists only inside a running "
                "actor; it is created by its factory when the actor starts"
            )
        return typing.cast(R, live[self.name])


def resource(factory: Callable[[], R]) -> Resource[R]:
    """Declare a class-level resource built by ``factory`` inside each actor."""
    return Resource(factory)


class Executor:
    """Base class of every executor. Subclass it and add ``@handler`` methods.

    Args:
        id: unique id of this executor in its graph.
        timeout: seconds one superstep of this executor may take before it counts
            as failed (a restart policy may then restart it); None for no limit.

    State is the instance attributes (``vars(self)``); the default
    :meth:`snapshot` / :meth:`restore` encode them with the wire codec, so every
    attribute must be encodable (or declared with :func:`resource`).
    """

    __slots__ = ("__dict__", "_af_id", "_af_live", "_af_timeout")

    state_version: ClassVar[int] = 1
    """The version of this class's state shape. Raise it when the state changes shape
    (an attribute added, renamed or retyped) and define :meth:`migrate`; resuming a
    checkpoint of an older version migrates its snapshot first."""

    _af_handlers: ClassVar[tuple[HandlerInfo, ...] | None] = None
    _af_resource_table: ClassVar[dict[str, Resource[Any]] | None] = None

    def __init__(self, id: str, *, timeout: float | None = None) -> None:
        if not isinstance(id, str) or not id:
            raise TypeError(f"executor id must be a non-empty str, got {id!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"executor {id!r}: timeout must be positive, got {timeout!r}")
        self._af_id = id
        self._af_timeout = timeout
        self._af_live: dict[str, Any] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._af_handlers = None  # resolved lazily: annotations may name later classes

    @property
    def id(self) -> str:
        """This executor's id in its graph.

        Raises:
            GraphError: the subclass's ``__init__`` never called ``super().__init__(id)``.
        """
        try:
            return self._af_id
        except AttributeError:
            raise GraphError([_no_init(type(self))]) from None

    @property
    def timeout(self) -> float | None:
        """Seconds a superstep of this executor may take, or None."""
        return self._af_timeout

    def snapshot(self) -> dict[str, Any]:
        """Return the private state to checkpoint. Override for custom state.

        Runs on the executor's actor thread. The result is encoded immediately;
        the default returns the instance attributes.
        """
        return dict(vars(self))

    def restore(self, state: Mapping[str, Any]) -> None:
        """Replace the private state with ``state`` (as returned by :meth:`snapshot`)."""
        attributes = vars(self)
        attributes.clear()
        attributes.update(state)

    @classmethod
    def migrate(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        """Return ``state``, a snapshot of version ``from_version``, in the current shape.

        Called on resume, in the resuming thread, before any actor starts, for every
        snapshot older than :attr:`state_version` (``from_version`` < it). ``state``
        is the caller's own dict. Override it together with ``state_version``; the
        default raises (a version bump without a migration fails the resume).

        Raises:
            NotImplementedError: not overridden.
        """
        raise NotImplementedError(f"{cls.__qualname__} defines no migrate()")

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {getattr(self, '_af_id', '(no id)')!r}>"

    # --- class introspection (used by the builder and the runner) -------------

    @classmethod
    def _af_resources(cls) -> dict[str, Resource[Any]]:
        cached = cls.__dict__.get("_af_resource_table")
        if cached is not None:
            return typing.cast(dict[str, Resource[Any]], cached)
        found: dict[str, Resource[Any]] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, Resource):
                    found[name] = value
        cls._af_resource_table = found
        return found

    @classmethod
    def _af_handler_infos(cls) -> tuple[HandlerInfo, ...]:
        """Every handler of this class, resolved once. Raises GraphError if unusable."""
        cached = cls.__dict__.get("_af_handlers")
        if cached is not None:
            return typing.cast(tuple[HandlerInfo, ...], cached)
        problems: list[str] = []
        infos: list[HandlerInfo] = []
        seen: set[str] = set()
        for klass in cls.__mro__:
            for name, fn in vars(klass).items():
                mark = getattr(fn, _HANDLER_MARK, None)
                if mark is None or name in seen:
                    continue
                seen.add(name)
                info = _resolve_handler(cls, name, fn, mark, problems)
                if info is not None:
                    infos.append(info)
                    _check_wire_types(cls, info, problems)
        _check_overlaps(cls, infos, problems)
        if problems:
            raise GraphError(problems)
        infos.sort(key=lambda i: i.name)
        cls._af_handlers = tuple(infos)
        return cls._af_handlers


_WIRE_BUILTINS = frozenset(
    {
        object,
        type(None),
        bool,
        int,
        float,
        str,
        bytes,
        list,
        dict,
        tuple,
        set,
        frozenset,
        dt.datetime,
        dt.date,
        dt.time,
        dt.timedelta,
        uuid.UUID,
        decimal.Decimal,
    }
)
"""Types the codec carries without registration (``object``: a catch-all)."""

_ABSTRACT_MODULES = frozenset({"abc", "collections.abc", "numbers", "typing", "typing_extensions"})


def _check_wire_types(cls: type, info: HandlerInfo, problems: list[str]) -> None:
    """A handler for a class no message can ever be (never registered, no registered
    subclass) would never run: the value would fail to encode when first sent."""
    specs = [info.spec] + ([info.request_spec] if info.request_spec is not None else [])
    for tp in dict.fromkeys(c for spec in specs for c in (*spec.classes, *spec.list_items)):
        if (
            tp in _WIRE_BUILTINS
            or is_registered(tp)
            or tp.__module__ in _ABSTRACT_MODULES
            or has_registered_subclass(tp)
        ):
            continue
        problems.append(
            f"handler {cls.__qualname__}.{info.name} handles {tp.__qualname__}, which is not "
            "registered for the wire, so no message of that type can reach it; decorate "
            f"{tp.__qualname__} with @af.message (a dataclass or an Enum), or handle a "
            "built-in type"
        )


def _check_overlaps(cls: type, infos: list[HandlerInfo], problems: list[str]) -> None:
    """Two message handlers for one type: which one runs would be an accident of names."""
    owners: dict[str, list[str]] = {}
    for info in infos:
        if info.is_response:
            continue
        for label in info.spec.labels():
            owners.setdefault(label, []).append(info.name)
    for label, names in owners.items():
        if len(names) > 1:
            listed = " and ".join(sorted(names))
            problems.append(
                f"executor class {cls.__qualname__} has {len(names)} handlers for {label} "
                f"({listed}); keep one (merge their bodies), or give them different types"
            )


def _no_init(cls: type) -> str:
    return (
        f"{cls.__qualname__}.__init__ never called Executor.__init__, so the executor has no "
        "id; call super().__init__(id) first in it (a subclass that needs no arguments of "
        "its own can drop its __init__)"
    )


def _resolve_handler(
    cls: type, name: str, fn: Any, mark: str, problems: list[str]
) -> HandlerInfo | None:
    where = f"{cls.__qualname__}.{name}"
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 - any failure to resolve is reported as a graph problem
        problems.append(
            f"handler {where}: cannot resolve its annotations ({exc}); define message "
            "types at module level so they can be found by name"
        )
        return None
    params = list(inspect.signature(fn).parameters.values())[1:]  # skip self
    expected = 3 if mark == "response" else 2
    if len(params) != expected:
        shape = "(self, request, response, ctx)" if mark == "response" else "(self, message, ctx)"
        problems.append(f"handler {where} must take {shape}, got {len(params) + 1} parameters")
        return None
    msg_param = params[expected - 2]
    if msg_param.name not in hints:
        problems.append(
            f"handler {where}: annotate parameter {msg_param.name!r} with the message type "
            "it handles (a class, a union, list[T] or object)"
        )
        return None
    spec = parse_type_spec(hints[msg_param.name])
    if spec is None:
        problems.append(
            f"handler {where}: cannot route on annotation {hints[msg_param.name]!r}; "
            "use a class, a union of classes, list[T] or object"
        )
        return None
    request_spec: TypeSpec | None = None
    if mark == "response":
        annotation = hints.get(params[0].name, object)
        request_spec = parse_type_spec(annotation)
        if request_spec is None:
            problems.append(f"handler {where}: cannot route on request annotation {annotation!r}")
            return None
    return HandlerInfo(
        name=name,
        spec=spec,
        is_async=inspect.iscoroutinefunction(fn),
        is_response=mark == "response",
        request_spec=request_spec,
    )
