"""The import layers of docs/architecture.md ("Layout"), and no import cycle at all.

The contracts are import-linter's, in pyproject.toml ([tool.importlinter]): the
layers (front -> runtime -> actors | storage -> errors | _msgpack | _version,
indirect chains included) and the private modules (``actorflow.x._y`` is imported
only from inside ``actorflow.x``). The cycle check is grimp's graph read directly:
every import counts, those under ``TYPE_CHECKING`` and inside functions too, and
so do the package ``__init__`` modules.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _lint(contract: str) -> None:
    """Run one contract of pyproject.toml with the lint-imports CLI."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
            "--no-logo",
            "--contract",
            contract,
            "pyproject.toml",
        ],
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(done.stdout + done.stderr, pytrace=False)


def test_imports_point_down_the_layers() -> None:
    """A front module (cli, ui, testing, otel, __main__, _demo) may import the runtime,
    the runtime actors and storage, which never import each other or anything above,
    and everything may import errors, _msgpack and _version, which import nothing of
    ours. Every module of actorflow/ has its layer."""
    _lint("layers")


def test_no_module_imports_a_private_module_of_another_package() -> None:
    """``actorflow.x._y`` is imported by ``actorflow.x`` and what lies inside it, nowhere
    else: another package uses ``actorflow.x``'s own names (its ``__init__``)."""
    _lint("private-modules")


def test_no_import_cycle() -> None:
    graph = grimp.build_graph("actorflow", cache_dir=None)  # TYPE_CHECKING imports included
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    circles = [_shortest_cycle(component, edges) for component in _components(edges)]
    report = "\n".join(
        f"{' -> '.join(cycle)}  (one of the cycles among {len(members)} modules: "
        f"{', '.join(sorted(members))})"
        for cycle, members in circles
    )
    if circles:
        pytest.fail(f"import cycles:\n{report}", pytrace=False)


def test_the_cycle_check_sees_imports_in_functions_and_type_checking_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph the cycle check reads counts the imports a top-level-only reading misses."""
    package = tmp_path / "circles"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    from . import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("circles", cache_dir=None)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    [(cycle, members)] = [_shortest_cycle(c, edges) for c in _components(edges)]
    assert members == {"circles.a", "circles.b", "circles.c"}
    assert cycle == ["circles.a", "circles.b", "circles.c", "circles.a"]


def _components(edges: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _shortest_cycle(
    members: set[str], edges: Mapping[str, Iterable[str]]
) -> tuple[list[str], set[str]]:
    """A shortest cycle through the first module of ``members`` (breadth first)."""
    start = min(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges[node]):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start], members
            if child in members and child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start}")  # a component always has one
