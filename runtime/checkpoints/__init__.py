"""Checkpoints as the runtime writes and reads them: cuts of a session's lineage.

``_checkpointing`` writes a lineage's cuts through the store (:class:`Checkpointer`)
and reads one back to resume (:func:`load_for_resume`, :class:`Restored`);
``_state`` is the in-flight state a cut holds (:class:`RunState`, packed once per
cut), ``_lineage`` the lineage a resumed session continues (and the tag of its
request ids), ``_migration`` the stored executor states brought to the current
code's versions. A new kind of checkpoint, or a new field of one, goes here.
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
from ._state import RunState, decode_runtime

__all__ = [
    "Checkpointer",
    "FailedAttempt",
    "Lineage",
    "Restored",
    "RunState",
    "check_runtime",
    "check_runtime_bytes",
    "decode_runtime",
    "effect_scope",
    "load_for_resume",
    "prepare_snapshots",
]
