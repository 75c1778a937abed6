"""Layouts for the two pictures: a session's lineage and a workflow graph.

Only coordinates and labels are computed here; the templates draw them as inline
SVG (so every label is escaped like any other text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from actorflow.storage import Checkpoint

__all__ = ["GraphPicture", "LineagePicture", "graph_picture", "lineage_picture"]

LIMIT = 200
"""Newest checkpoints drawn in a lineage picture (the table lists them all)."""

EM = 0.62
"""The widest average character of the page's fonts, in em: labels are given this
much room per character (wider than the text ever is), so no label is clipped."""


def text_width(text: str, font_px: float) -> float:
    """Room for ``text`` at ``font_px`` (generous: see :data:`EM`)."""
    return len(text) * font_px * EM + 8.0


@dataclass
class LineagePicture:
    nodes: list[dict[str, Any]]
    edges: list[tuple[float, float, float, float]]
    width: float
    height: float
    lanes: list[tuple[float, str]]
    """(y, label) of each lane: the main line, forks and resets."""
    hidden: int
    """Older checkpoints not drawn."""


def lineage_picture(
    cps: list[Checkpoint],
    *,
    forked_from: tuple[str, str] | None = None,
    forks_out: list[tuple[str, str, str]] = (),  # type: ignore[assignment]  # read only
) -> LineagePicture:
    """Checkpoints left to right in time; a fork (a second child of one checkpoint)
    opens a lane below; a reset (a new root) starts a lane of its own.

    Args:
        cps: the session's checkpoints, oldest first.
        forked_from: (session, checkpoint id) this session was forked from, if any.
        forks_out: (parent id, session, first checkpoint id) of each other session
            forked from one of ``cps``: drawn as a hollow node linking to it.
    """
    hidden = max(0, len(cps) - LIMIT)
    shown = cps[hidden:]
    lane_of: dict[str, int] = {}
    lane_tip: list[str] = []  # the newest checkpoint of each lane
    labels: list[str] = []
    children: dict[str, int] = {}
    step, top, gap = 40.0, 36.0, 50.0
    nodes: list[dict[str, Any]] = []
    where: dict[str, tuple[float, float]] = {}
    for i, cp in enumerate(shown):
        parent = cp.parent_id
        if parent is not None and parent in lane_of:
            n = children.get(parent, 0)
            children[parent] = n + 1
            if n == 0 and lane_tip[lane_of[parent]] == parent:
                lane = lane_of[parent]
            else:
                lane = len(lane_tip)
                lane_tip.append(cp.id)
                labels.append(f"fork of {parent}")
        elif parent is None or not lane_tip:
            lane = len(lane_tip)
            lane_tip.append(cp.id)
            if lane_tip[:-1]:
                labels.append("reset")
            elif forked_from is not None:
                labels.append(f"forked from {forked_from[0]} at {forked_from[1]}")
            else:
                labels.append("start")
        else:  # the parent is older than what is drawn (or in another session)
            lane = 0 if lane_tip else len(lane_tip)
        lane_of[cp.id] = lane
        lane_tip[lane] = cp.id
        x, y = 40.0 + i * step, top + lane * gap
        where[cp.id] = (x, y)
        nodes.append(
            {
                "id": cp.id,
                "x": x,
                "y": y,
                "kind": cp.kind.value,
                "superstep": cp.superstep,
                "title": f"{cp.kind.value} after superstep {cp.superstep} - {cp.id}",
                "href": f"/checkpoints/{cp.id}",
            }
        )
    outside: list[tuple[float, float, float, float]] = []
    for parent_id, session, child in forks_out:
        if parent_id not in where:
            continue
        px, py = where[parent_id]
        lane = len(lane_tip)
        lane_tip.append(child)
        labels.append(f"fork into session {session}")
        x, y = px + step, top + lane * gap
        outside.append((px, py, x, y))
        nodes.append(
            {
                "id": child,
                "x": x,
                "y": y,
                "kind": "fork",
                "superstep": "",
                "title": f"forked into session {session}",
                "href": "/sessions/" + quote(session, safe=""),
            }
        )
    edges = [
        (*where[cp.parent_id], *where[cp.id])
        for cp in shown
        if cp.parent_id is not None and cp.parent_id in where
    ]
    edges += outside
    lanes = [(top + i * gap, label) for i, label in enumerate(labels)]
    width = max(
        [80.0 + max(len(shown) - 1, 0) * step, *(4.0 + text_width(label, 10.0) for label in labels)]
    )
    width = max([width, *(float(n["x"]) + 20.0 for n in nodes)])  # a fork-out node too
    height = top + max(len(lane_tip), 1) * gap
    return LineagePicture(nodes, edges, width, height, lanes, hidden)


@dataclass
class GraphPicture:
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    width: float
    height: float


def graph_picture(
    description: dict[str, Any],
    *,
    inbox: frozenset[str] = frozenset(),
    asking: frozenset[str] = frozenset(),
) -> GraphPicture:
    """Executors in columns by distance from the start; edges as arrows (back edges,
    which close cycles, curve below). Executors in ``inbox`` (messages wait for them)
    and ``asking`` (their requests are pending) are marked."""
    executors = description.get("executors") or {}
    start = description.get("start")
    out: dict[str, list[tuple[str, str, bool]]] = {e: [] for e in executors}
    for kind, src, targets, conditional in description.get("edges") or []:
        for t in targets:
            out.setdefault(src, []).append((t, str(kind), bool(conditional)))
    for target, sources in description.get("fan_in") or []:
        for s in sources:
            out.setdefault(s, []).append((target, "fan_in", False))
    depth: dict[str, int] = {}
    frontier: list[str] = [str(start)] if start in executors else sorted(executors)[:1]
    for eid in frontier:
        depth[eid] = 0
    while frontier:
        nxt: list[str] = []
        for eid in frontier:
            for t, _, _ in out.get(eid, []):
                if t not in depth:
                    depth[t] = depth[eid] + 1
                    nxt.append(t)
        frontier = nxt
    for eid in sorted(executors):
        depth.setdefault(eid, max(depth.values(), default=-1) + 1)
    columns: dict[int, list[str]] = {}
    for eid in sorted(executors, key=lambda e: (depth[e], e)):
        columns.setdefault(depth[eid], []).append(eid)
    types = {
        eid: str((executors.get(eid) or {}).get("type", "")).rsplit(".", 1)[-1] for eid in executors
    }
    box_w = max(
        [
            130.0,
            *(text_width(eid, 13.0) + 12.0 for eid in executors),
            *(text_width(t, 11.0) + 12.0 for t in types.values()),
        ]
    )
    box_h, col_gap, row_gap = 44.0, 70.0, 26.0
    pos: dict[str, tuple[float, float]] = {}
    for col, ids in columns.items():
        for row, eid in enumerate(ids):
            pos[eid] = (20.0 + col * (box_w + col_gap), 20.0 + row * (box_h + row_gap))
    nodes = [
        {
            "id": eid,
            "x": x,
            "y": y,
            "w": box_w,
            "h": box_h,
            "type": types.get(eid, ""),
            "start": eid == start,
            "inbox": eid in inbox,
            "asking": eid in asking,
        }
        for eid, (x, y) in pos.items()
    ]
    edges: list[dict[str, Any]] = []
    backs: list[bool] = []
    for src, targets in out.items():
        for t, kind, conditional in targets:
            if src not in pos or t not in pos:
                continue
            (sx, sy), (tx, ty) = pos[src], pos[t]
            back = depth[t] <= depth[src]
            if back:  # a cycle: leave from the bottom, come back in from the bottom
                x1, y1, x2, y2 = sx + box_w / 2 + 10, sy + box_h, tx + box_w / 2 - 10, ty + box_h
                dip = max(y1, y2) + 40
                path = f"M{x1},{y1} C{x1},{dip} {x2},{dip} {x2},{y2 + 4}"
            else:
                x1, y1, x2, y2 = sx + box_w, sy + box_h / 2, tx - 4, ty + box_h / 2
                mid = (x1 + x2) / 2
                path = f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"
            edges.append({"path": path, "kind": kind, "conditional": conditional})
            backs.append(back)
    width = 40.0 + len(columns) * (box_w + col_gap)
    rows = max((len(ids) for ids in columns.values()), default=1)
    dips = any(backs)
    height = (70.0 if dips else 20.0) + rows * (box_h + row_gap)
    return GraphPicture(nodes, edges, width, height)
