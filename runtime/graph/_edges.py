"""Edges and routing: where a value an executor sends goes.

Routing runs in the *sending* actor, before the value is encoded: conditions and
selectors see the sender's own object, and the supervisor receives only bytes
with their targets already chosen. A value no out-edge target has a handler for
is an :class:`~actorflow.errors.UnroutableMessage`, never a silent drop; a value a
target accepts but every condition declines is dropped by the user's choice, and
reported (``StepBuffer``: a ``MessageDroppedEvent``, or ``MessageDropped`` under
``strict_routing``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from actorflow.errors import UnroutableMessage

from ._types import TypeSpec, a_label, type_label

__all__ = [
    "Accepts",
    "Case",
    "Default",
    "EdgeKind",
    "OutEdge",
    "Route",
    "passed_over",
    "route",
]


class EdgeKind:
    """Names of edge kinds (stable strings: they enter the graph signature)."""

    DIRECT = "edge"
    FAN_OUT = "fan_out"
    FAN_IN = "fan_in"
    SWITCH = "switch"


@dataclass(frozen=True, slots=True)
class Case:
    """One branch of a switch: the first case whose ``predicate(value)`` holds wins."""

    predicate: Callable[[Any], bool]
    """Called in the sending actor with the value about to be sent."""
    target: Any
    """Target executor (an id or an Executor)."""


@dataclass(frozen=True, slots=True)
class Default:
    """The branch a switch takes when no case holds."""

    target: Any
    """Target executor (an id or an Executor)."""


class Accepts:
    """Answers "does this executor have a handler for this value?" with a type cache."""

    __slots__ = ("_cache", "_classes", "_items", "executor_id", "labels")

    def __init__(self, executor_id: str, specs: Sequence[TypeSpec]) -> None:
        self.executor_id = executor_id
        self._classes = tuple(c for s in specs for c in s.classes)
        self._items = tuple(c for s in specs for c in s.list_items)
        self._cache: dict[tuple[type, bool], bool] = {}
        self.labels = sorted({label for s in specs for label in s.labels()})

    def single(self, value: object) -> bool:
        """Whether a handler takes ``value`` as one message."""
        key = (type(value), False)
        hit = self._cache.get(key)
        if hit is None:
            hit = isinstance(value, self._classes)
            if not hit and type(value) is list and self._items:
                # A list[T] handler takes a list whose every item is a T: decided per
                # value, never cached by type.
                return all(isinstance(item, self._items) for item in value)
            self._cache[key] = hit
        return hit

    def item(self, value: object) -> bool:
        """Whether a fan-in (``list[T]``) handler takes ``value`` as one of its items."""
        key = (type(value), True)
        hit = self._cache.get(key)
        if hit is None:
            hit = isinstance(value, self._items)
            self._cache[key] = hit
        return hit


@dataclass(frozen=True, slots=True)
class OutEdge:
    """One out-edge of an executor, as its actor sees it."""

    kind: str
    """One of :class:`EdgeKind`."""
    targets: tuple[str, ...]
    """Target ids (a switch: case targets in order, then the default if any)."""
    when: Callable[[Any], bool] | None = None
    """Condition of a direct edge."""
    select: Callable[[Any, list[str]], Sequence[str]] | None = None
    """Selector of a fan-out: picks target ids among those that accept the value."""
    predicates: tuple[Callable[[Any], bool], ...] = ()
    """Switch case predicates, parallel to the first ``len(predicates)`` targets."""
    has_default: bool = False
    """Whether the last switch target is the default branch."""
    group: int = -1
    """For a fan-in edge: index of the fan-in group the supervisor buffers into."""
    accepts: tuple[Accepts, ...] = field(default=())
    """Parallel to ``targets``: their handler tables."""


Route = tuple[str, int]
"""A chosen destination: (target id, fan-in group or -1)."""


def route(sender: str, edges: Sequence[OutEdge], value: object, to: str | None) -> list[Route]:
    """Choose the destinations of ``value`` sent by ``sender`` (runs in the sender's actor).

    Raises:
        UnroutableMessage: no out-edge target has a handler for the value's type,
            or ``to`` names an executor that is not such a target.
    """
    routes: list[Route] = []
    type_ok = False
    for edge in edges:
        kind = edge.kind
        if kind == EdgeKind.DIRECT:
            acc = edge.accepts[0]
            if acc.single(value):
                type_ok = True
                if edge.when is None or edge.when(value):
                    routes.append((edge.targets[0], -1))
        elif kind == EdgeKind.FAN_IN:
            if edge.accepts[0].item(value):
                type_ok = True
                routes.append((edge.targets[0], edge.group))
        elif kind == EdgeKind.FAN_OUT:
            candidates = [
                t for t, a in zip(edge.targets, edge.accepts, strict=True) if a.single(value)
            ]
            if candidates:
                type_ok = True
                chosen = list(edge.select(value, list(candidates))) if edge.select else candidates
                unknown = [c for c in chosen if c not in candidates]
                if unknown:
                    raise UnroutableMessage(
                        f"executor {sender!r}: the fan-out selector returned {unknown!r}, which "
                        f"are not targets accepting {type_label(type(value))}; return a subset "
                        f"of {candidates!r}"
                    )
                routes.extend((t, -1) for t in chosen)
        else:
            routes_before = len(routes)
            _route_switch(edge, value, routes)
            type_ok = (
                type_ok or len(routes) > routes_before or any(a.single(value) for a in edge.accepts)
            )
    if to is not None:
        routes = [r for r in routes if r[0] == to]
        if not routes and not _is_target(edges, to, value):
            raise UnroutableMessage(_unroutable_text(sender, edges, value, to))
        return routes
    if not type_ok:
        raise UnroutableMessage(_unroutable_text(sender, edges, value, None))
    return routes


def passed_over(edges: Sequence[OutEdge], value: object, to: str | None) -> list[str]:
    """The out-edge targets (only ``to``, if given) with a handler for ``value``: those a
    value that :func:`route` sent nowhere was declined for, in edge order, once each."""
    found: list[str] = []
    for edge in edges:
        for target, acc in zip(edge.targets, edge.accepts, strict=True):
            handles = acc.single(value) or (edge.kind == EdgeKind.FAN_IN and acc.item(value))
            if handles and (to is None or target == to) and target not in found:
                found.append(target)
    return found


def _route_switch(edge: OutEdge, value: object, routes: list[Route]) -> None:
    for index, predicate in enumerate(edge.predicates):
        if predicate(value):
            target, acc = edge.targets[index], edge.accepts[index]
            if acc.single(value):
                routes.append((target, -1))
            return
    if edge.has_default and edge.accepts[-1].single(value):
        routes.append((edge.targets[-1], -1))


def _is_target(edges: Sequence[OutEdge], to: str, value: object) -> bool:
    return any(
        t == to and (a.single(value) or a.item(value))
        for e in edges
        for t, a in zip(e.targets, e.accepts, strict=True)
    )


def _unroutable_text(sender: str, edges: Sequence[OutEdge], value: object, to: str | None) -> str:
    type_name = type_label(type(value))
    targets = {t: a.labels for e in edges for t, a in zip(e.targets, e.accepts, strict=True)}
    if not targets:
        return (
            f"executor {sender!r} sent {a_label(type_name)} but has no out-edges; add an edge from "
            f"{sender!r}, or use ctx.output() to emit a result"
        )
    listing = "; ".join(
        f"{t!r} handles {', '.join(labels) or 'nothing'}" for t, labels in targets.items()
    )
    if to is not None:
        return (
            f"executor {sender!r} sent {a_label(type_name)} to {to!r}, which is not an out-edge "
            f"target with a handler for it ({listing}); add the edge or a handler"
        )
    return (
        f"executor {sender!r} sent {a_label(type_name)} that no out-edge target handles ({listing}); "
        f"add a handler for {type_name} to a target, or an edge to an executor that has one"
    )
