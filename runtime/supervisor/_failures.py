"""How the supervisor names a failure: which executor, with what, and the error's type."""

from __future__ import annotations

import os
import traceback

from actorflow.errors import RunFailed

__all__ = ["StepFailure", "error_type_of", "qualname", "short_traceback"]

TRACEBACK_FRAMES = 6
"""Frames kept of a failure's traceback in the session's history (the innermost)."""
TRACEBACK_CHARS = 4000
"""At most this much text of it (its end, where the error was raised)."""
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(__file__))) + os.sep
"""The installed ``actorflow`` package's folder: frames there are the runtime's own."""


def qualname(tp: type) -> str:
    """A type's name for events and messages (module-qualified unless builtin)."""
    return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"


def error_type_of(error: BaseException) -> str:
    """The qualified name of the exception type a handler's ``error`` stands for: its
    own, or, when a run the handler ran failed (a sub-workflow's inner run), the type
    that run failed with: the one a caller of the parent run wants to know."""
    inner = getattr(error, "error_type", None)
    if isinstance(error, RunFailed) and isinstance(inner, str) and inner:
        return inner
    return qualname(type(error))


class StepFailure(Exception):
    """One executor's part of a superstep failed: which one, and with what."""

    def __init__(self, executor: str, error: BaseException) -> None:
        super().__init__(executor)
        self.executor = executor
        self.error = error


def short_traceback(error: BaseException) -> str:
    """The innermost frames of where ``error`` was raised, as text ("" if it has none).

    What the history keeps of a handler's failure: enough to find the line, never a
    whole deep stack (entries are stored with every checkpoint that carries them).
    """
    if error.__traceback__ is None:
        return ""
    frames: list[traceback.FrameSummary] = list(traceback.extract_tb(error.__traceback__))
    # The handler's own frames are those after the runtime's last one (it called it).
    ours = [i for i, frame in enumerate(frames) if frame.filename.startswith(_PACKAGE)]
    if ours and ours[-1] + 1 < len(frames):
        frames = frames[ours[-1] + 1 :]
    frames = frames[-TRACEBACK_FRAMES:]
    text = "".join(traceback.format_list(frames))
    text += "".join(traceback.format_exception_only(type(error), error))
    return text[-TRACEBACK_CHARS:]
