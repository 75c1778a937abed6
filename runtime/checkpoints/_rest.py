"""Whether a session's newest cut leaves it at rest: stopped as asked, between runs.

A session at rest can take a newer cut that hides nothing (``Session.save``: new
metadata, say), and a service reports it idle. Its newest cut is one of:

- ``final``: its last run went idle;
- ``halt`` whose run was cancelled: it stopped at a barrier as asked (a failed run's
  ``halt`` says why it failed, and a newer cut would hide that);
- a cut ``Session.save`` wrote with messages in flight (a fork from the middle of a
  run), marked with :data:`SAVED_KEY`: unmarked, a ``step`` cut with messages in
  flight may be the last of a run whose process died, whose unfinished superstep's
  finished parts hang off it.
"""

from __future__ import annotations

from typing import Final

from actorflow.storage import Checkpoint, CheckpointKind

__all__ = ["SAVED_KEY", "at_rest", "cancelled"]

SAVED_KEY: Final = "actorflow.saved"
"""The metadata key (value ``True``) of a cut ``Session.save`` wrote with messages in
flight: no run wrote it. (A save of an idle session writes a ``final`` cut, which
needs no mark.)"""


def cancelled(cp: Checkpoint) -> bool:
    """Whether ``cp`` is the ``halt`` cut of a cancelled run (not of a failed one)."""
    if cp.kind is not CheckpointKind.HALT:
        return False
    ends = [e.kind for e in cp.history if e.kind in ("run_failed", "run_cancelled")]
    return bool(ends) and ends[-1] == "run_cancelled"


def at_rest(cp: Checkpoint) -> bool:
    """Whether the session whose newest cut is ``cp`` is at rest (see the module)."""
    return cp.kind is CheckpointKind.FINAL or cp.metadata.get(SAVED_KEY) is True or cancelled(cp)
