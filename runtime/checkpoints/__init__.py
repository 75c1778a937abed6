"""Checkpoints as the runtime writes and reads them: cuts of a session's lineage.

``_checkpointing`` writes a lineage's cuts through the store (:class:`Checkpointer`)
and reads one back to resume (:func:`load_for_resume`, :class:`Restored`);
``_state`` is the in-flight state a cut holds (:class:`RunState`, packed once per
cut), ``_lineage`` the lineage a resumed session continues (and the tag of its
request ids), ``_migration`` the stored executor states brought to the current
code's versions, ``_rest`` whether a newest cut leaves its session at rest
(stopped as asked, between runs). A new kind of checkpoint, or a new field of one,
goes here.
"""

from ._checkpointing import (
    Checkpointer,
    FailedAttempt,
    Restored,
    check_runtime,
    check_runtime_bytes,
    load_for_resume,
)
from ._lineage import Lineage, effect_scope
from ._migration import prepare_snapshots
from ._rest import SAVED_KEY, at_rest, cancelled
from ._state import RunState, decode_runtime

__all__ = [
    "SAVED_KEY",
    "Checkpointer",
    "FailedAttempt",
    "Lineage",
    "Restored",
    "RunState",
    "at_rest",
    "cancelled",
    "check_runtime",
    "check_runtime_bytes",
    "decode_runtime",
    "effect_scope",
    "load_for_resume",
    "prepare_snapshots",
]
