"""Random workflows from a small grammar: layers of executors joined by every edge kind.

:func:`draw` turns a seed into a spec (plain JSON, built by :func:`torture.flows.build`):

- a start worker, then one to four layers of one to three executors each;
- each layer joined to the one before by plain edges (some conditional), a fan-out
  (some with a selector), a switch on the value, or a fan-in of the layer before;
- workers of varied state shapes and sizes (counters, a growing log, a table, a blob
  of up to 70 KB, a matrix) whose handlers compute, sleep or block for a drawn time;
- askers, whose questions the driver answers after the run goes idle;
- sub-workflows (themselves drawn from the grammar) nested up to two deep;
- sometimes a cycle back to the start; every message carries a hop budget, so every
  run ends.

The same seed always gives the same spec; ``attempt`` draws another from the same
seed (the trial redraws a spec whose fault-free run is too long for a trial).
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["draw"]

Spec = dict[str, Any]


def draw(seed: int, attempt: int = 0, *, subflows: bool = True) -> Spec:
    """The torture workflow of ``seed`` (``attempt``: the next one the same seed gives)."""
    rng = random.Random(f"flow:{seed}:{attempt}")
    spec = _flow(rng, f"torture{seed}x{attempt}", depth=0, prefix="", subflows=subflows)
    spec["input"] = {"hops": rng.randint(2, 9), "value": rng.randint(1, 10_000)}
    spec["timeout"] = rng.choice([None, None, 1.5])
    spec["rounds"] = rng.choice([1, 1, 2, 3, 4])  # runs per session, one input each
    spec["seed"] = seed
    spec["attempt"] = attempt
    return spec


def _worker(rng: random.Random, node_id: str, *, terminal: bool, emit_msg: bool) -> Spec:
    return {
        "id": node_id,
        "kind": "worker",
        "options": {
            "mul": rng.randint(2, 9),
            "add": rng.randint(0, 50),
            "burst": rng.choice([1, 1, 1, 2]),
            "terminal": terminal,
            "emit_msg": emit_msg,
            "blob": rng.choice([0, 0, 64, 4096, 70_000]),
            "rows": rng.choice([0, 0, 3, 60]),
            "work": rng.choice(["sleep", "compute", "block"]),
            "work_ms": rng.choice([0, 0, 1, 3, 8, 20]),
            "tick": rng.choice([0, 0, 2, 3]),
        },
    }


def _node(
    rng: random.Random, node_id: str, *, depth: int, worker_only: bool, subflows: bool
) -> Spec:
    emit_msg = depth > 0  # inside a sub-workflow, outputs are passed on by its parent
    roll = rng.random()
    if not worker_only and roll < 0.12:
        return {
            "id": node_id,
            "kind": "asker",
            "options": {"terminal": False, "emit_msg": emit_msg},
        }
    if subflows and not worker_only and depth < 2 and roll < 0.27:
        inner = _flow(rng, f"{node_id}inner", depth=depth + 1, prefix=f"{node_id}-", subflows=True)
        return {"id": node_id, "kind": "sub", "flow": inner, "outputs": "send"}
    return _worker(rng, node_id, terminal=False, emit_msg=emit_msg)


def _end_where_nothing_leaves(nodes: list[Spec], edges: list[Spec]) -> None:
    """Make every executor without out-edges output what it would send (a send with no
    out-edge is an error, never a silent drop)."""
    sources = {e["src"] for e in edges if "src" in e}
    sources |= {s for e in edges if e["type"] == "fan_in" for s in e["srcs"]}
    for node in nodes:
        if node["id"] in sources:
            continue
        if node["kind"] == "sub":
            node["outputs"] = "output"
        else:
            node["options"]["terminal"] = True


def _flow(rng: random.Random, name: str, *, depth: int, prefix: str, subflows: bool) -> Spec:
    start = f"{prefix}s"
    nodes: list[Spec] = []
    edges: list[Spec] = []
    n_layers = rng.randint(1, 2 if depth else 4)
    cycle = depth == 0 and n_layers >= 2 and rng.random() < 0.4
    layers: list[list[str]] = [[start]]
    for li in range(1, n_layers + 1):
        last = li == n_layers
        prev = layers[-1]
        width = rng.choice([1, 2, 2, 3])
        ids = [f"{prefix}n{li}{chr(97 + i)}" for i in range(width)]
        pattern = rng.choice(["edges", "fan_out", "switch", "fan_in"])
        if pattern == "fan_in" and len(prev) < 2:
            pattern = "edges"
        if pattern in ("fan_out", "switch") and width < 2:
            pattern = "edges"
        for i, node_id in enumerate(ids):
            # A fan-in's target takes lists: only workers do. A cycle leaves from the
            # last layer's first node, a worker too.
            worker_only = (pattern == "fan_in" or (cycle and last)) and i == 0
            nodes.append(
                _node(rng, node_id, depth=depth, worker_only=worker_only, subflows=subflows)
            )
        if pattern == "fan_in":
            edges.append({"type": "fan_in", "srcs": list(prev), "dst": ids[0]})
            rest = ids[1:]
        elif pattern == "fan_out":
            select = rng.choice([None, None, 2, 3])
            edges.append(
                {"type": "fan_out", "src": rng.choice(prev), "dsts": ids, "select": select}
            )
            rest = []
        elif pattern == "switch":
            m = len(ids)
            cases = [[[m, r], ids[r]] for r in range(m - 1)]
            edges.append(
                {"type": "switch", "src": rng.choice(prev), "cases": cases, "default": ids[-1]}
            )
            rest = []
        else:
            rest = ids
        for node_id in rest:
            when = [rng.randint(2, 4), 0] if rng.random() < 0.25 else None
            edges.append({"type": "edge", "src": rng.choice(prev), "dst": node_id, "when": when})
        layers.append(ids)
    nodes.insert(0, _worker(rng, start, terminal=False, emit_msg=depth > 0))
    if cycle:
        edges.append(
            {
                "type": "edge",
                "src": layers[-1][0],
                "dst": start,
                "when": [rng.randint(2, 3), 1] if rng.random() < 0.5 else None,
            }
        )
    _end_where_nothing_leaves(nodes, edges)
    return {"name": name, "start": start, "nodes": nodes, "edges": edges}
