"""Session leases: one owner's hold on a session, as a store grants it.

A lease carries a *fencing token*. Every save the owner makes carries its lease, and
the store checks, in the same atomic step as the write, that the token is still the
session's current one: a writer whose lease was taken over (it paused, its host
lost the network, it was presumed dead) can never add a record to the lineage.

This module holds the type and what the built-in stores share about it: the checks
of arguments, the grant/renew/release rules on one session's lease row, and the
errors. Each store keeps the row in its own medium (MemoryStore: a dict under its
lock; FileStore: a small file under a per-session ``flock``; SQLiteStore: a table
row inside the save's transaction).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from actorflow.errors import HeldLease, LeaseLost, SessionOwned

__all__ = [
    "MAX_TTL",
    "Lease",
    "LeaseRow",
    "cancel_noted",
    "check_run_id",
    "check_ttl",
    "fence",
    "grant",
    "leaseless_check",
    "live",
    "renewed",
]

MAX_TTL = 1e9
"""The longest lease ttl a store grants, in seconds (~31 years).

It also bounds what a live lease can be: an expiry more than this far ahead of
the store's clock (``Infinity``, ``1e308``), or one that is no number at all
(``NaN``), can come from no grant or renewal, only from a damaged row. Such a
lease is expired, by one rule Python and SQL share (:func:`live`, the
PostgreSQL store's statements): its session can be taken over, and fencing then
refuses every later save of its token, so treating it as expired is safe."""


def live(expires_at: float, now: float) -> bool:
    """Whether an unreleased lease expiring at ``expires_at`` holds at ``now``.

    ``now < expires_at <= now + MAX_TTL``: false for ``NaN`` (every comparison
    with it is), for infinities and for absurd expiries. The SQL form,
    ``expires_at > now AND expires_at <= now + MAX_TTL``, agrees on PostgreSQL,
    which orders ``NaN`` above every number (so the second comparison fails).
    """
    return now < expires_at <= now + MAX_TTL


@dataclass(frozen=True, slots=True)
class Lease:
    """One owner's hold on a session, as the store granted it.

    Attributes:
        session: the session held.
        token: the fencing token; strictly greater than every token this session's
            lease ever had in this store, never reused, also across release.
        owner: who holds it, for humans (e.g. ``"pid 4242 on host-a (worker-3)"``).
        expires_at: epoch seconds by the store's clock; after it another opener
            may take the session over.
        cancel_requested: the id of a run another process asked the holder to
            cancel (``request_cancel``, see :class:`~actorflow.storage.CancelRequests`),
            or None. It is no part of the hold: fencing and renewal ignore it.
    """

    session: str
    token: int
    owner: str
    expires_at: float
    cancel_requested: str | None = None

    def remaining(self, now: float | None = None) -> float:
        """Seconds until :attr:`expires_at` (negative once expired), by the local clock."""
        return self.expires_at - (time.time() if now is None else now)

    @classmethod
    def of(cls, held: HeldLease) -> Lease:
        """The lease an error names (``SessionOwned.holder``, ``LeaseLost.lease``)."""
        if isinstance(held, Lease):
            return held
        return cls(held.session, held.token, held.owner, held.expires_at)


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """What a store keeps per session: the last token granted and whether it still holds.

    ``released`` rows keep their token so the next grant is greater (tokens are never
    reused, also across release). ``cancel``: the run a cancel was requested of while
    this lease held (see :func:`cancel_noted`); a grant starts without one.
    """

    token: int
    owner: str
    expires_at: float
    released: bool
    cancel: str | None = None

    def live(self, now: float) -> bool:
        """Whether the lease holds at ``now`` (unreleased and unexpired, see :func:`live`)."""
        return not self.released and live(self.expires_at, now)

    def as_lease(self, session: str) -> Lease:
        return Lease(session, self.token, self.owner, self.expires_at, self.cancel)


def check_ttl(ttl: float) -> float:
    """``ttl`` as a float; ValueError unless a finite number > 0 and <= :data:`MAX_TTL`."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise ValueError(f"a lease ttl must be a finite number of seconds, got {ttl!r}")
    if ttl <= 0:
        raise ValueError(f"a lease ttl must be > 0 seconds, got {ttl!r}")
    if ttl > MAX_TTL:
        raise ValueError(f"a lease ttl must be at most {MAX_TTL:.0e} seconds, got {ttl!r}")
    return float(ttl)


def check_owner(owner: str) -> str:
    if not isinstance(owner, str) or not owner:
        raise ValueError(f"a lease owner must be a non-empty str, got {owner!r}")
    return owner


def grant(session: str, row: LeaseRow | None, owner: str, ttl: float, now: float) -> LeaseRow:
    """The row after ``acquire_lease``: a new token if the session is free.

    Raises:
        SessionOwned: a live lease holds the session (whoever its owner is).
    """
    if row is not None and row.live(now):
        raise SessionOwned(row.as_lease(session))
    token = 1 if row is None else row.token + 1
    return LeaseRow(token, owner, now + ttl, False)


def current(row: LeaseRow | None, lease: Lease) -> bool:
    """Whether ``lease``'s token is the session's current one (expired or not)."""
    return row is not None and not row.released and row.token == lease.token


def renewed(row: LeaseRow | None, lease: Lease, ttl: float, now: float) -> LeaseRow:
    """The row after ``renew_lease``.

    Raises:
        LeaseLost: the token is no longer current (taken over or released).
    """
    if not current(row, lease):
        raise lost(lease, row, "renew")
    assert row is not None
    return LeaseRow(row.token, row.owner, now + ttl, False, row.cancel)


def check_run_id(run_id: str) -> str:
    """``run_id`` of a cancel request; ValueError unless a non-empty str."""
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"a cancel request names a run by its id, a non-empty str; got {run_id!r}")
    return run_id


def cancel_noted(row: LeaseRow | None, run_id: str, now: float) -> LeaseRow | None:
    """The row after ``request_cancel(session, run_id)``: the request noted on a live
    lease; None when no live lease holds the session (nothing runs it: nothing noted)."""
    if row is None or not row.live(now):
        return None
    return replace(row, cancel=run_id)


def fence(row: LeaseRow | None, lease: Lease, session: str, checkpoint_id: str) -> None:
    """The check of a save made with ``lease`` into ``session``.

    Raises:
        LeaseLost: the lease is of another session, or its token is not current.
    """
    if lease.session != session:
        raise LeaseLost(
            f"refusing to save checkpoint {checkpoint_id} of session {session!r} with the "
            f"lease of session {lease.session!r}; acquire a lease of {session!r}",
            lease=lease,
        )
    if not current(row, lease):
        raise lost(lease, row, f"save checkpoint {checkpoint_id}")


def leaseless_check(row: LeaseRow | None, session: str, checkpoint_id: str, now: float) -> None:
    """The check of a save made without a lease.

    Raises:
        SessionOwned: a live lease holds the session.
    """
    if row is not None and row.live(now):
        raise SessionOwned(
            row.as_lease(session),
            doing=f"refusing to save checkpoint {checkpoint_id} without a lease",
        )


def lost(lease: Lease, row: LeaseRow | None, doing: str) -> LeaseLost:
    """The error for a stale ``lease``, saying what happened to the session since."""
    if row is None:
        why = "the store has no lease of this session"
    elif row.token == lease.token:
        why = "it was released"
    elif row.released:
        why = f"a later lease (token {row.token}, {row.owner}) took over and was released"
    else:
        why = f"it was taken over by {row.owner} (token {row.token})"
    return LeaseLost(
        f"cannot {doing}: the lease of session {lease.session!r} with token {lease.token} "
        f"({lease.owner}) is no longer current, {why}. Nothing was written; this process "
        f"no longer owns the session. Reopen it (wf.resume) to continue from the store.",
        lease=lease,
    )
