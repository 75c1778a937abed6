"""Sessions: a workflow's live instances, and what they run on.

:class:`Session` is composed of collaborators that own their state: its turn (one
thing at a time, closing: ``_turn``), its answers (``_answers``), its run jobs
(the steps of one run, the driver and the supervisor actor: ``_jobs``) and its
async side (``_async``); events reach the caller through the sinks of
``_delivery``. Opening one for writing (its lease, which lineage it continues) is
``_opening`` (off the caller's event loop: ``_off_loop``), the lease's renewal
``_ownership``; deleting a session under its lease, ``_deletion``. :class:`Engine` holds what sessions need of their workflow; the
workflow owns it, and nothing here imports the workflow.
"""

from ._deletion import delete_session
from ._engine import Engine
from ._jobs import NO_INPUT
from ._off_loop import open_off_loop
from ._opening import (
    IfExists,
    check_open_options,
    open_private,
    open_session,
    resume_session,
)
from ._ownership import DEFAULT_LEASE_TTL, LOCK_WAIT_FLOOR
from ._session import Session

__all__ = [
    "DEFAULT_LEASE_TTL",
    "LOCK_WAIT_FLOOR",
    "NO_INPUT",
    "Engine",
    "IfExists",
    "Session",
    "check_open_options",
    "delete_session",
    "open_off_loop",
    "open_private",
    "open_session",
    "resume_session",
]
