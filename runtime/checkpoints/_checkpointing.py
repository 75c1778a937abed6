"""Writing checkpoints from the supervisor's consistent cuts, and reading them back.

Only chunks the store does not already hold are written: a checkpoint costs
O(what changed), not O(state). With ``Durability.ASYNC`` the write happens on a
background thread through a bounded queue; a failed write is re-raised at the
next barrier (or when the run ends), never dropped.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import msgpack

from actorflow.errors import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    CheckpointSealed,
    GraphMismatch,
)
from actorflow.runtime._graph import GraphSpec, explain_mismatch
from actorflow.runtime._pace import PACE, unpaced
from actorflow.runtime._policy import CheckpointPolicy, Durability
from actorflow.runtime._wire import pack
from actorflow.runtime.telemetry import TRACE_KEY
from actorflow.storage import (
    EMPTY_METADATA,
    BlobBatchReader,
    Checkpoint,
    CheckpointKind,
    CheckpointStore,
    Cut,
    ExecutorDigests,
    Lease,
    RawEntry,
    Statement,
    cut_saver,
    is_volatile,
    new_checkpoint_id,
    statement_saver,
)

from ._lineage import Lineage
from ._migration import prepare_snapshots, version_entries
from ._state import PackedEntries, RunState, decode_runtime, effects_ok, statements_ok

__all__ = [
    "Checkpointer",
    "FailedAttempt",
    "Restored",
    "check_runtime",
    "check_runtime_bytes",
    "load_for_resume",
]

_KINDS = frozenset(kind.value for kind in CheckpointKind)


class Checkpointer:
    """Writes one lineage's checkpoints into a store (supervisor thread only)."""

    def __init__(
        self,
        store: CheckpointStore,
        spec: GraphSpec,
        session: str,
        policy: CheckpointPolicy,
        *,
        parent: Checkpoint | None = None,
        lease: Lease | None = None,
        lineage: Lineage | None = None,
        on_stored: Callable[[int], None] | None = None,
        held: Mapping[str, bytes] | None = None,
    ) -> None:
        """``on_stored(seq)``: told, once a cut carrying history entries is in the store,
        the number of its last entry (on the background writer's thread for an async
        write); the session's history log then stops keeping those events. ``held``:
        the bytes of ``parent``'s blobs read for the resume (by digest)."""
        self.store = store
        self.spec = spec
        self.session = session
        self.policy = policy
        self._every = 0 if policy.on_idle_only else policy.every  # 0: on idle only
        self._sync = policy.durability is Durability.SYNC
        self.overlaps = self._sync and is_volatile(store)
        """Whether a ``step`` cut is written while the next superstep starts, rather than
        before: for a store that lives in this process (a ``MemoryStore``), whose records
        no crash leaves behind, so waiting for them protects nothing. The supervisor
        still reads no answer of that superstep before the write is done, and a failed
        write fails the run at that barrier, with the superstep rolled back."""
        self.last_id: str | None = parent.id if parent is not None else None
        # The newest checkpoint known to be in the store: the lineage falls back to it
        # when a background write fails, so no record ever names a parent never stored.
        self._confirmed_id = self.last_id
        entries = {"graph": pack(spec.description), **version_entries(spec.programs)}
        if lineage is not None:
            entries.update(lineage.entries())
        self._packed_graph = PackedEntries(entries)
        self._stored: frozenset[str] = frozenset()
        self._carried: Mapping[str, bytes] = {}
        """Until a cut of this session is stored: bytes of blobs that only another
        session's records hold, sent with every write that names them."""
        if parent is not None and parent.session == session:
            self._stored = parent.blob_digests()
        elif parent is not None:
            # A fork: its source session may be deleted, and with it every blob no other
            # session's record names, before the fork stores a cut of its own. So the
            # fork's first cut stores every blob it names, from the bytes the resume
            # read, rather than trusting the source's records to keep them.
            self._carried = held or {}
        self.lease = lease
        """The session's lease (its fencing token goes with every save), or None."""
        self._save = cut_saver(store, lease)
        self._save_statements = statement_saver(store, lease)
        if not is_volatile(store):
            self._save = unpaced(self._save)  # I/O: other sessions may work meanwhile
            if self._save_statements is not None:
                self._save_statements = unpaced(self._save_statements)
        self._snapshots: dict[str, list[str]] = {}
        self._executors: ExecutorDigests = ()
        self._referenced: frozenset[str] = frozenset()
        self._queue: queue.Queue[_Queued | None] | None = None
        self._writer: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._unwritten: list[RawEntry] = []
        """History entries of queued cuts that were never written (a background write
        failed, and the writer skipped what was queued after it): the session's next
        cut carries them, so a failed write loses no history (see :meth:`unwritten`)."""
        self._unwritten_journal: tuple[list[list[Any]], list[Statement]] = ([], [])
        """Likewise the effects and the statements those cuts were to commit."""
        self._written: tuple[Mapping[str, bytes], bytes] = ({}, b"")
        trace = parent.metadata.get(TRACE_KEY) if parent is not None else None
        self.resumed_trace: bytes | None = trace if isinstance(trace, bytes) else None
        """The packed context of the run that wrote the checkpoint resumed from (tracing)."""
        self.queued = False
        """Whether the last :meth:`write` only queued its cut (async durability)."""
        self._on_stored = on_stored

    def due(self, superstep: int) -> bool:
        """Whether the barrier after ``superstep`` gets a ``step`` checkpoint."""
        every = self._every
        return every != 0 and superstep % every == 0

    def write(
        self,
        *,
        kind: str,
        superstep: int,
        state: RunState,
        snapshots: Mapping[str, list[str]],
        chunks: Mapping[str, bytes],
        metadata: bytes,
        history: tuple[RawEntry, ...] = (),
        next_seq: int = 0,
        effects: list[list[Any]] | None = None,
        statements: list[Statement] | None = None,
    ) -> str:
        """Write one checkpoint; returns its id.

        ``history``: the session's entries this cut carries (see
        ``actorflow.storage._history``); ``next_seq``: the number the session's next
        entry will get, kept in the cut so a resume continues the numbering.
        ``effects`` (``[executor, superstep, name, n, result]`` each) go into the
        record; ``statements`` run in the transaction that stores it.

        Raises:
            CheckpointError (or what the store raised): the write failed; with async
                durability, a failure of an *earlier* write surfaces here.
        """
        if self._failure is not None:
            self.raise_failure()
        if snapshots == self._snapshots:
            executors, referenced = self._executors, self._referenced
        else:
            executors = tuple((eid, tuple(digests)) for eid, digests in snapshots.items())
            referenced = frozenset(d for _, digests in executors for d in digests)
            # Own copies: most barriers see the same digests again, and comparing them
            # costs less than building the record's executors and the set anew. The
            # same executors tuple also tells a store that takes cuts nothing changed.
            self._snapshots = {eid: list(digests) for eid, digests in snapshots.items()}
            self._executors, self._referenced = executors, referenced
        # A digest neither known stored nor in hand was stored by a partial record (or
        # is missing, which the store refuses loudly: it never saves a dangling record).
        fresh = referenced - self._stored if referenced is not self._stored else None
        blobs = {d: chunks[d] for d in fresh if d in chunks} if fresh else {}
        if fresh and self._carried:
            blobs.update((d, self._carried[d]) for d in fresh - blobs.keys() if d in self._carried)
        cut = self._cut(
            kind if kind in _KINDS else CheckpointKind(kind).value,  # unknown kinds raise
            superstep,
            executors,
            state.to_bytes(self._packed_graph, next_seq, effects),
            metadata,
            history=history,
        )
        self._written = (blobs, cut.runtime)
        item = _Queued(cut, blobs, statements or [], effects or [])
        if self._sync or kind == "entry":
            try:
                self._store(item)
            except BaseException:
                self._forget_stored()
                raise
            self._confirm(item)
            self.queued = False
        else:
            self._enqueue(item)
            self.queued = True
        self._stored = referenced
        self.last_id = cut.id
        return cut.id

    def _store(self, item: _Queued) -> None:
        """Save a queued cut: with its statements in one transaction when it has any."""
        if not item.statements:
            self._save(item.cut, item.blobs)
            return
        if self._save_statements is None:  # ctx.sql refuses first: only a changed store
            raise CheckpointError(
                f"the cut after superstep {item.cut.superstep} holds ctx.sql statements, but "
                "the store no longer commits statements; nothing was written"
            )
        self._save_statements(item.cut, item.blobs, item.statements)

    def _confirm(self, item: _Queued) -> None:
        """``item`` is in the store: the lineage may fall back to it, and its history
        entries need not be kept in memory any more."""
        self._confirmed_id = item.cut.id
        self._carried = {}  # its blobs are this session's own now
        history = item.cut.history
        if history and self._on_stored is not None:
            self._on_stored(history[-1][0])

    @property
    def last_bytes(self) -> int:
        """Bytes of the last :meth:`write`: new blobs plus the runtime record."""
        blobs, runtime = self._written
        return sum(map(len, blobs.values())) + len(runtime)

    def write_partial(
        self,
        superstep: int,
        executor: str,
        report: list[Any],
        chunks: list[tuple[str, bytes | None]],
    ) -> str:
        """Persist one executor's finished part of an unfinished superstep (sync only).

        The record's parent is the last cut; on resume it stands in for running that
        executor again. Chunks given as None must already be stored. ``report`` is
        ``[sends, outputs, requests, effects, statements]``: the statements are kept as
        data, and committed by the store only with the superstep's cut.
        """
        carried = self._carried
        blobs = {
            d: c if c is not None else carried[d]
            for d, c in chunks
            if d not in self._stored and (c is not None or d in carried)
        }
        cut = self._cut(
            CheckpointKind.PARTIAL.value,
            superstep,
            ((executor, tuple(d for d, _ in chunks)),),
            pack({"partial": executor, "report": report}),
            EMPTY_METADATA,
        )
        try:
            self._save(cut, blobs)
        except BaseException:
            self._forget_stored()
            raise
        return cut.id

    def _forget_stored(self) -> None:
        """A write failed: the store may not hold what this lineage believes it does (its
        records deleted beneath an open session, say, so their blobs went too), and the
        next cut resends every blob it names, as after a background failure; the store
        skips those it has."""
        self._stored = frozenset()

    def _cut(
        self,
        kind: str,
        superstep: int,
        executors: ExecutorDigests,
        runtime: bytes,
        metadata: bytes,
        *,
        history: tuple[RawEntry, ...] = (),
    ) -> Cut:
        """A new record of this lineage (its parent: the last cut written).

        ``metadata`` is the run's, packed when the run was submitted (see
        :func:`~actorflow.storage.packed_metadata`).
        """
        spec = self.spec
        return Cut(
            new_checkpoint_id(),
            self.last_id,
            self.session,
            spec.name,
            spec.signature,
            superstep,
            kind,
            time.time(),
            executors,
            runtime,
            metadata,
            history,
        )

    def flush(self) -> None:
        """Wait for queued writes; raise the first failure, if any."""
        if self._queue is not None:
            self._queue.join()
        self.raise_failure()
        self.queued = False

    def unwritten(self) -> tuple[RawEntry, ...]:
        """The history entries of cuts a background write lost, oldest first (taken: the
        caller's next cut carries them). Read after :meth:`raise_failure` raised."""
        taken, self._unwritten = tuple(self._unwritten), []
        return taken

    def unwritten_journal(self) -> tuple[list[list[Any]], list[Statement]]:
        """The effects and statements of cuts a background write lost, oldest first
        (taken, as :meth:`unwritten`): their supersteps are in the state the next cut
        stores, so that cut must commit them."""
        taken, self._unwritten_journal = self._unwritten_journal, ([], [])
        return taken

    def raise_failure(self) -> None:
        """Re-raise a background write failure (once), resetting the lineage to what is stored."""
        if self._failure is None:
            return
        if self._queue is not None:
            self._queue.join()  # the writer skips everything queued after the failure
        failure, self._failure = self._failure, None
        self.last_id = self._confirmed_id
        self._forget_stored()
        raise CheckpointError(f"a background checkpoint write failed: {failure}") from failure

    def close(self) -> None:
        """Stop the background writer after it drained its queue."""
        if self._queue is not None and self._writer is not None:
            self._queue.put(None)
            self._writer.join(timeout=60)
            self._queue = self._writer = None

    def _enqueue(self, item: _Queued) -> None:
        if self._queue is None:
            self._queue = queue.Queue(maxsize=8)
            self._writer = threading.Thread(
                target=self._drain, name=f"actorflow-ckpt-{self.session}", daemon=True
            )
            self._writer.start()
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with PACE.released():  # waits for the writer
                self._queue.put(item)

    def _drain(self) -> None:
        assert self._queue is not None
        work = self._queue
        while True:
            item = work.get()
            try:
                if item is None:
                    return
                if self._failure is None:
                    self._store(item)
                    self._confirm(item)
                else:
                    self._lost(item)
            except Exception as exc:  # noqa: BLE001 - surfaced by raise_failure at the next barrier
                self._failure = exc
                assert item is not None  # (the sentinel returns before anything can raise)
                self._lost(item)
            finally:
                work.task_done()

    def _lost(self, item: _Queued) -> None:
        self._unwritten.extend(item.cut.history)
        self._unwritten_journal[0].extend(item.effects)
        self._unwritten_journal[1].extend(item.statements)


class _Queued(NamedTuple):
    """A cut on its way to the store, with what it commits besides its record."""

    cut: Cut
    blobs: dict[str, bytes]
    statements: list[Statement]
    effects: list[list[Any]]
    """Only for :meth:`Checkpointer.unwritten_journal` (the record holds them already)."""


class Restored:
    """A checkpoint read back for resuming: state, snapshots and lineage."""

    __slots__ = ("_attempted", "checkpoint", "completed", "extra", "snapshots", "state")

    def __init__(
        self,
        checkpoint: Checkpoint,
        state: RunState,
        extra: dict[str, Any],
        completed: dict[str, tuple[list[Any], list[str]]] | None = None,
        known: Mapping[str, bytes] | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.state = state
        self.extra = extra
        self.completed = completed or {}
        """Executor -> (report, snapshot digests) of the next superstep, finished before a crash."""
        known = known or {}
        self.snapshots: dict[str, list[tuple[str, bytes | None]]] = {
            eid: [(d, known.get(d)) for d in digests]
            for eid, digests in checkpoint.executors.items()
        }
        """Executor -> its snapshot chunks: bytes already in hand, or None (read from the store)."""
        self._attempted: list[list[Any]] = list(extra.get("effects", ()))

    def held(self) -> dict[str, bytes]:
        """The bytes of the snapshot chunks read for this resume, by digest."""
        return {d: c for chunks in self.snapshots.values() for d, c in chunks if c is not None}

    def same_barrier(self, later: Checkpoint) -> None:
        """``later``, a cut of the session written after this one at the same barrier
        (its ``halt``, when this is the cut before the run failed): the results it
        recorded of the superstep that failed count for this resume too."""
        if later.superstep != self.checkpoint.superstep or later.id == self.checkpoint.id:
            return
        extra = decode_runtime(later.runtime)
        if Lineage.of(extra) == Lineage.of(self.extra):  # (a time-travel branch: its own keys)
            self._attempted += extra.get("effects", [])

    def failed_attempt(self) -> FailedAttempt | None:
        """The effect results of the superstep after this cut, when a run failed in
        that superstep after effects: its ``halt`` cut, and every later cut at the same
        barrier, record them (see ``runtime._effects``)."""
        superstep = self.checkpoint.superstep + 1
        results: dict[str, list[list[Any]]] = {}
        for executor, step, name, n, result in self._attempted:
            if step == superstep:
                results.setdefault(executor, []).append([name, n, result])
        if not results:
            return None
        scope = Lineage.of(self.extra).effect_scope(self.checkpoint.session)
        return FailedAttempt(scope, superstep, results)


class FailedAttempt(NamedTuple):
    """What a failed superstep's attempt got from its effects, recorded with its halt."""

    scope: str
    """The effect scope it ran in (session id, origin, lineage tag): its results answer
    the same keys only in that scope (a fork or another session calls again)."""
    superstep: int
    results: dict[str, list[list[Any]]]
    """Executor -> ``[name, n, result]`` of each effect its attempts got."""


def load_for_resume(
    store: CheckpointStore,
    spec: GraphSpec,
    *,
    session: str | None,
    checkpoint_id: str | None,
) -> Restored:
    """Load a checkpoint (the session's latest, or ``checkpoint_id``) and check its graph.

    Raises:
        CheckpointNotFound: nothing to resume.
        GraphMismatch: the checkpoint was taken on another graph (says what differs).
        CheckpointCorrupt: the record or a blob it needs is damaged; with ``session``,
            the message names the session's newest intact checkpoint and how to
            resume from it.
    """
    try:
        return _load_for_resume(store, spec, session=session, checkpoint_id=checkpoint_id)
    except CheckpointCorrupt as exc:
        if session is None or isinstance(exc, CheckpointSealed):  # sealed: nothing damaged
            raise
        raise CheckpointCorrupt(f"{exc}; {_way_out(store, spec.name, session)}") from exc


def _way_out(store: CheckpointStore, workflow: str, session: str) -> str:
    """What a resume that met damage says next: the newest intact checkpoint, and how."""
    try:
        intact = newest_intact(store, workflow, session)
    except CheckpointError as exc:  # the store fails to answer: say so, briefly
        return f"no intact checkpoint of session {session!r} could be found ({exc})"
    if intact is None:
        return (
            f"no checkpoint of session {session!r} is intact (record and blobs); start the "
            "session afresh, or restore the store from a backup"
        )
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(intact.created_at))
    return (
        f"the newest intact checkpoint of session {session!r} is {intact.id} (superstep "
        f"{intact.superstep}, {intact.kind.value}, saved {when}); resume from it with "
        f"wf.resume(store, session={session!r}, checkpoint_id={intact.id!r}), which starts "
        "a new branch of the session (`actorflow checkpoints verify STORE` lists every "
        "damaged record)"
    )


def newest_intact(store: CheckpointStore, workflow: str, session: str) -> Checkpoint | None:
    """The newest cut of ``session`` (of ``workflow``) whose record decodes and whose
    blobs are all present and match their digests; None if there is none.

    Reads records newest first (through ``ids()`` where ``list`` cannot decode around
    a damaged one) and each blob at most once.
    """
    try:
        ids = [cp.id for cp in store.list(session=session)]
    except CheckpointError:
        every = getattr(store, "ids", None)  # built-in stores list damaged records too
        if not callable(every):
            raise
        ids = list(every())
    read, good, bad = _reader(store), set[str](), set[str]()
    for checkpoint_id in sorted(ids, reverse=True):  # ids sort by time
        try:
            cp = store.load(checkpoint_id)
            if cp.session != session or cp.workflow != workflow:
                continue
            if cp.kind is CheckpointKind.PARTIAL:
                continue
            check_runtime(cp)
            digests = {d for ds in cp.executors.values() for d in ds} - good
            if digests & bad:
                continue
            found = read(sorted(digests)) if digests else {}
        except CheckpointError:
            continue
        if set(found) == digests:
            good |= digests
            return cp
        bad |= digests - set(found)
    return None


def _load_for_resume(
    store: CheckpointStore,
    spec: GraphSpec,
    *,
    session: str | None,
    checkpoint_id: str | None,
) -> Restored:
    if checkpoint_id is not None:
        checkpoint = store.load(checkpoint_id)
    else:
        latest = store.latest(workflow=spec.name, session=session)
        if latest is None:
            raise CheckpointNotFound(
                f"no checkpoint of workflow {spec.name!r} for session {session!r} in the store; "
                "run the session with this store first, or pass checkpoint_id="
            )
        checkpoint = latest
    completed: dict[str, tuple[list[Any], list[str]]] = {}
    if checkpoint.kind is CheckpointKind.PARTIAL:
        # A crash mid-superstep: resume from the cut before it, keeping what finished.
        if checkpoint.parent_id is None:
            raise CheckpointCorrupt(
                f"partial checkpoint {checkpoint.id} names no cut to resume from"
            )
        try:
            cut = store.load(checkpoint.parent_id)
        except CheckpointNotFound:
            cut = _newest_cut(store, checkpoint)
        for part in store.list(session=cut.session, kind=CheckpointKind.PARTIAL):
            if part.parent_id == cut.id and part.superstep == cut.superstep + 1:
                completed.update(_partial_of(part))
        checkpoint = cut
    if checkpoint.graph_signature != spec.signature:
        stored = decode_runtime(checkpoint.runtime).get("graph", {})
        raise explain_mismatch(stored, spec.description)
    if set(checkpoint.executors) != set(spec.programs):
        raise GraphMismatch(
            f"checkpoint {checkpoint.id} names executors {sorted(checkpoint.executors)}, the "
            f"graph has {sorted(spec.programs)}"
        )
    if checkpoint.kind is CheckpointKind.PARTIAL:
        raise CheckpointCorrupt(f"checkpoint {checkpoint.id} is a partial record, not a cut")
    state, extra = RunState.from_bytes(
        checkpoint.runtime, {k: list(v) for k, v in checkpoint.executors.items()}
    )
    restored = Restored(checkpoint, state, extra, completed, _blueprint_chunks(spec))
    # Every snapshot is read and, if older than its class, migrated now; the session
    # restores the states into its hosts before the resume returns, so a state the
    # current code cannot use fails the resume, not the first handler.
    migrated = prepare_snapshots(spec.programs, extra, restored.snapshots, _reader(store))
    for executor in migrated:
        restored.completed.pop(executor, None)  # a crashed superstep's part: re-run it
    return restored


def _reader(store: CheckpointStore) -> Callable[[list[str]], Mapping[str, bytes]]:
    if isinstance(store, BlobBatchReader):
        return store.load_blobs
    return lambda digests: {d: store.load_blob(d) for d in digests}


def check_runtime(checkpoint: Checkpoint) -> dict[str, Any]:
    """A record's ``runtime`` field, decoded and shape-checked as a resume does it.

    Returns the runtime map of a cut, or ``{"partial": executor, "report":
    [sends, outputs, requests]}`` for a partial record. Used by resume and by the
    CLI (``verify`` checks every record with it).

    Raises:
        CheckpointCorrupt: the field is not what the supervisor writes.
    """
    if checkpoint.kind is CheckpointKind.PARTIAL:
        executor, (report, _) = next(iter(_partial_of(checkpoint).items()))
        return {"partial": executor, "report": report}
    return decode_runtime(checkpoint.runtime)


def check_runtime_bytes(runtime: bytes) -> dict[str, Any]:
    """:func:`check_runtime` for a bare field: a partial record's if it names one.

    Raises:
        CheckpointCorrupt: the field is neither a cut's nor a partial record's.
    """
    try:
        body = msgpack.unpackb(runtime, raw=False, strict_map_key=False, ext_hook=_refuse)
        executor = body["partial"] if type(body) is dict and "partial" in body else None
    except Exception as exc:
        raise CheckpointCorrupt(f"the runtime field is malformed: {exc}") from exc
    if executor is None:
        return decode_runtime(runtime)
    executor, report = _partial_body(runtime, "record")
    return {"partial": executor, "report": report}


def _blueprint_chunks(spec: GraphSpec) -> dict[str, bytes]:
    """Digest -> bytes of every blueprint chunk of the graph.

    A snapshot chunk whose digest matches one of these needs no read from the store:
    the builder hashed these very bytes, so they are what the store would return
    after verifying them. State that grows from its initial value (a long list with
    items appended) keeps most of its chunks equal to the blueprint's, so a resume
    reads only what changed since the workflow was built. The bytes are immutable
    and shared by nothing mutable.
    """
    return {
        digest: chunk
        for program in spec.programs.values()
        for digest, chunk in zip(program.blueprint_digests, program.blueprint, strict=True)
    }


def _newest_cut(store: CheckpointStore, orphan: Checkpoint) -> Checkpoint:
    """The newest whole cut of the session, when a partial record's own cut was pruned."""
    cuts = [
        cp for cp in store.list(session=orphan.session) if cp.kind is not CheckpointKind.PARTIAL
    ]
    if not cuts:
        raise CheckpointNotFound(
            f"partial checkpoint {orphan.id} hangs off {orphan.parent_id}, which is no longer "
            "stored, and no other checkpoint of the session is; when pruning, keep more "
            "checkpoints than the partial records"
        )
    return cuts[-1]


def _partial_of(part: Checkpoint) -> dict[str, tuple[list[Any], list[str]]]:
    """Decode a partial record (plain msgpack, shape-checked)."""
    executor, report = _partial_body(part.runtime, part.id)
    if list(part.executors) != [executor]:
        raise CheckpointCorrupt(f"partial checkpoint {part.id} is malformed")
    return {executor: (report, list(part.executors[executor]))}


def _partial_body(runtime: bytes, name: str) -> tuple[str, list[Any]]:
    """The executor and ``[sends, outputs, requests, effects, statements]`` of a partial
    record's runtime field (a record written before effects existed has neither)."""
    try:
        body = msgpack.unpackb(runtime, raw=False, strict_map_key=False, ext_hook=_refuse)
        executor = body["partial"]
        report = body["report"]
        sends, outputs, requests = report[:3]
        effects, statements = report[3:] if len(report) == 5 else ([], [])
        valid = (
            type(body) is dict
            and len(report) in (3, 5)
            and effects_ok(effects, with_place=False)
            and statements_ok(statements)
            and set(body) == {"partial", "report"}
            and type(executor) is str
            and type(sends) is list
            and all(
                type(s) is list
                and len(s) == 3
                and type(s[0]) is str
                and type(s[1]) is int
                and type(s[2]) is bytes
                for s in sends
            )
            and type(outputs) is list
            and all(type(o) is bytes for o in outputs)
            and type(requests) is list
            and all(
                type(r) is list
                and len(r) == 3
                and type(r[0]) is str
                and type(r[1]) is bytes
                and type(r[2]) is str
                for r in requests
            )
        )
    except Exception as exc:
        raise CheckpointCorrupt(f"partial checkpoint {name} is malformed: {exc}") from exc
    if not valid:
        raise CheckpointCorrupt(f"partial checkpoint {name} is malformed")
    return executor, [sends, outputs, requests, effects, statements]


def _refuse(code: int, data: bytes) -> Any:
    raise ValueError(f"ext type {code} is not allowed in a partial record")
