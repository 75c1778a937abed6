"""Stable names of classes: the same in every process, whether or not its module ran as ``__main__``.

Checkpoints and the wire name executor classes and unregistered types as
``module.QualName``. A class defined in a script run as ``python orders.py`` lives
in the module ``__main__``; the same class imported by another program lives in
``orders``. Both must have one name, or a session written by one cannot be
resumed by the other. So ``__main__`` is replaced by the name the script would
be imported under:

- run as ``python -m pkg.orders``: the module's spec name (``pkg.orders``);
- run as ``python path/orders.py``: the file's name, prefixed with the names of
  the enclosing folders that are packages (hold an ``__init__.py``).

A class may also declare its name: ``__actorflow_name__ = "orders.CreditCheck"``
(on the class itself, not inherited), which keeps old checkpoints resumable after
the class moves or is renamed. Code run with ``python -c`` or interactively has no
file: its classes stay ``__main__.<name>``.
"""

from __future__ import annotations

import functools
import os
import sys

__all__ = ["main_module_name", "module_name", "stable_name"]


def stable_name(cls: type) -> str:
    """``module.QualName`` of ``cls`` with ``__main__`` resolved (or its declared name)."""
    declared = cls.__dict__.get("__actorflow_name__")
    if isinstance(declared, str) and declared:
        return declared
    return f"{module_name(cls)}.{cls.__qualname__}"


def module_name(cls: type) -> str:
    """The module of ``cls`` as it would be imported (``__main__`` resolved, see above)."""
    module = cls.__module__
    return main_module_name() if module == "__main__" else module


@functools.cache
def main_module_name() -> str:
    """The import name of the module running as ``__main__`` (``"__main__"`` if it has none)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name and name != "__main__":
        return name
    file = getattr(main, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py"):
        return "__main__"
    folder, base = os.path.split(os.path.realpath(file))
    parts = [base[: -len(".py")]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, package = os.path.split(folder)
        parts.insert(0, package)
    if not all(part.isidentifier() for part in parts):
        return "__main__"
    return ".".join(parts)
