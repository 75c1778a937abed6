"""Deleting a session: every record of its id, taken away under its lease."""

from __future__ import annotations

from actorflow.errors import SessionOwned
from actorflow.storage import CheckpointStore, check_session_id

from ._ownership import DEFAULT_LEASE_TTL, acquire

__all__ = ["delete_session"]


def delete_session(store: CheckpointStore, session: str, *, wait: float = 0.0) -> int:
    """Delete every record of ``session`` from ``store``: its checkpoints, so its state,
    its history and the requests it waits on. Returns how many records went (0: the
    store held none).

    The session's lease is held meanwhile, as a session opened for writing holds it,
    so nobody writes to the session while it goes: a session open for writing (in
    this process or another) makes the call raise :class:`~actorflow.SessionOwned`
    once ``wait`` seconds have passed, and a dead owner's lease is taken over as an
    open would. Close that session first. Afterwards the id is free: a session opened
    under it starts afresh. Request ids never repeat within the life of a session id
    (``docs/sessions.md``); deleting the session ends that life, so a new session
    under the same id can hand out the old ids again.

    >>> import actorflow as af
    >>> class Count(af.Executor):
    ...     @af.handler
    ...     def on_number(self, n: int, ctx: af.Context[None]) -> None:
    ...         ctx.output(n)
    >>> store = af.MemoryStore()
    >>> with af.WorkflowBuilder("count", start=Count("count")).build() as wf:
    ...     with wf.session("customer-7", store=store) as session:
    ...         session.run(1).outputs
    ...     af.delete_session(store, "customer-7") > 0, store.latest(session="customer-7")
    [1]
    (True, None)

    Raises:
        SessionOwned: a live lease holds the session when ``wait`` runs out.
        StoreLocked: a lock of the store stayed held past the bound.
        ValueError: ``wait`` is out of range, or ``session`` is not a non-empty string.
    """
    check_session_id(session, "session")
    try:
        ownership = acquire(store, session, ttl=DEFAULT_LEASE_TTL, wait=wait)
    except SessionOwned as exc:
        raise SessionOwned(exc.holder, doing="cannot delete it while it is open") from None
    try:
        return store.prune(session, 0)
    finally:
        ownership.release()
