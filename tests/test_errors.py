"""The error tree in actorflow.errors' docstring is the module's hierarchy, whole."""

from __future__ import annotations

import re

from actorflow import errors

_LINE = re.compile(r"(?P<indent> *)(?P<name>_?[A-Z]\w*)(?: \(also (?P<also>[\w, ]+)\))?(?::.*)?")


def _tree() -> list[tuple[str, str | None, list[str]]]:
    """(class, parent in the tree, the names after ``also``) for each line of the tree."""
    doc = errors.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    stack: list[tuple[int, str]] = []
    rows = []
    for line in block.splitlines():
        found = _LINE.fullmatch(line)
        assert found, f"not a line of the tree: {line!r}"
        depth = len(found["indent"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else None
        also = [n.strip() for n in found["also"].split(",")] if found["also"] else []
        rows.append((found["name"], parent, also))
        stack.append((depth, found["name"]))
    return rows


def _classes() -> dict[str, type]:
    """Every ActorflowError class defined in the module, private ones included."""
    return {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, errors.ActorflowError)
        and value.__module__ == errors.__name__
    }


def test_every_error_class_is_in_the_tree_and_nothing_else() -> None:
    listed = {name for name, _parent, _also in _tree()}
    classes = set(_classes())
    assert classes - listed == set(), "add these to the tree in actorflow/errors.py"
    assert listed - classes == set(), "the tree names classes the module does not define"


def test_the_tree_is_the_hierarchy() -> None:
    """Each class stands under each of its bases from the module, and ``also`` names
    its other bases, in order."""
    classes = _classes()
    under: dict[str, set[str]] = {}
    for name, parent, also in _tree():
        cls = classes[name]
        bases = [base.__name__ for base in cls.__bases__]
        if parent is None:
            assert cls is errors.ActorflowError
            continue
        assert parent in bases, f"{name} is listed under {parent}; its bases are {bases}"
        assert also == [b for b in bases if b != parent], f"{name}: also {also}, bases {bases}"
        under.setdefault(name, set()).add(parent)
    for name, cls in classes.items():
        ours = {b.__name__ for b in cls.__bases__ if issubclass(b, errors.ActorflowError)}
        assert under.get(name, set()) == ours, name
