"""Opening a session for writing: its lease, and which lineage it continues or starts.

``Workflow.session`` and ``Workflow.resume`` delegate here. With a store, the
session's lease is taken *before* the store is read, so what the opener reads is
the head of a lineage nobody else can extend meanwhile. Then:

- ``wf.session(id, store=...)`` on an id without checkpoints starts its first
  lineage. On an id with checkpoints it raises :class:`SessionExists` (naming
  ``wf.resume``) unless told what to do: ``if_exists="resume"`` continues the
  lineage, ``if_exists="fresh"`` starts a new one beside it (the old one stays
  readable; its pending requests can no longer be answered).
- ``wf.resume(store, session=id)`` continues the session's latest checkpoint;
  with ``checkpoint_id=`` an older one (time travel: the new records name that
  checkpoint as parent, a branch of the same session, made by its owner).
- ``wf.resume(..., as_session=new_id)`` forks into a new session id, which must
  have no checkpoints yet; the source lineage is untouched (its lease is not taken).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Literal

from actorflow.actors import HostPool
from actorflow.errors import CheckpointCorrupt, CheckpointNotFound, SessionExists
from actorflow.runtime._history import read_entries
from actorflow.runtime._policy import CheckpointPolicy, RestartPolicy
from actorflow.runtime.checkpoints import Lineage, Restored, load_for_resume
from actorflow.storage import Checkpoint, CheckpointKind, CheckpointStore, check_session_id

from ._engine import Engine
from ._ownership import Ownership, acquire, check_lease_options
from ._session import Session

__all__ = ["IfExists", "open_private", "open_session", "resume_session"]

IfExists = Literal["error", "resume", "fresh"]
"""What ``wf.session(id, store=...)`` does when ``id`` already has checkpoints."""

_IF_EXISTS = ("error", "resume", "fresh")


def check_open_options(
    *,
    checkpoint: object,
    restart: object,
    wait: float,
    lease_ttl: float,
) -> None:
    """Refuse, before anything is opened, what ``session()`` and ``resume()`` cannot use.

    Raises:
        ValueError: ``wait`` or ``lease_ttl`` out of range, or a policy of another type.
    """
    check_lease_options(wait, lease_ttl)
    if checkpoint is not None and not isinstance(checkpoint, CheckpointPolicy):
        raise ValueError(
            f"checkpoint= takes an af.CheckpointPolicy, got {checkpoint!r}; e.g. "
            "af.CheckpointPolicy(every=2), or leave it out for a checkpoint every superstep"
        )
    if restart is not None and not isinstance(restart, RestartPolicy):
        raise ValueError(
            f"restart= takes an af.RestartPolicy, got {restart!r}; e.g. "
            "af.RestartPolicy(max_restarts=3), or leave it out for no restarts"
        )


def open_session(
    engine: Engine[Session],
    session_id: str | None,
    *,
    store: CheckpointStore | None,
    checkpoint: CheckpointPolicy | None,
    restart: RestartPolicy | None,
    if_exists: IfExists,
    wait: float,
    lease_ttl: float,
    pool: HostPool | None = None,
) -> Session:
    """See :meth:`Workflow.session` (``pool``: the hosts of the session's backend)."""
    if if_exists not in _IF_EXISTS:
        raise ValueError(f"if_exists= must be one of {', '.join(_IF_EXISTS)}; got {if_exists!r}")
    if session_id is not None:
        check_session_id(session_id)
    if store is None:
        return Session(
            engine,
            session_id,
            checkpoint=checkpoint,
            restart=restart,
            lineage=Lineage.first(),
            pool=pool,
        )
    sid = session_id or os.urandom(16).hex()
    ownership = acquire(store, sid, ttl=lease_ttl, wait=wait)
    try:
        head = store.latest(session=sid) if session_id is not None else None
        if head is None:  # a new use of the id (maybe of a deleted session): a new origin
            return Session(
                engine,
                sid,
                store=store,
                checkpoint=checkpoint,
                restart=restart,
                ownership=ownership,
                lineage=Lineage.first(),
                pool=pool,
            )
        if if_exists == "resume":
            restored = load_for_resume(store, engine.spec, session=sid, checkpoint_id=None)
            return _session_on(
                engine,
                session_id=sid,
                store=store,
                checkpoint=checkpoint,
                restart=restart,
                restored=restored,
                ownership=ownership,
                branch=False,
                pool=pool,
                history_seq=_next_seq(store, sid, restored, newest=True),
            )
        if if_exists == "fresh":
            return Session(
                engine,
                sid,
                store=store,
                checkpoint=checkpoint,
                restart=restart,
                ownership=ownership,
                lineage=Lineage.fresh(),
                pool=pool,
                history_seq=_next_seq(store, sid, None, newest=False),
            )
        raise _exists(sid, head, store)
    except BaseException:
        ownership.release()
        raise


def resume_session(
    engine: Engine[Session],
    store: CheckpointStore,
    *,
    session: str | None,
    checkpoint_id: str | None,
    checkpoint: CheckpointPolicy | None,
    restart: RestartPolicy | None,
    as_session: str | None,
    wait: float,
    lease_ttl: float,
    pool: HostPool | None = None,
) -> Session:
    """See :meth:`Workflow.resume` (``pool``: the hosts of the session's backend)."""
    if session is not None:
        check_session_id(session, "session=")
    source = session
    if source is None:
        if checkpoint_id is not None:
            source = store.load(checkpoint_id).session
        else:
            latest = store.latest(workflow=engine.name)
            if latest is None:
                raise CheckpointNotFound(
                    f"no checkpoint of workflow {engine.name!r} in the store; run a session with "
                    "this store first, or pass session= or checkpoint_id="
                )
            source = latest.session
    if as_session is not None:
        check_session_id(as_session, "as_session=")
    if as_session == source:
        raise ValueError(
            f"as_session={as_session!r} is the session resumed; a fork needs a new session id"
        )
    target = as_session or source
    ownership = acquire(store, target, ttl=lease_ttl, wait=wait)
    try:
        if as_session is not None:
            head = store.latest(session=as_session)
            if head is not None:
                raise _exists(as_session, head, store, fork=True)
        restored = load_for_resume(store, engine.spec, session=source, checkpoint_id=checkpoint_id)
        if restored.checkpoint.session != source:
            owner = restored.checkpoint.session
            raise ValueError(
                f"checkpoint {restored.checkpoint.id} belongs to session {owner!r}, not "
                f"{source!r}; to continue it, pass session={owner!r}; to continue it under "
                f"an id of its own, pass session={owner!r} and as_session=<an id no session "
                "has yet>"
            )
        branch = False
        newest = True
        if as_session is None and checkpoint_id is not None:
            head = _head_or_damaged(store, source)
            if head is None:  # the newest record is damaged: this is the way on from it
                branch = True
            elif checkpoint_id not in (head.id, head.parent_id):
                branch = True  # time travel: a new branch of this session
            else:  # the head's parent: a halt holds what the run got
                restored.same_barrier(head)
            newest = head is not None and _is_head(head, restored.checkpoint)
        # A fork is a new session id: its history starts afresh.
        seq = 0 if as_session is not None else _next_seq(store, target, restored, newest=newest)
        return _session_on(
            engine,
            session_id=target,
            store=store,
            checkpoint=checkpoint,
            restart=restart,
            restored=restored,
            ownership=ownership,
            branch=branch,
            pool=pool,
            history_seq=seq,
        )
    except BaseException:
        ownership.release()
        raise


def _head_or_damaged(store: CheckpointStore, session: str) -> Checkpoint | None:
    """The session's newest record, or None when it fails its integrity check: what a
    resume of an older cut, the way on that the damage's error names, is told then."""
    try:
        return store.latest(session=session)
    except CheckpointCorrupt:
        return None


def _is_head(head: Checkpoint, cut: Checkpoint) -> bool:
    """Whether ``cut`` is the session's newest cut (``head`` the newest record)."""
    return head.id == cut.id or (head.kind is CheckpointKind.PARTIAL and head.parent_id == cut.id)


def _next_seq(
    store: CheckpointStore, session: str, restored: Restored | None, *, newest: bool
) -> int:
    """The number the session's next history event gets: one more than any stored.

    The newest cut records it (``seq`` in its runtime field), so resuming it reads
    nothing more; a session that continues from an older cut, or starts a new lineage
    beside others, reads its stored entries past that (every lineage of a session
    shares one numbering, so none repeats a number).
    """
    known = restored.extra.get("seq") if restored is not None else None
    start = known if isinstance(known, int) else 0
    if newest and isinstance(known, int):
        return known
    try:
        entries = read_entries(store, session, start)
    except CheckpointCorrupt:
        # A damaged record (resuming an older cut is the way on from it): number past
        # every entry that can be read. The damaged record's own are never read while
        # it is stored (its session's history raises), and go when it is deleted.
        return max(
            (e.seq + 1 for cp in _readable(store, session) for e in cp.history), default=start
        )
    return entries[-1].seq + 1 if entries else start


def _readable(store: CheckpointStore, session: str) -> Iterator[Checkpoint]:
    """The records of ``session`` that decode, read one by one around damaged ones."""
    every = getattr(store, "ids", None)  # the built-in stores list damaged records too
    if not callable(every):
        return
    for checkpoint_id in every():
        try:
            cp = store.load(checkpoint_id)
        except CheckpointCorrupt:
            continue
        if cp.session == session:
            yield cp


def open_private(
    engine: Engine[Session],
    store: CheckpointStore,
    session_id: str,
    checkpoint_id: str | None,
    policy: CheckpointPolicy,
) -> Session:
    """A session on a store nobody else sees (a sub-workflow's): no lease, no checks."""
    if checkpoint_id is None:
        return Session(engine, session_id, store=store, checkpoint=policy)
    restored = load_for_resume(store, engine.spec, session=None, checkpoint_id=checkpoint_id)
    known = restored.extra.get("seq")
    return _session_on(
        engine,
        session_id=restored.checkpoint.session,
        store=store,
        checkpoint=policy,
        restart=None,
        restored=restored,
        ownership=None,
        branch=False,
        history_seq=known if isinstance(known, int) else 0,
    )


def _session_on(
    engine: Engine[Session],
    *,
    session_id: str,
    store: CheckpointStore,
    checkpoint: CheckpointPolicy | None,
    restart: RestartPolicy | None,
    restored: Restored,
    ownership: Ownership | None,
    branch: bool,
    pool: HostPool | None = None,
    history_seq: int = 0,
) -> Session:
    lineage = Lineage.of(restored.extra)
    if session_id != restored.checkpoint.session:  # a fork: a new use of the id
        lineage = lineage.forked()
    return Session(
        engine,
        session_id,
        store=store,
        checkpoint=checkpoint,
        restored=restored,
        restart=restart,
        ownership=ownership,
        lineage=lineage.branch(restored.checkpoint.superstep) if branch else lineage,
        pool=pool,
        history_seq=history_seq,
    )


def _exists(
    session_id: str, head: Checkpoint, store: CheckpointStore, *, fork: bool = False
) -> SessionExists:
    where = f"session {session_id!r} already has checkpoints in {store!r} (latest {head.id}, "
    where += f"superstep {head.superstep})"
    if fork:
        return SessionExists(
            f"cannot fork into session {session_id!r}: {where}; a fork needs a new session "
            "id: pass another as_session="
        )
    return SessionExists(
        f"{where}; wf.session() would start a second lineage under the same id. To continue "
        f"it, use wf.resume(store, session={session_id!r}); to continue it if it exists and "
        "create it otherwise, pass if_exists='resume'; to start afresh beside it (the old "
        "lineage stays readable, its pending requests can no longer be answered), pass "
        "if_exists='fresh'"
    )
