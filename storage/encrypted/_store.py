"""EncryptedStore: encryption at rest over any CheckpointStore (AES-GCM, rotating keys).

See ``docs/storage.md`` ("Encryption at rest") for what stays visible, key
rotation and the deduplication trade-off.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable, Iterator, Mapping

from actorflow.errors import CheckpointCorrupt, CheckpointError, CheckpointNotFound
from actorflow.storage._common import checked_blobs, dangling
from actorflow.storage._format import Checkpoint, CheckpointKind, blob_digest, is_blob_digest
from actorflow.storage._history import HistoryEntry
from actorflow.storage._lease import Lease
from actorflow.storage._protocol import BlobBatchReader, CheckpointStore
from actorflow.storage._wrapper import StoreWrapper

from ._digest_map import DigestMap
from ._keyring import Keyring
from ._sealer import RecordSealer, inner_pairs

__all__ = ["EncryptedStore"]

_DIGEST = re.compile(r"[0-9a-f]{64}")


class EncryptedStore(StoreWrapper):
    """A store that encrypts records and blobs before they reach ``inner``.

    AES-GCM under the newest of ``keys``; every key opens what it sealed, so
    adding a key rotates (new records and new blobs use it) and old records stay
    readable while their key is kept. Every sealed value is bound to its place (a
    record to its visible fields, a blob to its digest, a history entry to its
    record and seq): a wrong key, a tampered or a swapped value raises
    :class:`~actorflow.errors.CheckpointCorrupt`, never garbage.

    The caller sees plaintext digests, as from any store; the inner store keeps
    each blob at the sha256 of its sealed bytes, which are deterministic under a
    key (equal blobs, equal bytes), so deduplication holds without revealing a
    blob's plaintext digest to anyone without the key. The record that references
    a blob carries both digests (the plaintext one sealed); this store learns the
    pairs from every record it saves or reads. A lookup of a digest no record it
    read names (``load_blob``, ``has_blobs`` or a save referencing a stored blob
    it did not give, on a fresh handle) reads the saved record's parent first and,
    failing that, opens every record of the inner store once.

    Everything else (leases, retention, ``sessions``, ``delete``) is the inner
    store's, forwarded by :class:`~actorflow.storage.StoreWrapper`.

    Args:
        inner: the store that keeps the sealed records and blobs.
        keys: key id -> key (16, 24 or 32 random bytes, e.g. ``os.urandom(32)``),
            oldest first; the last one encrypts. Keep every key that sealed a
            record or blob still stored.
        close_inner: whether :meth:`close` closes ``inner``.

    Raises:
        ImportError: ``cryptography`` is not installed (``pip install 'actorflow[encryption]'``).
        ValueError, TypeError: ``keys`` is empty or holds a malformed id or key.
    """

    def __init__(
        self, inner: CheckpointStore, *, keys: Mapping[str, bytes], close_inner: bool = True
    ) -> None:
        super().__init__(inner, close_inner=close_inner)
        self._keys = Keyring(keys)
        self._sealer = RecordSealer(self._keys)
        self._where = DigestMap()

    @property
    def key_id(self) -> str:
        """The id of the key new records and blobs are sealed with."""
        return self._keys.current

    # --- writing -------------------------------------------------------------------

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        """Seal ``checkpoint`` and the blobs it references, then save them in the inner store
        (see :meth:`CheckpointStore.save`; errors name plaintext digests)."""
        referenced = checkpoint.blob_digests()
        given = checked_blobs(checkpoint.id, blobs, referenced)
        inner_blobs: dict[str, bytes] = {}
        where: dict[str, str] = {}
        for digest, data in given.items():
            sealed = self._keys.seal_blob(bytes.fromhex(digest), data)
            at = blob_digest(sealed)
            inner_blobs[at] = sealed
            where[digest] = at
        missing = [d for d in referenced if d not in where]
        for digest in missing:
            found = self._where.get(digest) or self._find(digest, checkpoint.parent_id)
            if found is not None:
                where[digest] = found
        lost = [d for d in missing if d not in where]
        if lost:
            raise dangling(checkpoint.id, lost)
        inner_executors = {e: tuple(where[d] for d in ds) for e, ds in checkpoint.executors.items()}
        record = self._sealer.seal(checkpoint, inner_executors)
        try:
            self._inner.save(record, inner_blobs, lease=lease)
        except CheckpointCorrupt as exc:
            raise _plain_error(exc, where) from exc
        self._where.learn(where.items())

    # --- reading records -----------------------------------------------------------

    def load(self, checkpoint_id: str) -> Checkpoint:
        """The record, opened (see :meth:`CheckpointStore.load`)."""
        return self._open(self._inner.load(checkpoint_id))

    def list(
        self,
        *,
        workflow: str | None = None,
        session: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Matching records, opened, oldest first (see :meth:`CheckpointStore.list`)."""
        found = self._inner.list(workflow=workflow, session=session, kind=kind)
        return [self._open(cp) for cp in found]

    def latest(
        self, *, workflow: str | None = None, session: str | None = None
    ) -> Checkpoint | None:
        """The newest matching record, opened (see :meth:`CheckpointStore.latest`)."""
        found = self._inner.latest(workflow=workflow, session=session)
        return None if found is None else self._open(found)

    def ids(self) -> builtins.list[str]:
        """Every record's id, damaged or not, as the inner store lists them (the
        built-in stores do; records keep their ids when sealed); with an inner store
        that cannot, the ids of the records it can read. What a resume that met
        damage reads around it by."""
        every = getattr(self._inner, "ids", None)
        if callable(every):
            return list(every())
        return [cp.id for cp in self._readable()]

    def history(self, checkpoint_id: str) -> builtins.list[Checkpoint]:
        """The lineage, opened, newest first (see :meth:`CheckpointStore.history`)."""
        return [self._open(cp) for cp in self._inner.history(checkpoint_id)]

    def session_history(self, session: str, *, since: int = 0) -> builtins.list[HistoryEntry]:
        """The session's entries, opened (see :meth:`CheckpointStore.session_history`)."""
        found = self._inner.session_history(session, since=since)
        return [self._sealer.open_entry(entry) for entry in found]

    # --- reading blobs -------------------------------------------------------------

    def load_blob(self, digest: str) -> bytes:
        """The blob, opened and verified against ``digest`` (see :meth:`CheckpointStore.load_blob`)."""
        return self._open_blob(digest, self._inner_blob(digest, self._located(digest)))

    def load_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Every requested blob, opened and verified (one inner batch read when it has one)."""
        wanted = builtins.list(dict.fromkeys(digests))
        at = {digest: self._located(digest) for digest in wanted}
        inner = self._inner
        if isinstance(inner, BlobBatchReader):
            try:
                sealed = inner.load_blobs(at.values())
            except (CheckpointCorrupt, CheckpointNotFound) as exc:
                raise _plain_error(exc, at) from exc
            return {d: self._open_blob(d, sealed[at[d]]) for d in wanted}
        return {d: self._open_blob(d, self._inner_blob(d, at[d])) for d in wanted}

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        """The stored subset of ``digests`` (see :meth:`CheckpointStore.has_blobs`)."""
        wanted = {d for d in digests if is_blob_digest(d)}
        if any(self._where.get(d) is None for d in wanted):
            self._learn_all()
        at = {d: i for d in wanted if (i := self._where.get(d)) is not None}
        stored = self._inner.has_blobs(at.values())
        return {d for d, i in at.items() if i in stored}

    def stored_digest(self, digest: str) -> str | None:
        """Where the inner store keeps blob ``digest`` (the sha256 of its sealed bytes), or
        None when no stored record references it. For tools and tests."""
        if not is_blob_digest(digest):
            return None
        return self._where.get(digest) or self._find(digest, None)

    # --- checking ------------------------------------------------------------------

    def verify(self) -> builtins.list[str]:
        """The inner store's problems (naming plaintext digests), and every record or blob
        that does not open with these keys (see :meth:`CheckpointStore.verify`)."""
        problems = self._inner.verify()
        plain = {i: d for d, i in self._where.pairs()}
        opened: dict[str, str] = {}
        for inner in self._readable():
            try:
                pairs = inner_pairs(self._open(inner), inner.executors)
            except CheckpointError as exc:
                problems.append(str(exc))
                continue
            for digest, at in pairs:
                plain[at] = digest
                opened.setdefault(at, inner.id)
        reported = " ".join(problems)
        for at, checkpoint_id in opened.items():
            if at in reported:
                continue
            try:
                self._open_blob(plain[at], self._inner.load_blob(at))
            except CheckpointNotFound:
                continue  # the inner store reported it (or a prune raced this check)
            except CheckpointError as exc:
                problems.append(f"{exc} (used by checkpoint {checkpoint_id})")
        return [_DIGEST.sub(lambda m: plain.get(m[0], m[0]), line) for line in problems]

    # --- the parts -----------------------------------------------------------------

    def _open(self, inner: Checkpoint) -> Checkpoint:
        opened = self._sealer.open(inner)
        self._where.learn(inner_pairs(opened, inner.executors))
        return opened

    def _open_blob(self, digest: str, sealed: bytes) -> bytes:
        what = f"blob {digest}"
        data = self._keys.open_blob(sealed, bytes.fromhex(digest), what)
        if blob_digest(data) != digest:
            raise CheckpointCorrupt(f"{what} is corrupt: its bytes do not match its digest")
        return data

    def _located(self, digest: str) -> str:
        """Where the inner store keeps ``digest``.

        Raises:
            CheckpointNotFound: no stored record references it.
            CheckpointCorrupt: none that opens does, and some record does not open
                (a wrong key, or damage): the blob may be one of its.
        """
        at = self._where.get(digest) if is_blob_digest(digest) else None
        if at is None and is_blob_digest(digest):
            failure = self._learn_all()
            at = self._where.get(digest)
            if at is None and failure is not None:
                raise CheckpointCorrupt(
                    f"blob {digest}: no record that opens references it, and a record "
                    f"that may does not open: {failure}"
                ) from failure
        if at is None:
            raise CheckpointNotFound(f"no blob {digest!r} in this store")
        return at

    def _inner_blob(self, digest: str, at: str) -> bytes:
        try:
            return self._inner.load_blob(at)
        except (CheckpointCorrupt, CheckpointNotFound) as exc:
            raise _plain_error(exc, {digest: at}) from exc

    def _find(self, digest: str, parent_id: str | None) -> str | None:
        """Where the inner store keeps ``digest``: learned from ``parent_id``'s record
        first, else from every record (see the class docstring)."""
        if parent_id is not None:
            try:
                self._open(self._inner.load(parent_id))
            except CheckpointError:
                pass  # not stored or not readable: the full scan decides
            found = self._where.get(digest)
            if found is not None:
                return found
        self._learn_all()
        return self._where.get(digest)

    def _learn_all(self) -> CheckpointError | None:
        """Learn from every record that opens; the first failure of one that does not."""
        failure: CheckpointError | None = None
        for inner in self._readable():
            try:
                self._open(inner)
            except CheckpointError as exc:
                failure = failure or exc  # verify() reports it; a lookup uses what opens
        return failure

    def _readable(self) -> Iterator[Checkpoint]:
        """Every inner record that can be read, session by session (a session holding a
        record that cannot be decoded is skipped whole: the inner verify names it)."""
        try:
            sessions = self._inner.sessions()
        except CheckpointError:
            return  # the inner store cannot list its records: its verify says why
        for session in sessions:
            try:
                yield from self._inner.list(session=session)
            except CheckpointError:
                continue


def _plain_error(
    exc: CheckpointCorrupt | CheckpointNotFound, where: Mapping[str, str]
) -> CheckpointCorrupt | CheckpointNotFound:
    """``exc`` with each inner digest it names replaced by its plaintext digest."""
    plain = {i: d for d, i in where.items()}
    return type(exc)(_DIGEST.sub(lambda m: plain.get(m[0], m[0]), str(exc)))
