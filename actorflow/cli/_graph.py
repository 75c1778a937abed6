"""``actorflow graph MODULE:ATTRIBUTE [--format mermaid|dot]``: draw a workflow graph.

Mermaid (a flowchart GitHub and most Markdown viewers draw) or Graphviz ``dot``
(``actorflow graph app:build --format dot | dot -Tsvg > graph.svg``). The start
executor is round; a conditional edge is dashed and labelled with what decides it
(``Workflow.edges``: the predicate's name, ``when``, ``case i``, ``default``,
``select``), a fan-in edge is labelled ``fan_in``.
"""

from __future__ import annotations

import argparse
import json

from actorflow.runtime import Workflow

from ._workflows import load_workflow

__all__ = ["dot", "mermaid", "register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``graph`` to the ``actorflow`` parser."""
    graph = commands.add_parser("graph", help="draw a workflow graph (Mermaid or Graphviz dot)")
    graph.add_argument("target", help="MODULE:ATTRIBUTE of a Workflow or a function returning one")
    graph.add_argument(
        "--format",
        choices=["mermaid", "dot"],
        default="mermaid",
        help="mermaid (default): a Mermaid flowchart; dot: Graphviz",
    )
    graph.set_defaults(func=_graph)


def _graph(args: argparse.Namespace) -> int:
    workflow = load_workflow(args.target, "graph")
    try:
        print(dot(workflow) if args.format == "dot" else mermaid(workflow))
    finally:
        workflow.close()
    return 0


def _conditional(label: str) -> bool:
    """Whether a value may pass the edge by (a plain edge or a fan-in always takes it)."""
    return label not in ("", "fan_in")


def mermaid(workflow: Workflow) -> str:
    """The graph as a Mermaid flowchart."""
    description = workflow.describe()
    lines = ["flowchart LR"]
    for eid, info in description["executors"].items():
        label = _mermaid_text(f"{eid}<br/>{info['type'].rsplit('.', 1)[-1]}")
        shape = f"(({label}))" if eid == description["start"] else f"[{label}]"
        lines.append(f"    {_node(eid)}{shape}")
    for _kind, src, target, label in workflow.edges():
        arrow = "-.->" if _conditional(label) else "-->"
        text = f"|{_mermaid_text(label)}|" if label else ""
        lines.append(f"    {_node(src)} {arrow}{text} {_node(target)}")
    return "\n".join(lines)


def dot(workflow: Workflow) -> str:
    """The graph in Graphviz ``dot``."""
    description = workflow.describe()
    lines = [f"digraph {_dot_id(workflow.name)} {{", "    rankdir=LR;", "    node [shape=box];"]
    for eid, info in description["executors"].items():
        shown = f"label={_dot_id(eid + chr(10) + info['type'].rsplit('.', 1)[-1])}"
        if eid == description["start"]:
            shown += ", shape=ellipse, style=bold"
        lines.append(f"    {_dot_id(eid)} [{shown}];")
    for _kind, src, target, label in workflow.edges():
        attrs: list[str] = []
        if label:
            attrs.append(f"label={_dot_id(label)}")
        if _conditional(label):
            attrs.append("style=dashed")
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"    {_dot_id(src)} -> {_dot_id(target)}{suffix};")
    lines.append("}")
    return "\n".join(lines)


def _node(executor_id: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in executor_id)


def _mermaid_text(text: str) -> str:
    """Text Mermaid shows as it is: quoted, its own quotes as entities."""
    return '"' + text.replace('"', "#quot;") + '"'


def _dot_id(text: str) -> str:
    """A dot double-quoted string (JSON's escaping is a subset dot reads the same way)."""
    return json.dumps(text, ensure_ascii=False)
