"""A thread's state at a checkpoint, read from the store, in the LangGraph shape.

``values`` holds each executor's state (its attributes, as JSON) at the checkpoint;
``next`` the executors with messages in flight; ``tasks`` and ``interrupts`` the
pending requests. Every method blocks on the store: the app calls them in a worker
thread (``asyncio.to_thread``), never on its event loop.
"""

from __future__ import annotations

from typing import Any

from actorflow.actors import decode, decode_state, to_json
from actorflow.errors import CheckpointNotFound, ThreadNotFound
from actorflow.runtime import decode_runtime
from actorflow.runtime.checkpoints import at_rest
from actorflow.storage import Checkpoint, CheckpointKind, CheckpointStore

from ._shapes import checkpoint_ref, interrupt_json, iso

__all__ = ["THREAD_STATUSES", "States"]

THREAD_STATUSES = ("idle", "busy", "interrupted", "error")
"""What a thread's ``status`` may be (``busy``: a run of this service is going on)."""


class States:
    """Reads threads' checkpoints and shapes them. Safe from any thread (the store is)."""

    __slots__ = ("_store",)

    def __init__(self, store: CheckpointStore) -> None:
        self._store = store

    def latest(self, thread_id: str) -> Checkpoint | None:
        """The thread's newest cut (a partial record's parent in its place), or None."""
        cp = self._store.latest(session=thread_id)
        while cp is not None and cp.kind is CheckpointKind.PARTIAL and cp.parent_id:
            cp = self._store.load(cp.parent_id)
        return cp

    def load(self, thread_id: str, checkpoint_id: str) -> Checkpoint:
        """The checkpoint ``checkpoint_id`` of ``thread_id``.

        Raises:
            CheckpointNotFound: no such checkpoint in this thread.
        """
        cp = self._store.load(checkpoint_id)
        if cp.session != thread_id:
            raise CheckpointNotFound(
                f"checkpoint {checkpoint_id} belongs to thread {cp.session!r}, not "
                f"{thread_id!r}; read it under its own thread"
            )
        return cp

    def state(self, thread_id: str, cp: Checkpoint | None) -> dict[str, Any]:
        """The thread's state at ``cp`` (None: before its first checkpoint).

        Raises:
            ThreadNotFound: the thread was deleted (by another worker) while it was read.
            CheckpointNotFound: ``cp`` was deleted while it was read (pruned, or its
                thread deleted and made anew).
            CheckpointError: a record or blob is missing or damaged.
            DecodeError: a state holds a type this process has not registered.
        """
        try:
            return self._state(thread_id, cp)
        except CheckpointNotFound:
            assert cp is not None, "without a checkpoint nothing is read"
            try:
                self._store.load(cp.id)
            except CheckpointNotFound:  # the record went with its blobs: deleted meanwhile
                if self._store.latest(session=thread_id) is None:
                    raise ThreadNotFound(
                        f"thread {thread_id!r} was deleted while it was read; read it again "
                        "to see whether it was made anew"
                    ) from None
                raise CheckpointNotFound(
                    f"checkpoint {cp.id} of thread {thread_id!r} was deleted while it was "
                    "read (pruned, or the thread made anew); read the thread again"
                ) from None
            raise  # the record is there and lacks a part: the store is damaged

    def _state(self, thread_id: str, cp: Checkpoint | None) -> dict[str, Any]:
        if cp is None:
            return {
                "values": {},
                "next": [],
                "checkpoint": checkpoint_ref(thread_id, None),
                "metadata": {},
                "created_at": None,
                "parent_checkpoint": None,
                "tasks": [],
                "interrupts": [],
            }
        values = {
            eid: to_json(decode_state([self._store.load_blob(d) for d in digests]))
            for eid, digests in sorted(cp.executors.items())
        }
        runtime = decode_runtime(cp.runtime) if cp.kind is not CheckpointKind.PARTIAL else {}
        interrupts = [
            interrupt_json(str(rid), executor, decode(payload), response_type)
            for rid, (executor, payload, response_type) in sorted(
                runtime.get("pending", {}).items()
            )
        ]
        tasks = [
            {
                "id": i["id"],
                "name": i["executor"],
                "error": None,
                "interrupts": [i],
                "checkpoint": None,
                "state": None,
                "result": None,
            }
            for i in interrupts
        ]
        metadata = {str(k): to_json(v) for k, v in cp.metadata.items()}
        metadata.update(superstep=cp.superstep, kind=cp.kind.value, workflow=cp.workflow)
        return {
            "values": values,
            "next": sorted(str(t) for t, inbox in runtime.get("inbox", {}).items() if inbox),
            "checkpoint": checkpoint_ref(thread_id, cp.id),
            "metadata": metadata,
            "created_at": iso(cp.created_at),
            "parent_checkpoint": checkpoint_ref(thread_id, cp.parent_id) if cp.parent_id else None,
            "tasks": tasks,
            "interrupts": interrupts,
        }

    def history(self, thread_id: str, limit: int, before: str | None) -> list[dict[str, Any]]:
        """The states of the thread's lineage, newest first: at most ``limit``, older
        than checkpoint ``before`` when given. Partial records are left out."""
        cps = [
            c for c in self._store.list(session=thread_id) if c.kind is not CheckpointKind.PARTIAL
        ]
        cps.reverse()
        if before is not None:
            ids = [c.id for c in cps]
            cps = cps[ids.index(before) + 1 :] if before in ids else []
        return [self.state(thread_id, cp) for cp in cps[: max(0, limit)]]

    def status(self, cp: Checkpoint | None) -> str:
        """``idle``, ``interrupted`` (requests wait for answers) or ``error`` (the last
        run failed, or stopped before its end: its process died), as the newest cut
        ``cp`` says. A thread at rest (see ``actorflow.runtime.checkpoints.at_rest``) is
        ``idle`` or ``interrupted``: its run ended, or was cancelled at a barrier (the
        next run goes on from it), or it is a fork from the middle of a run (a saved
        cut, with messages in flight)."""
        if cp is None:
            return "idle"
        if at_rest(cp):
            return "interrupted" if decode_runtime(cp.runtime).get("pending") else "idle"
        return "error"
