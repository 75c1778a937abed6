"""``actorflow graph MODULE:ATTRIBUTE [--format mermaid]``: draw a workflow graph."""

from __future__ import annotations

import argparse

from actorflow.runtime import Workflow

from ._workflows import load_workflow

__all__ = ["mermaid", "register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``graph`` to the ``actorflow`` parser."""
    graph = commands.add_parser("graph", help="draw a workflow graph")
    graph.add_argument("target", help="MODULE:ATTRIBUTE of a Workflow or a function returning one")
    graph.add_argument("--format", choices=["mermaid"], default="mermaid")
    graph.set_defaults(func=_graph)


def _graph(args: argparse.Namespace) -> int:
    workflow = load_workflow(args.target, "graph")
    try:
        print(mermaid(workflow))
    finally:
        workflow.close()
    return 0


def mermaid(workflow: Workflow) -> str:
    """The graph as a Mermaid flowchart."""
    description = workflow.describe()
    lines = ["flowchart LR"]
    for eid, info in description["executors"].items():
        label = f"{eid}<br/>{info['type'].rsplit('.', 1)[-1]}"
        shape = f"(({label}))" if eid == description["start"] else f"[{label}]"
        lines.append(f"    {_node(eid)}{shape}")
    for kind, src, targets, conditional in description["edges"]:
        arrow = "-.->" if conditional else "-->"
        label = "" if kind == "edge" else f"|{kind}|"
        lines.extend(f"    {_node(src)} {arrow}{label} {_node(t)}" for t in targets)
    for target, sources in description["fan_in"]:
        lines.extend(f"    {_node(s)} -->|fan_in| {_node(target)}" for s in sources)
    return "\n".join(lines)


def _node(executor_id: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in executor_id)
