"""FileStore: checkpoints as files in a folder, crash-safe and safe for concurrent writers."""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from actorflow.errors import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    UnsupportedFormat,
)

from ._base import (
    StoreBase,
    already_stored,
    check_keep,
    checked_blobs,
    dangling,
    decode_stored,
    not_found,
)
from ._format import Checkpoint, CheckpointKind, encode_checkpoint, is_blob_digest, verify_blob

if sys.platform != "win32":
    import fcntl

_MARKER = "actorflow-store"
_LAYOUT = b"actorflow FileStore layout 1\n"
_LAYOUT_PREFIX = b"actorflow FileStore layout "
_TMP = ".tmp-"
_SUFFIX = ".ckpt"
_KNOWN = {_MARKER, ".lock", "deleted", "checkpoints", "blobs"}
# Ids become file names: no separators, no leading dot, bounded length.
_SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")


class FileStore(StoreBase):
    """A checkpoint store in a folder on a local POSIX file system.

    Layout::

        actorflow-store           layout marker (a newer layout is refused)
        checkpoints/<id>.ckpt     one encoded record per checkpoint
        blobs/<ab>/<abcdef...>    one file per blob, named by its sha256 digest
        deleted                   ids removed by delete()/prune(), one per line
        .lock                     flock(2) lock file

    Every file is written to a uniquely named temp file in its final folder
    (``tempfile.mkstemp``), flushed, fsynced, moved into place and the folder
    fsynced, so a crash leaves either the old state or the new one, and concurrent
    writers never share a temp file. Blobs are written before the record; the
    record is the commit point (created with ``link(2)``, so two writers of one id
    cannot overwrite each other). A crash between blobs and record leaves only
    unreferenced blobs, which the next collection removes.

    Locking: :meth:`save` holds a shared ``flock`` on ``.lock`` from its blob
    check to its commit; :meth:`delete` and :meth:`prune` hold it exclusively while
    they delete and collect blobs. So a collection never removes a blob that a save
    in another thread or process has just found present and is about to reference.
    Reads take no lock: records and blobs are immutable once in place.

    Blob collection is a mark-and-sweep over every record. If any remaining record
    cannot be decoded, nothing is collected (what it references is unknown) until
    it is deleted; :meth:`verify` names it. Listing, :meth:`latest` with filters,
    :meth:`sessions` and :meth:`prune` decode records to learn their session, so
    they raise :class:`CheckpointCorrupt` while a damaged record is present; use
    :class:`SQLiteStore` for large or busy stores.

    Args:
        path: the folder; created if missing. An existing folder must be empty or
            an actorflow FileStore.

    Raises:
        CheckpointError: ``path`` is a non-empty folder that is not a FileStore.
        UnsupportedFormat: the folder was written with a newer layout.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if sys.platform == "win32":  # pragma: no cover - no flock(2) there
            raise CheckpointError("FileStore needs a POSIX system; use SQLiteStore")
        self._root = Path(path)
        self._records = self._root / "checkpoints"
        self._blobs = self._root / "blobs"
        self._lock_path = self._root / ".lock"
        self._deleted = self._root / "deleted"
        self._open_layout()

    @property
    def path(self) -> Path:
        """The store's folder."""
        return self._root

    def __repr__(self) -> str:
        return f"FileStore({str(self._root)!r})"

    # --- the protocol ------------------------------------------------------------

    def save(self, checkpoint: Checkpoint, blobs: Mapping[str, bytes]) -> None:
        """Store a record and its new blobs atomically (see CheckpointStore.save)."""
        record = encode_checkpoint(checkpoint)
        given = checked_blobs(checkpoint, blobs)
        digests = checkpoint.blob_digests()
        self._check_open()
        if not _SAFE_ID.fullmatch(checkpoint.id):
            raise CheckpointError(f"checkpoint id {checkpoint.id!r} is not usable as a file name")
        path = self._records / f"{checkpoint.id}{_SUFFIX}"
        with self._locked(exclusive=False):
            if path.exists():
                raise already_stored(checkpoint.id)
            missing = [d for d in digests if d not in given and not self._blob_path(d).exists()]
            if missing:
                raise dangling(checkpoint, missing)
            try:
                for digest in sorted(given):
                    blob_path = self._blob_path(digest)
                    if not blob_path.exists():
                        self._write_blob(blob_path, given[digest])
                committed = _write_file(self._records, path, record, exclusive=True)
            except OSError as exc:
                raise CheckpointError(
                    f"could not write checkpoint {checkpoint.id} to {self._root}: {exc}"
                ) from exc
            if not committed:
                raise already_stored(checkpoint.id)

    def load(self, checkpoint_id: str) -> Checkpoint:
        """The record with this id, freshly decoded (see CheckpointStore.load)."""
        self._check_open()
        if not isinstance(checkpoint_id, str) or not _SAFE_ID.fullmatch(checkpoint_id):
            raise not_found(str(checkpoint_id))
        return self._read(checkpoint_id)

    def load_blob(self, digest: str) -> bytes:
        """The blob with this digest, verified (see CheckpointStore.load_blob)."""
        self._check_open()
        if not is_blob_digest(digest):
            raise CheckpointNotFound(f"no blob {digest!r} in this store")
        try:
            data = self._blob_path(digest).read_bytes()
        except FileNotFoundError:
            raise CheckpointNotFound(f"no blob {digest!r} in this store") from None
        return verify_blob(digest, data)

    def load_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several blobs, each verified (see ``BlobBatchReader``).

        Raises:
            CheckpointNotFound: one of them is not stored.
            CheckpointCorrupt: one of them does not match its digest.
        """
        return {d: self.load_blob(d) for d in sorted(set(digests))}

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        """The subset of ``digests`` that is stored."""
        self._check_open()
        return {d for d in digests if is_blob_digest(d) and self._blob_path(d).exists()}

    def list(
        self,
        *,
        workflow: str | None = None,
        session: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Matching records, oldest first; a damaged record raises CheckpointCorrupt."""
        self._check_open()
        return [
            cp
            for cp in self._scan(self._ids())
            if (workflow is None or cp.workflow == workflow)
            and (session is None or cp.session == session)
            and (kind is None or cp.kind == kind)
        ]

    def latest(
        self, *, workflow: str | None = None, session: str | None = None
    ) -> Checkpoint | None:
        """The newest matching record, or None; a damaged candidate raises."""
        self._check_open()
        for cp in self._scan(reversed(self._ids())):
            if (workflow is None or cp.workflow == workflow) and (
                session is None or cp.session == session
            ):
                return cp
        return None

    def sessions(self) -> builtins.list[str]:
        """Every session with a stored record, sorted."""
        self._check_open()
        return sorted({cp.session for cp in self._scan(self._ids())})

    def delete(self, checkpoint_id: str) -> None:
        """Delete a record (damaged or not) and collect unreferenced blobs."""
        self._check_open()
        if not isinstance(checkpoint_id, str) or not _SAFE_ID.fullmatch(checkpoint_id):
            raise not_found(str(checkpoint_id))
        with self._locked(exclusive=True):
            try:
                (self._records / f"{checkpoint_id}{_SUFFIX}").unlink()
            except FileNotFoundError:
                raise not_found(checkpoint_id) from None
            self._forget([checkpoint_id])

    def prune(self, session: str, keep: int) -> int:
        """Keep the newest ``keep`` records of ``session``; returns how many were deleted."""
        check_keep(keep)
        self._check_open()
        with self._locked(exclusive=True):
            ids = [cp.id for cp in self._scan(self._ids()) if cp.session == session]
            doomed = ids[: len(ids) - keep] if keep else ids
            for checkpoint_id in doomed:
                (self._records / f"{checkpoint_id}{_SUFFIX}").unlink(missing_ok=True)
            if doomed:
                self._forget(doomed)
            return len(doomed)

    def verify(self) -> builtins.list[str]:
        """Every problem found in the store, one line each; [] when healthy."""
        self._check_open()
        problems: builtins.list[str] = []
        ids = self._ids()
        stored = set(ids)
        deleted = self._read_deleted()
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
                    blob_state[digest] = self._blob_state(digest)
                if blob_state[digest] != "ok":
                    problems.append(f"checkpoint {cp.id}: blob {digest} is {blob_state[digest]}")
        return problems

    # --- internals -----------------------------------------------------------------

    def _open_layout(self) -> None:
        marker = self._root / _MARKER
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            if not marker.exists():
                strangers = [p.name for p in self._root.iterdir() if p.name not in _KNOWN]
                if [s for s in strangers if not s.startswith(_TMP)]:
                    raise CheckpointError(
                        f"{self._root} is not empty and not an actorflow FileStore; "
                        "choose an empty or new folder"
                    )
                self._records.mkdir(exist_ok=True)
                self._blobs.mkdir(exist_ok=True)
                _write_file(self._root, marker, _LAYOUT, exclusive=True)
            layout = marker.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"cannot open FileStore at {self._root}: {exc}") from exc
        if layout != _LAYOUT:
            if layout.startswith(_LAYOUT_PREFIX):
                raise UnsupportedFormat(
                    f"{self._root} uses {layout.decode(errors='replace').strip()!r}; this "
                    f"actorflow reads {_LAYOUT.decode().strip()!r}. Upgrade actorflow."
                )
            raise CheckpointCorrupt(f"{marker} is damaged: not an actorflow FileStore marker")

    @contextlib.contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[None]:
        # A fresh open file description per call: flock(2) locks held through
        # different descriptions conflict even within one process, so threads
        # of this process are serialised exactly like other processes.
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing the description releases the lock

    def _blob_path(self, digest: str) -> Path:
        return self._blobs / digest[:2] / digest

    def _write_blob(self, path: Path, data: bytes) -> None:
        folder = path.parent
        if not folder.exists():
            folder.mkdir(exist_ok=True)
            _fsync_dir(self._blobs)
        # Same digest, same bytes: replacing a concurrently written copy is harmless.
        _write_file(folder, path, data, exclusive=False)

    def _ids(self) -> builtins.list[str]:
        try:
            names = os.listdir(self._records)
        except FileNotFoundError as exc:
            raise CheckpointError(f"{self._records} is missing: the store is damaged") from exc
        return sorted(
            n[: -len(_SUFFIX)] for n in names if n.endswith(_SUFFIX) and not n.startswith(".")
        )

    def _read(self, checkpoint_id: str) -> Checkpoint:
        try:
            data = (self._records / f"{checkpoint_id}{_SUFFIX}").read_bytes()
        except FileNotFoundError:
            raise not_found(checkpoint_id) from None
        return decode_stored(checkpoint_id, data)

    def _scan(self, ids: Iterable[str]) -> Iterator[Checkpoint]:
        for checkpoint_id in ids:
            try:
                yield self._read(checkpoint_id)
            except CheckpointNotFound:
                continue  # deleted since the folder was listed: not corruption

    def _blob_state(self, digest: str) -> str:
        try:
            verify_blob(digest, self._blob_path(digest).read_bytes())
        except FileNotFoundError:
            return "missing"
        except CheckpointCorrupt:
            return "corrupt"
        return "ok"

    def _read_deleted(self) -> set[str]:
        try:
            return set(self._deleted.read_text().split())
        except FileNotFoundError:
            return set()

    def _forget(self, ids: builtins.list[str]) -> None:
        """Finish deleting unlinked records. Caller holds the exclusive lock."""
        # The unlinks must be durable before any blob goes: otherwise a crash could
        # bring back a record whose blobs were already collected.
        _fsync_dir(self._records)
        with open(self._deleted, "a") as f:
            f.write("".join(f"{i}\n" for i in ids))
            f.flush()
            os.fsync(f.fileno())
        self._collect()

    def _collect(self) -> None:
        """Remove unreferenced blobs and stale temp files. Caller holds the exclusive lock."""
        referenced: set[str] = set()
        for checkpoint_id in self._ids():
            try:
                referenced |= self._read(checkpoint_id).blob_digests()
            except (CheckpointCorrupt, UnsupportedFormat):
                return  # cannot tell what it references: collect nothing (see class doc)
        # No save holds the shared lock now, so every temp file is a crashed writer's.
        for name in os.listdir(self._records):
            if name.startswith(_TMP):
                (self._records / name).unlink(missing_ok=True)
        for folder in self._blobs.iterdir():
            if not folder.is_dir():
                continue
            removed = False
            for blob in folder.iterdir():
                if blob.name.startswith(_TMP) or blob.name not in referenced:
                    blob.unlink(missing_ok=True)
                    removed = True
            if removed:
                _fsync_dir(folder)


def _write_file(folder: Path, final: Path, data: bytes, *, exclusive: bool) -> bool:
    """Durably put ``data`` at ``final`` via a private temp file in ``folder``.

    With ``exclusive`` the file is created only if absent (``link(2)`` fails on an
    existing name, atomically) and False is returned if it was there already.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=_TMP, dir=folder)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(folder)
    return True


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
