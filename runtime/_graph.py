"""The compiled graph and its signature.

The signature is a hash of a canonical description of the graph: executor ids
and types, handler types, edges. It uses only names (wire names of registered
types, module-qualified names otherwise), never ``id()`` or ``hash()``, so it is
the same in every process and Python run. The description itself travels with
each checkpoint, so a mismatch can say *what* differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from actorflow.actors import stable_name
from actorflow.errors import GraphMismatch

from ._runner import ExecutorProgram
from .graph import Accepts, EdgeKind, HandlerInfo, a_label

__all__ = ["GraphSpec", "describe", "edge_labels", "explain_mismatch", "signature_of"]


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """A checked, compiled workflow graph. Immutable; shared by all runs."""

    name: str
    """Workflow name."""
    start: str
    """Id of the executor that receives the input."""
    programs: Mapping[str, ExecutorProgram]
    """Executor id -> what its actor runs."""
    fan_in: tuple[tuple[str, tuple[str, ...]], ...]
    """Fan-in groups by index: (target, sources in list order)."""
    accepts: Mapping[str, Accepts]
    """Executor id -> its handler table (for checking inputs and answers)."""
    description: dict[str, Any]
    """Canonical description (JSON-able) the signature hashes."""
    max_supersteps: int
    """Default bound on one run."""
    signature: str = ""
    """Hex digest of :attr:`description` (computed once, at build time)."""
    timeouts: Mapping[str, float] = field(init=False, compare=False, repr=False)
    """Executor id -> its superstep time limit, for the executors that have one."""

    def __post_init__(self) -> None:
        if not self.signature:
            object.__setattr__(self, "signature", signature_of(self.description))
        limits = {eid: p.timeout for eid, p in self.programs.items() if p.timeout is not None}
        object.__setattr__(self, "timeouts", limits)


def describe(
    name: str,
    start: str,
    infos: Mapping[str, tuple[HandlerInfo, ...]],
    programs: Mapping[str, ExecutorProgram],
    fan_in: list[tuple[str, tuple[str, ...]]],
) -> dict[str, Any]:
    """A canonical, JSON-able description of a graph (sorted, names only).

    An executor that carries code (a sub-workflow) adds its description under
    ``"nested"``, so a change inside a sub-workflow changes the signature too.
    """
    executors: dict[str, Any] = {}
    for eid, p in sorted(programs.items()):
        entry: dict[str, Any] = {
            "type": stable_name(p.cls),
            "handlers": sorted(
                ("response:" if h.is_response else "") + "|".join(h.spec.labels())
                for h in infos[eid]
            ),
        }
        if p.code is not None:
            entry["nested"] = p.code.describe()
        executors[eid] = entry
    edges = sorted(
        [edge.kind, eid, list(edge.targets), edge.when is not None or bool(edge.predicates)]
        for eid, p in programs.items()
        for edge in p.edges
        if edge.group < 0
    )
    groups = [[target, list(sources)] for target, sources in fan_in]
    return {"start": start, "executors": executors, "edges": edges, "fan_in": groups}


def edge_labels(programs: Mapping[str, ExecutorProgram]) -> list[tuple[str, str, str, str]]:
    """Every edge as ``(kind, source, target, label)``, sorted, for drawing the graph.

    ``label`` says what decides whether a value takes the edge: ``""`` for a plain
    edge; for a ``when`` edge the predicate's name (``"when"`` for a lambda); for a
    switch ``"case i: name"`` per case (``"case i"`` for a lambda; cases are tried in
    order) and ``"default"``;
    for a fan-out its selector's name (``"select"`` for a lambda; ``""`` without
    one); ``"fan_in"`` for a fan-in. Names are code, not state: they never enter the
    signature.
    """
    found: list[tuple[str, str, str, str]] = []
    for source, program in programs.items():
        for edge in program.edges:
            if edge.kind == EdgeKind.FAN_IN:
                found.extend((edge.kind, source, t, "fan_in") for t in edge.targets)
            elif edge.kind == EdgeKind.SWITCH:
                for index, predicate in enumerate(edge.predicates):
                    name = _callable_name(predicate)
                    label = f"case {index}: {name}" if name else f"case {index}"
                    found.append((edge.kind, source, edge.targets[index], label))
                if edge.has_default:
                    found.append((edge.kind, source, edge.targets[-1], "default"))
            elif edge.kind == EdgeKind.FAN_OUT:
                chosen = "" if edge.select is None else _callable_name(edge.select) or "select"
                found.extend((edge.kind, source, t, chosen) for t in edge.targets)
            else:
                label = "" if edge.when is None else _callable_name(edge.when) or "when"
                found.extend((edge.kind, source, t, label) for t in edge.targets)
    return sorted(found)


def _callable_name(fn: object) -> str:
    """A function's name, a callable object's class name; "" for a lambda."""
    name = getattr(fn, "__name__", None)
    if name is None:
        name = type(fn).__name__
    return "" if name == "<lambda>" else str(name)


def signature_of(description: Mapping[str, Any]) -> str:
    """Hash a description; stable across processes."""
    canonical = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def explain_mismatch(
    stored: Mapping[str, Any], current: Mapping[str, Any], path: str = ""
) -> GraphMismatch:
    """Build a :class:`GraphMismatch` that says what differs between two descriptions.

    Differences inside sub-workflows are named by their path, as in
    ``in sub-workflow 'outer': in sub-workflow 'inner': executor 'x' ...``.
    """
    where = f" in {path}" if path else ""
    detail = "; ".join(_differences(stored, current)) or "the graph signatures differ"
    return GraphMismatch(
        f"the checkpoint was taken on a different graph{where}: {detail}. Restore with the "
        "workflow that wrote it, or start a new session"
    )


_KNOWN_KEYS = frozenset({"start", "executors", "edges", "fan_in"})


def _differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    old_ex, new_ex = stored.get("executors", {}), current.get("executors", {})
    for eid in sorted(set(old_ex) | set(new_ex)):
        if eid not in new_ex:
            lines.append(f"executor {eid!r} is in the checkpoint but not in this graph")
        elif eid not in old_ex:
            lines.append(f"executor {eid!r} is in this graph but not in the checkpoint")
        elif old_ex[eid]["type"] != new_ex[eid]["type"]:
            lines.append(
                f"executor {eid!r} was {a_label(old_ex[eid]['type'])}, now "
                f"{a_label(new_ex[eid]['type'])} (if the class only moved or was renamed, "
                f"declare __actorflow_name__ = {old_ex[eid]['type']!r} on it to keep its "
                "stored name)"
            )
        elif old_ex[eid]["handlers"] != new_ex[eid]["handlers"]:
            lines.append(
                f"executor {eid!r} handled {old_ex[eid]['handlers']}, now {new_ex[eid]['handlers']}"
            )
        elif old_ex[eid].get("nested") != new_ex[eid].get("nested"):
            inner = _differences(old_ex[eid].get("nested") or {}, new_ex[eid].get("nested") or {})
            lines += [f"in sub-workflow {eid!r}: {line}" for line in inner] or [
                f"sub-workflow {eid!r} differs"
            ]
    old_edges = {json.dumps(e) for e in stored.get("edges", [])}
    new_edges = {json.dumps(e) for e in current.get("edges", [])}
    lines += [
        f"edge {e} is in the checkpoint but not in this graph"
        for e in sorted(old_edges - new_edges)
    ]
    lines += [
        f"edge {e} is in this graph but not in the checkpoint"
        for e in sorted(new_edges - old_edges)
    ]
    if stored.get("fan_in") != current.get("fan_in"):
        lines.append(f"fan-in groups differ: {stored.get('fan_in')} vs {current.get('fan_in')}")
    if stored.get("start") != current.get("start"):
        lines.append(f"start executor was {stored.get('start')!r}, now {current.get('start')!r}")
    for key in sorted((set(stored) | set(current)) - _KNOWN_KEYS):
        if stored.get(key) != current.get(key):
            lines.append(f"{key} was {stored.get(key)!r}, now {current.get(key)!r}")
    return lines
