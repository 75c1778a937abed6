"""FileStore: checkpoints as packs in a folder, crash-safe and safe for concurrent writers.

This module holds the layout, saving, listing, deleting and collecting. The store
is composed of collaborators that own their state: the store lock (``_lock``), the
blob reads (``_blobs``), the session leases (``_leases``), this handle's segment
writer and the segments' records (``_segment``, ``_segments``), the pack index
(``_packindex``).
"""

from __future__ import annotations

import builtins
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Self

from actorflow.errors import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    StoreNotFound,
    UnsupportedFormat,
)
from actorflow.storage._common import (
    age_plan,
    already_stored,
    check_checkpoint_id,
    check_cutoff,
    check_keep,
    check_session_id,
    checked_blobs,
    dangling,
    decode_stored,
    idle_sessions,
    lineage,
    matching,
    not_found,
    prune_plan,
    session_history,
    store_closed,
)
from actorflow.storage._format import Checkpoint, CheckpointKind, encode_checkpoint
from actorflow.storage._history import HistoryEntry
from actorflow.storage._lease import Lease

from . import _gc as gc
from ._blobs import FileBlobs
from ._leases import FileLeases
from ._lock import StoreLock
from ._pack import (
    RECORD_SUFFIX,
    BlobSource,
    encode_hints,
    read_record,
    write_pack,
)
from ._packindex import PackIndex, is_collecting
from ._segment import SEGMENT_SUFFIX, SegmentWriter
from ._segments import SegmentRecords, read_deleted, read_deleted_ids

# Ids become file names: no separators, no leading dot, bounded length.
_SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
_SESSIONS_A_BATCH = 256
"""Idle sessions deleted whole at a time by ``prune_older_than``: each holds its lease's
lock file open meanwhile, well within the usual limit of 1,024 open files."""


class FileStore:
    """A checkpoint store in a folder on a local POSIX file system.

    Layout 3 (see docs/storage.md for why)::

        actorflow-store           layout marker (another layout is refused, naming the fix)
        packs/<random>.seg        segments: each store handle appends its saves to its own
        packs/<id>.pack           record packs: layout 2's saves, records moved out of segments
        packs/<random>.blobs      blobs that outlived the record they came with
        deleted                   ids removed by delete()/prune(), one per line
        leases/<key>.lease|.lock  session leases (see ``_leases``)
        .lock                     flock(2) lock file; holds a token every collection replaces

    A save appends ONE frame (its record and every blob it references that is not
    stored yet) to this handle's segment, whose name was made durable when it was
    created, and makes it durable with one ``fdatasync``; the frame being whole is
    the commit point, and a frame cut short by a crash is no record (see
    ``_segment``). Blobs stay content-addressed and shared: a later save that
    references a stored blob finds it through an in-process index of the pack and
    frame headers (see ``_packindex``) and does not store it again. A layout-2
    folder is used as one (a pack file per save, two syncs) until :meth:`upgrade`.

    Locking: :meth:`save` holds a shared ``flock`` on ``.lock`` from its blob check
    to its commit; :meth:`delete` and :meth:`prune` hold it exclusively while they
    retire records and collect blobs. So a collection never removes a blob that a
    save in another thread or process has just found present and is about to
    reference. Records are read without the lock (frames and packs never change once
    written); a listing that a collection overtook is made again under the shared
    lock (see ``_ids``).

    Deleting a record lists its id in ``deleted`` (and renames a record pack to a
    blob-only pack); collection then rewrites segments and blob-only packs that hold
    deleted records or unreferenced blobs. If any remaining record cannot be
    decoded, nothing is collected (what it references is unknown) until it is
    deleted; :meth:`verify` names it. Listing, :meth:`latest` with filters,
    :meth:`sessions` and :meth:`prune` decode records to learn their session, so
    they raise :class:`CheckpointCorrupt` while a damaged record is present; use
    :class:`SQLiteStore` for large or busy stores.

    Args:
        path: the folder; created if missing. An existing folder must be empty or
            an actorflow FileStore.
        layout: the layout of a folder this creates: 3, or 2 (a pack file per save,
            which actorflow versions before layout 3 also read). An existing
            folder keeps its own.
        create: whether to make the folder (or the store in an empty one). With
            ``create=False`` the store opens only a folder a FileStore wrote (what
            a reader such as ``actorflow checkpoints list`` wants): anything else
            raises :class:`StoreNotFound` and nothing is created.

    Raises:
        ValueError: ``layout`` is neither 2 nor 3.
        CheckpointError: ``path`` is a non-empty folder that is not a FileStore.
        StoreNotFound: ``create=False`` and ``path`` is not a FileStore folder.
        UnsupportedFormat: the folder was written with another layout (a layout-1
            folder: convert it once with :meth:`FileStore.upgrade`).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, layout: int = 3, create: bool = True
    ) -> None:
        if sys.platform == "win32":  # pragma: no cover - no flock(2) there
            raise CheckpointError("FileStore needs a POSIX system; use SQLiteStore")
        if layout not in (2, 3):
            raise ValueError(f"layout must be 2 or 3, not {layout!r}")
        self._root = Path(path)
        if not create and not (self._root / gc.FILESTORE_MARKER).is_file():
            why = "no actorflow-store marker in it" if self._root.is_dir() else "no such folder"
            raise StoreNotFound(
                f"no actorflow FileStore at {self._root}: {why}; check the path "
                "(FileStore(path) with create=True makes a new one)"
            )
        self._packs = self._root / gc.PACKS
        self._closed = False
        self._deleted = self._root / "deleted"
        self._layout = gc.open_layout(self._root, layout)
        # Layout 3 appends saves to a segment of this handle's own; layout 2 writes packs.
        self._writer = SegmentWriter(self._packs) if self._layout == 3 else None
        self._segments = SegmentRecords(self._packs, self._deleted) if self._writer else None
        self._index = PackIndex(self._packs, self._segments.frames if self._segments else None)
        self._lock = StoreLock(self._root, self._index, repr(self))
        self._blobs = FileBlobs(self._root, self._packs, self._index, self._lock)
        self._leases = FileLeases(self._root)

    @staticmethod
    def upgrade(path: str | os.PathLike[str]) -> None:
        """Convert a FileStore folder of layout 1 (a file per blob and per record) or 2 to layout 3.

        Run it once, while no process uses the folder. It is crash-safe and can be
        re-run: the old files are removed only after the new layout is in place.

        Older actorflow versions do not read layout 3: no process of one may use the
        folder afterwards.

        Raises:
            UnsupportedFormat: the folder has a layout this actorflow does not know.
            CheckpointError: the folder is not a FileStore, or cannot be written.
        """
        gc.upgrade_layout(Path(path))

    @property
    def path(self) -> Path:
        """The store's folder."""
        return self._root

    @property
    def layout(self) -> int:
        """The folder's layout: 3, or 2 (a folder older actorflow versions also read)."""
        return self._layout

    def close(self) -> None:
        """Stop appending to this handle's segment and refuse further use. Idempotent."""
        if self._writer is not None:
            self._writer.close()
        self._lock.close()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileStore({str(self._root)!r})"

    # --- the protocol ------------------------------------------------------------

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        """Store a record and its new blobs atomically (see CheckpointStore.save).

        Layout 3 appends them, as one frame, to this handle's segment (one
        ``fdatasync``); layout 2, and an id that was deleted before, get a pack of
        their own. The session's lease lock is held from the fencing check to the
        commit, so saves of one session (the only ones that can share an id) are
        serialised: the second save of an id finds the first and is refused.
        """
        record = encode_checkpoint(checkpoint)
        digests = checkpoint.blob_digests()
        given = checked_blobs(checkpoint.id, blobs, digests)
        self._check_open()
        if not _SAFE_ID.fullmatch(checkpoint.id):
            raise CheckpointError(f"checkpoint id {checkpoint.id!r} is not usable as a file name")
        final = self._packs / f"{checkpoint.id}{RECORD_SUFFIX}"
        try:
            with (
                self._leases.fenced(checkpoint.session, lease, checkpoint.id),
                self._lock.held(exclusive=False),
            ):
                segments = self._segments
                if segments is not None:
                    segments.refresh()
                    # Behind a damaged frame may be this very id, or the newest record of
                    # the lineage this save continues: the store could not show it.
                    segments.check_whole(
                        f"checkpoint {checkpoint.id} is not saved: the store cannot tell"
                        " whether it holds it already, nor show the lineage it continues"
                    )
                    if segments.find(checkpoint.id) is not None:
                        raise already_stored(checkpoint.id)
                    if checkpoint.id in segments.deleted():
                        segments = None  # the deleted list hides its frames: use a pack
                if final.exists():
                    raise already_stored(checkpoint.id)
                # Only blobs the record needs but was not given force a look at other
                # handles' packs; a given blob another handle stored meanwhile may be
                # stored twice (harmless: same bytes), which keeps saves O(1) in the
                # number of packs instead of listing the folder every time.
                stored = self._blobs.stored(digests - given.keys(), also=given.keys())
                missing = [d for d in digests if d not in given and d not in stored]
                if missing:
                    raise dangling(checkpoint.id, missing)
                new: builtins.list[tuple[str, int, BlobSource]] = [
                    (d, len(given[d]), given[d]) for d in sorted(given) if d not in stored
                ]
                # Where the other blobs are, so a handle that never read this folder
                # finds them without reading every pack header (see _find).
                hints = encode_hints(self._index.locations(digests & stored))
                if segments is not None and self._writer is not None:
                    name, frame = self._writer.append(
                        self._index.generation,
                        checkpoint.id,
                        record,
                        [(d, given[d]) for d in sorted(given) if d not in stored],
                        hints,
                    )
                    assert frame.header is not None
                    self._index.add_frame(name, frame.header, frame.end)
                    segments.note(name, frame)
                    return
                header = write_pack(self._packs, final, record, new, hints)
                if header is None:
                    raise already_stored(checkpoint.id)
                self._index.add(final.name, header)
        except OSError as exc:
            raise CheckpointError(
                f"could not write checkpoint {checkpoint.id} to {self._root}: {exc}"
            ) from exc

    def load(self, checkpoint_id: str) -> Checkpoint:
        """The record with this id, freshly decoded (see CheckpointStore.load)."""
        self._check_open()
        check_checkpoint_id(checkpoint_id)
        if not _SAFE_ID.fullmatch(checkpoint_id):
            raise not_found(checkpoint_id)
        return self._read(checkpoint_id)

    def load_blob(self, digest: str) -> bytes:
        """The blob with this digest, verified (see CheckpointStore.load_blob)."""
        return self.load_blobs([digest])[digest]

    def load_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several blobs, each verified, reading each pack once (see ``BlobBatchReader``).

        Raises:
            CheckpointNotFound: one of them is not stored.
            CheckpointCorrupt: one of them does not match its digest.
        """
        self._check_open()
        return self._blobs.load(digests)

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        """The subset of ``digests`` that is stored."""
        self._check_open()
        return self._blobs.has(digests)

    def list(
        self,
        *,
        workflow: str | None = None,
        session: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Matching records, oldest first; a damaged record raises CheckpointCorrupt."""
        self._check_open()
        wanted = matching(workflow, session, kind)
        return [cp for cp in self._scan(self._ids()) if wanted(cp)]

    def latest(
        self, *, workflow: str | None = None, session: str | None = None
    ) -> Checkpoint | None:
        """The newest matching record, or None; a damaged candidate raises."""
        self._check_open()
        wanted = matching(workflow, session)
        return next((cp for cp in self._scan(reversed(self._ids())) if wanted(cp)), None)

    def history(self, checkpoint_id: str) -> builtins.list[Checkpoint]:
        """This record and its stored ancestors, newest first (see CheckpointStore.history)."""
        return lineage(self, checkpoint_id)

    def session_history(self, session: str, *, since: int = 0) -> builtins.list[HistoryEntry]:
        """The session's history entries from ``since`` (see CheckpointStore.session_history)."""
        check_session_id(session, "session")
        return session_history(self.list(session=session), since)

    def sessions(self) -> builtins.list[str]:
        """Every session with a stored record, sorted."""
        self._check_open()
        return sorted({cp.session for cp in self._scan(self._ids())})

    def delete(self, checkpoint_id: str) -> None:
        """Delete a record (damaged or not) and collect unreferenced blobs."""
        self._check_open()
        check_checkpoint_id(checkpoint_id)
        if not _SAFE_ID.fullmatch(checkpoint_id):
            raise not_found(checkpoint_id)
        with self._lock.held(exclusive=True) as lock:
            assert lock is not None  # a write section has its lock, or raised
            if not self._exists(checkpoint_id):
                raise not_found(checkpoint_id)
            self._forget([checkpoint_id], lock)

    def prune(self, session: str, keep: int) -> int:
        """Keep the newest ``keep`` cuts of ``session`` (see CheckpointStore.prune)."""
        check_session_id(session, "session")
        check_keep(keep)
        self._check_open()
        with self._lock.held(exclusive=True) as lock:
            assert lock is not None  # a write section has its lock, or raised
            doomed = prune_plan(
                (
                    (cp.id, cp.kind.value, cp.parent_id)
                    for cp in self._scan(self._listed())
                    if cp.session == session
                ),
                keep,
            )
            if doomed:
                self._forget(doomed, lock)
            return len(doomed)

    def ids(self) -> builtins.list[str]:
        """Every stored checkpoint id, damaged records included, oldest first.

        Not part of the protocol: what ``actorflow checkpoints verify`` counts, and
        how it reaches the records that :meth:`list` cannot decode around.
        """
        self._check_open()
        return self._ids()

    def prune_older_than(self, cutoff: float, *, whole_sessions: bool = False) -> int:
        """Remove records by age (see CheckpointStore.prune_older_than).

        Decodes every record to learn its session and age: a damaged one raises
        CheckpointCorrupt and nothing is deleted. With ``whole_sessions``, the idle
        sessions go a batch at a time, each batch under the locks of its sessions'
        leases (an open file each, so a batch is bounded by the process's limit).
        """
        limit = check_cutoff(cutoff)
        self._check_open()
        with self._lock.held(exclusive=True) as lock:
            assert lock is not None  # a write section has its lock, or raised
            records = [
                (cp.id, cp.session, cp.kind.value, cp.parent_id, cp.created_at)
                for cp in self._scan(self._listed())
            ]
            if not whole_sessions:
                doomed = age_plan(records, limit, whole_sessions=False)
                if doomed:
                    self._forget(doomed, lock)
                return len(doomed)
            idle = sorted(idle_sessions(records, limit))
            removed = 0
            for start in range(0, len(idle), _SESSIONS_A_BATCH):
                batch = idle[start : start + _SESSIONS_A_BATCH]
                with self._leases.unopened(batch) as unopened:
                    doomed = [r[0] for r in records if r[1] in unopened]
                    if doomed:
                        self._forget(doomed, lock)
                removed += len(doomed)
            return removed

    def verify(self) -> builtins.list[str]:
        """Every problem found in the store, one line each; [] when healthy."""
        self._check_open()
        problems: builtins.list[str] = []
        with self._lock.held(exclusive=False, write=False):
            self._index.scan()
            damaged = dict(self._index.damaged)
        problems += [
            f"pack {name} is damaged: {why}"
            for name, (_, why) in sorted(damaged.items())
            if not name.endswith(RECORD_SUFFIX)  # a damaged record pack is reported below
        ]
        ids = self._ids(strict=False)
        if self._segments is not None:  # (segments that stopped reading are listed above)
            problems += self._segments.misnamed()
        stored = set(ids)
        deleted, unreadable = read_deleted(self._deleted, _SAFE_ID)
        if unreadable:
            problems.append(f"{self._deleted} is damaged: {unreadable}")
        blob_state: dict[str, str] = {}
        for checkpoint_id in ids:
            try:
                cp = self._read(checkpoint_id)
            except CheckpointNotFound:
                continue  # deleted while we looked
            except (CheckpointCorrupt, UnsupportedFormat) as exc:
                problems.append(str(exc))
                continue
            parent = cp.parent_id
            if parent is not None and parent not in stored and parent not in deleted:
                problems.append(f"checkpoint {cp.id}: parent {parent} was never stored")
            for digest in sorted(cp.blob_digests()):
                if digest not in blob_state:
                    blob_state[digest] = self._blobs.state(digest)
                if blob_state[digest] != "ok":
                    problems.append(f"checkpoint {cp.id}: blob {digest} is {blob_state[digest]}")
        return problems

    # --- leases (see CheckpointStore.acquire_lease) --------------------------------

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        """Take the session if no live lease holds it (see CheckpointStore.acquire_lease).

        ``lock_wait`` bounds the wait for the session's ``flock`` (held by every save
        and lease change of the session; None: as long as it takes).
        """
        self._check_open()
        return self._leases.acquire(session, owner, ttl, lock_wait)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend a current lease (see CheckpointStore.renew_lease)."""
        self._check_open()
        return self._leases.renew(lease, ttl)

    def release_lease(self, lease: Lease) -> None:
        """End a current lease; a stale one is ignored (see CheckpointStore.release_lease)."""
        self._check_open()
        self._leases.release(lease)

    def current_lease(self, session: str) -> Lease | None:
        """The live lease of ``session``, or None."""
        self._check_open()
        return self._leases.current(session)

    def request_cancel(self, session: str, run_id: str) -> bool:
        """Note a cancel of ``run_id`` for the holder of ``session`` (see CancelRequests)."""
        self._check_open()
        return self._leases.request_cancel(session, run_id)

    # --- internals -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise store_closed(self)

    def _ids(self, *, strict: bool = True) -> builtins.list[str]:
        """Every stored id; ``strict``: raise CheckpointCorrupt if a segment is damaged.

        A collection moves a segment's live records into packs and then unlinks the
        segment: a listing it overtook (the folder read before the packs appeared, the
        segments after the segment was gone) would find neither, and a live session
        would look deleted. So a listing is made without the lock and kept only if the
        collection token (see ``_packindex``) was the same before and after it and
        said no collection was under way; otherwise it is made again under the shared
        lock, where no collection runs. A listing thus never waits on a lock holder
        that does not collect (a save, however stalled).
        """
        before = self._lock.token()
        if not is_collecting(before):
            ids = self._listed(strict=strict)
            if self._lock.token() == before:
                return ids
        with self._lock.held(exclusive=False, write=False):
            return self._listed(strict=strict)

    def _listed(self, *, strict: bool = True) -> builtins.list[str]:
        """:meth:`_ids`, for a caller that holds the store lock."""
        try:
            names = os.listdir(self._packs)
        except FileNotFoundError as exc:
            raise CheckpointError(f"{self._packs} is missing: the store is damaged") from exc
        ids = {
            n[: -len(RECORD_SUFFIX)]
            for n in names
            if n.endswith(RECORD_SUFFIX) and not n.startswith(".")
        }
        if self._segments is not None and any(n.endswith(SEGMENT_SUFFIX) for n in names):
            self._segments.refresh()
            ids |= self._segments.ids(strict=strict)
        return sorted(ids)

    def _exists(self, checkpoint_id: str) -> bool:
        if (self._packs / f"{checkpoint_id}{RECORD_SUFFIX}").exists():
            return True
        if self._segments is None:
            return False
        self._segments.refresh()
        return self._segments.find(checkpoint_id) is not None

    def _read(self, checkpoint_id: str) -> Checkpoint:
        name = f"{checkpoint_id}{RECORD_SUFFIX}"
        try:
            data: bytes | None = read_record(self._packs / name)
        except FileNotFoundError:
            data = None
        except CheckpointCorrupt as exc:
            raise CheckpointCorrupt(f"checkpoint {checkpoint_id}: {exc}") from exc
        if data is None:
            try:
                found = self._segments.read_elsewhere(checkpoint_id) if self._segments else None
            except CheckpointCorrupt as exc:
                raise CheckpointCorrupt(f"checkpoint {checkpoint_id}: {exc}") from exc
            if found is None:
                if self._segments is not None:  # never "not found" for a hidden record
                    self._segments.check_whole(
                        f"checkpoint {checkpoint_id} is not in the rest of the store,"
                        " and that damage may hide it"
                    )
                raise not_found(checkpoint_id)
            data, name = found
        checkpoint = decode_stored(checkpoint_id, data)
        self._blobs.noted(name)
        return checkpoint

    def _scan(self, ids: Iterable[str]) -> Iterator[Checkpoint]:
        for checkpoint_id in ids:
            try:
                yield self._read(checkpoint_id)
            except CheckpointNotFound:
                continue  # deleted since the folder was listed: not corruption

    def _forget(self, ids: builtins.list[str], lock: int) -> None:
        """Delete these records and collect. Caller holds the exclusive lock (``lock``)."""
        try:
            self._index.bump(lock)  # before any pack moves: see _packindex
            try:
                with open(self._deleted, "a") as f:
                    f.write("".join(f"{i}\n" for i in ids))
                    f.flush()
                    os.fsync(f.fileno())
                gc.retire_records(self._packs, ids)
                gc.collect(self._packs, self._index, read_deleted_ids(self._deleted))
            finally:
                self._index.settle(lock)  # nothing moves any more (the lock is still held)
        except OSError as exc:
            raise CheckpointError(f"could not delete checkpoints from {self._root}: {exc}") from exc
