"""How the supervisor names a failure: which executor, with what, and the error's type."""

from __future__ import annotations

__all__ = ["StepFailure", "qualname"]


def qualname(tp: type) -> str:
    """A type's name for events and messages (module-qualified unless builtin)."""
    return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"


class StepFailure(Exception):
    """One executor's part of a superstep failed: which one, and with what."""

    def __init__(self, executor: str, error: BaseException) -> None:
        super().__init__(executor)
        self.executor = executor
        self.error = error
