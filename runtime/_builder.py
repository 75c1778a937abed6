"""WorkflowBuilder: declare executors and edges, check them all, compile a graph."""

from __future__ import annotations

import hashlib
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from actorflow.actors import ActorBackend, encode_state
from actorflow.errors import ActorflowError, GraphError

from ._context import Context
from ._graph import GraphSpec, describe
from ._policy import RestartPolicy
from ._runner import ExecutorProgram
from ._workflow import Workflow
from .graph import (
    Accepts,
    Case,
    Default,
    EdgeKind,
    Executor,
    HandlerInfo,
    OutEdge,
    parse_type_spec,
    type_label,
)

__all__ = ["WorkflowBuilder"]

ExecutorRef = str | Executor


@dataclass(frozen=True, slots=True)
class _Edge:
    kind: str
    source: str
    targets: tuple[str, ...]
    when: Callable[[Any], bool] | None = None
    select: Callable[[Any, list[str]], Sequence[str]] | None = None
    predicates: tuple[Callable[[Any], bool], ...] = ()
    has_default: bool = False
    sources: tuple[str, ...] = ()


class WorkflowBuilder:
    """Declares a workflow graph; :meth:`build` checks it and returns a :class:`Workflow`.

    Executors are referenced by the object (registering it) or by id (resolved at
    build time, so order does not matter). Cycles are allowed.

    Args:
        name: workflow name (recorded in checkpoints and logs).
        start: the executor that receives the run's input.
        max_supersteps: bound on one run (``SuperstepLimitExceeded`` beyond it).
        restart: how failed executors are restarted; None (default) fails fast.
        strict_routing: a sent value whose type some target handles, but that every
            condition declines (a ``when``, a switch without ``Default``, a fan-out
            selector choosing nobody), reaches no executor. By default that is the
            graph's choice, reported as a ``MessageDroppedEvent`` and an INFO log
            line; with ``strict_routing=True`` it fails the run with
            ``MessageDropped`` (an ``UnroutableMessage``), as a value no target
            handles always does.
    """

    def __init__(
        self,
        name: str,
        start: Executor,
        *,
        max_supersteps: int = 1000,
        restart: RestartPolicy | None = None,
        strict_routing: bool = False,
    ) -> None:
        if not name:
            raise ValueError("a workflow needs a non-empty name")
        if max_supersteps < 1:
            raise ValueError(f"max_supersteps must be >= 1, got {max_supersteps}")
        self._name = name
        self._executors: dict[str, Executor] = {}
        self._problems: list[str] = []
        self._edges: list[_Edge] = []
        self._max_supersteps = max_supersteps
        self._start = self._register(start)
        self._restart = restart
        self._restart_overrides: dict[str, RestartPolicy] = {}
        self._strict_routing = strict_routing

    # --- declaring ---------------------------------------------------------------

    def add_executor(self, executor: Executor) -> WorkflowBuilder:
        """Register an executor without an edge (it must still be reachable)."""
        self._register(executor)
        return self

    def add_edge(
        self, source: ExecutorRef, target: ExecutorRef, *, when: Callable[[Any], bool] | None = None
    ) -> WorkflowBuilder:
        """Send what ``source`` sends to ``target`` (if ``when(value)`` holds, when given)."""
        self._edges.append(
            _Edge(EdgeKind.DIRECT, self._register(source), (self._register(target),), when=when)
        )
        return self

    def add_fan_out(
        self,
        source: ExecutorRef,
        targets: Sequence[ExecutorRef],
        *,
        select: Callable[[Any, list[str]], Sequence[str]] | None = None,
    ) -> WorkflowBuilder:
        """Send to every target (or to those ``select(value, target_ids)`` returns)."""
        ids = tuple(self._register(t) for t in targets)
        if not ids:
            self._problems.append(f"fan-out from {self._ref_id(source)!r} has no targets")
        self._edges.append(_Edge(EdgeKind.FAN_OUT, self._register(source), ids, select=select))
        return self

    def add_fan_in(self, sources: Sequence[ExecutorRef], target: ExecutorRef) -> WorkflowBuilder:
        """Deliver one list to ``target`` once every source has sent a value.

        The list is in the order of ``sources``; ``target`` needs a ``list[T]`` handler.
        """
        ids = tuple(self._register(s) for s in sources)
        if len(set(ids)) != len(ids) or not ids:
            self._problems.append(f"fan-in into {self._ref_id(target)!r} needs distinct sources")
        self._edges.append(_Edge(EdgeKind.FAN_IN, "", (self._register(target),), sources=ids))
        return self

    def add_switch(self, source: ExecutorRef, cases: Sequence[Case | Default]) -> WorkflowBuilder:
        """Send to the target of the first :class:`Case` that holds, else the :class:`Default`."""
        src = self._register(source)
        predicates: list[Callable[[Any], bool]] = []
        targets: list[str] = []
        default: str | None = None
        for index, case in enumerate(cases):
            if isinstance(case, Case):
                predicates.append(case.predicate)
                targets.append(self._register(case.target))
            elif isinstance(case, Default) and index == len(cases) - 1:
                default = self._register(case.target)
            else:
                self._problems.append(
                    f"switch from {src!r}: entry {index} must be a Case, or a Default as the last entry"
                )
        if default is not None:
            targets.append(default)
        self._edges.append(
            _Edge(
                EdgeKind.SWITCH,
                src,
                tuple(targets),
                predicates=tuple(predicates),
                has_default=default is not None,
            )
        )
        return self

    def set_restart(self, executor: ExecutorRef, policy: RestartPolicy | None) -> WorkflowBuilder:
        """Override the workflow's restart policy for one executor (None: fail fast)."""
        executor_id = self._register(executor)
        if policy is None:
            policy = RestartPolicy(max_restarts=0)
        self._restart_overrides[executor_id] = policy
        return self

    # --- building ----------------------------------------------------------------

    def build(self, *, backend: ActorBackend | None = None) -> Workflow:
        """Check the whole graph and compile it into an immutable ``Workflow``.

        Args:
            backend: where executors are hosted (default: threads of this process);
                ``actorflow.RayBackend()`` puts each in a Ray worker process.

        Raises:
            GraphError: listing every problem found (unknown or duplicate ids,
                unreachable executors, handlers that cannot be routed, edges no
                handler accepts, state that cannot be encoded).
        """
        spec = self._compile()
        return Workflow(
            spec, restart=self._restart, restart_overrides=self._restart_overrides, backend=backend
        )

    def _compile(self) -> GraphSpec:
        problems = list(self._problems)
        infos: dict[str, tuple[HandlerInfo, ...]] = {}
        for executor_id, executor in self._executors.items():
            try:
                infos[executor_id] = type(executor)._af_handler_infos()
            except GraphError as exc:
                problems.extend(exc.problems)
                infos[executor_id] = ()
                continue
            if not infos[executor_id]:
                problems.append(
                    f"executor {executor_id!r} ({type(executor).__qualname__}) has no @handler methods"
                )
        edges = [self._resolve(edge, problems) for edge in self._edges]
        accepts = {
            eid: Accepts(eid, [i.spec for i in hs if not i.is_response])
            for eid, hs in infos.items()
        }
        out: dict[str, list[OutEdge]] = {eid: [] for eid in self._executors}
        fan_in: list[tuple[str, tuple[str, ...]]] = []
        for edge in edges:
            if edge is None:
                continue
            if edge.kind == EdgeKind.FAN_IN:
                group = len(fan_in)
                fan_in.append((edge.targets[0], edge.sources))
                target = edge.targets[0]
                if not any(i.spec.list_items for i in infos.get(target, ())):
                    problems.append(
                        f"fan-in target {target!r} needs a handler taking list[T] (it gets one list)"
                    )
                for src in edge.sources:
                    out[src].append(
                        OutEdge(
                            EdgeKind.FAN_IN, edge.targets, group=group, accepts=(accepts[target],)
                        )
                    )
                continue
            out[edge.source].append(
                OutEdge(
                    edge.kind,
                    edge.targets,
                    when=edge.when,
                    select=edge.select,
                    predicates=edge.predicates,
                    has_default=edge.has_default,
                    accepts=tuple(accepts[t] for t in edge.targets),
                )
            )
        self._check_reachable(edges, problems)
        self._check_declared_sends(infos, out, problems)
        blueprints = self._encode_blueprints(problems)
        if problems:
            raise GraphError(problems)
        programs = {
            eid: ExecutorProgram(
                executor_id=eid,
                cls=type(ex),
                blueprint=blueprints[eid],
                blueprint_digests=tuple(hashlib.sha256(c).hexdigest() for c in blueprints[eid]),
                timeout=ex.timeout,
                edges=tuple(out[eid]),
                # Duck-typed so that Executor needs no knowledge of sub-workflows.
                code=getattr(ex, "_af_code", None),
                strict_routing=self._strict_routing,
            )
            for eid, ex in self._executors.items()
        }
        description = describe(self._name, self._start, infos, programs, fan_in)
        return GraphSpec(
            name=self._name,
            start=self._start,
            programs=programs,
            fan_in=tuple(fan_in),
            accepts=accepts,
            description=description,
            max_supersteps=self._max_supersteps,
        )

    def _register(self, ref: object) -> str:
        if isinstance(ref, Executor):
            known = self._executors.get(ref.id)
            if known is None:
                self._executors[ref.id] = ref
            elif known is not ref:
                self._problems.append(
                    f"two different executors share the id {ref.id!r}; ids must be unique"
                )
            return ref.id
        if isinstance(ref, str):
            return ref
        self._problems.append(f"expected an Executor or an executor id, got {ref!r}")
        return repr(ref)

    def _ref_id(self, ref: ExecutorRef) -> str:
        return ref.id if isinstance(ref, Executor) else str(ref)

    def _resolve(self, edge: _Edge, problems: list[str]) -> _Edge | None:
        names = [edge.source] if edge.source else []
        names += list(edge.sources) + list(edge.targets)
        unknown = [n for n in names if n not in self._executors]
        for name in unknown:
            problems.append(
                f"{edge.kind} refers to unknown executor id {name!r}; pass the Executor "
                "object once (to start=, add_executor or any edge) before referring to its id"
            )
        return None if unknown else edge

    def _check_reachable(self, edges: list[_Edge | None], problems: list[str]) -> None:
        nexts: dict[str, set[str]] = {eid: set() for eid in self._executors}
        for edge in edges:
            if edge is None:
                continue
            for src in edge.sources or (edge.source,):
                nexts[src].update(edge.targets)
        seen = {self._start}
        frontier = [self._start]
        while frontier:
            for nxt in nexts.get(frontier.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        for eid in self._executors:
            if eid not in seen:
                problems.append(f"executor {eid!r} is unreachable from the start {self._start!r}")

    def _check_declared_sends(
        self,
        infos: dict[str, tuple[HandlerInfo, ...]],
        out: dict[str, list[OutEdge]],
        problems: list[str],
    ) -> None:
        for eid, handlers in infos.items():
            declared = _declared_sends(type(self._executors[eid]), handlers)
            if declared is None:
                continue
            for tp in declared:
                probe = _Probe(tp)
                if not any(
                    probe.matches(acc, edge.kind) for edge in out[eid] for acc in edge.accepts
                ):
                    fix = (
                        "add an edge or a handler"
                        if out[eid]
                        else "add an edge from it, or, if it sends nothing, annotate ctx as "
                        "af.Context[None] (ctx.output takes any value)"
                    )
                    problems.append(
                        f"executor {eid!r} declares it sends {type_label(tp)} (the T of its "
                        f"handlers' ctx: af.Context[T]), but no out-edge target has a handler "
                        f"for it; {fix}"
                    )
            for edge in out[eid]:
                for target, acc in zip(edge.targets, edge.accepts, strict=True):
                    if declared and not any(_Probe(tp).matches(acc, edge.kind) for tp in declared):
                        labels = ", ".join(type_label(t) for t in declared)
                        problems.append(
                            f"edge {eid!r} -> {target!r}: {target!r} has no handler for any "
                            f"type {eid!r} sends ({labels})"
                        )

    def _encode_blueprints(self, problems: list[str]) -> dict[str, tuple[bytes, ...]]:
        blueprints: dict[str, tuple[bytes, ...]] = {}
        for eid, executor in self._executors.items():
            try:
                blueprints[eid] = tuple(encode_state(executor.snapshot()))
            except ActorflowError as exc:
                problems.append(
                    f"executor {eid!r} ({type(executor).__qualname__}): its initial state "
                    f"cannot be encoded: {exc}"
                )
        return blueprints


class _Probe:
    """Checks a declared send type against a target's handlers at build time."""

    __slots__ = ("_tp",)

    def __init__(self, tp: type) -> None:
        self._tp = tp

    def matches(self, acc: Accepts, kind: str) -> bool:
        classes = acc._items if kind == EdgeKind.FAN_IN else acc._classes
        return any(issubclass(self._tp, c) for c in classes)


def _declared_sends(cls: type, handlers: tuple[HandlerInfo, ...]) -> list[type] | None:
    """Types the handlers declare with ``Context[T]``; None if any handler is undeclared.

    ``Context[None]`` declares that a handler sends nothing.
    """
    declared: list[type] = []
    for info in handlers:
        hints = typing.get_type_hints(getattr(cls, info.name))
        ctx_hint = next((h for n, h in hints.items() if typing.get_origin(h) is Context), None)
        if ctx_hint is None:
            return None
        args = typing.get_args(ctx_hint)
        spec = parse_type_spec(args[0]) if args else None
        if spec is None or object in spec.classes:
            return None
        # ``Context[None]``: the handler sends nothing (``ctx.output`` only, or nothing).
        declared.extend(c for c in spec.classes if c not in declared and c is not _NONE)
    return declared if handlers else None


_NONE = type(None)
