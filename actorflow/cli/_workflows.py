"""The user's code a command names: a module (``checkpoints show --import``) or the
Workflow a ``MODULE:ATTRIBUTE`` argument names (``graph``, ``ui --workflow``).

One rule for every command: the current folder is importable, as under ``python -m``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from types import ModuleType

from actorflow.runtime import Workflow

from ._usage import Usage

__all__ = ["import_user_module", "load_workflow"]


def import_user_module(name: str, command: str) -> ModuleType:
    """Import the user's module ``name``, the current folder first on the path (as
    ``python -m`` has it), so a module beside the user is found from where they stand.

    ``command`` (``graph``, ``show --import``) starts each error message.

    Raises:
        Usage: one line saying why the import failed and what to do.
    """
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise Usage(
                f"{command}: no module named {name!r} in {here} or on the path; run from the "
                "folder that holds it, or add that folder to PYTHONPATH"
            ) from None
        raise Usage(f"{command}: importing {name!r} failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any import failure is reported as one line
        raise Usage(f"{command}: importing {name!r} failed: {type(exc).__name__}: {exc}") from None


def load_workflow(target: str, command: str) -> Workflow:
    """The Workflow ``MODULE:ATTRIBUTE`` names (or builds, when it is a no-argument function).

    ``command`` (``graph``, ``ui``) starts each error message.

    Raises:
        Usage: one line saying what is wrong with ``target`` and what to give instead.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise Usage(
            f"{command}: {target!r} is not MODULE:ATTRIBUTE; name a Workflow, or a function "
            "returning one, e.g. myapp.flows:build"
        )
    module = import_user_module(module_name, command)
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise Usage(f"{command}: module {module_name!r} has no attribute {attribute!r}") from None
    if isinstance(found, Workflow):
        return found
    if not callable(found):
        raise Usage(
            f"{command}: {target} is {type(found).__name__!r}, not a Workflow or a function "
            "returning one"
        )
    try:
        parameters = inspect.signature(found).parameters.values()
    except (TypeError, ValueError):
        parameters = []  # type: ignore[assignment]  # no signature to read: just call it
    needed = [
        p.name
        for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if needed:
        raise Usage(
            f"{command}: {target} needs arguments ({', '.join(needed)}); name a Workflow, or a "
            "function that builds one with no arguments"
        )
    try:
        made = found()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: one line, no traceback
        raise Usage(f"{command}: calling {target}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(made, Workflow):
        raise Usage(f"{command}: {target}() returned {type(made).__name__!r}, not a Workflow")
    return made
