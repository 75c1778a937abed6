"""The checkpoint record and its byte encoding.

A checkpoint record is plain data: ids, names, numbers, blob digests, one opaque
``runtime`` byte string and msgpack-plain user metadata. Executor snapshots are not
inside the record; they are content-addressed blobs the record names by digest, so an
unchanged snapshot is stored once however many checkpoints use it.

On disk a record is one msgpack array, the *frame*, which never changes between
format versions::

    ["actorflow.checkpoint", format_version, sha256(prefix + body), body]

``body`` is a msgpack map holding the fields; the digest covers the format version
and the body, so a flipped bit anywhere is reported as :class:`CheckpointCorrupt`,
and only an intact record of another version is :class:`UnsupportedFormat`.
Decoding uses plain msgpack only: no ext types, no hooks, nothing imported or called.
"""

from __future__ import annotations

import enum
import hashlib
import os
import random
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any, NoReturn

import msgpack

from actorflow._msgpack import bin_header, packer
from actorflow.errors import CheckpointCorrupt, EncodeError, UnsupportedFormat

from ._history import HistoryEntry, entries_of, raw_entries

FORMAT_VERSION = 3
"""The record format this actorflow writes. It reads this one and format 2 (the same
record without ``history``, written by earlier versions)."""

_READABLE = frozenset({2, FORMAT_VERSION})

_MAGIC = "actorflow.checkpoint"
_DIGEST_SIZE = 32
_FIELDS = frozenset(
    {
        "id",
        "parent_id",
        "session",
        "workflow",
        "graph_signature",
        "superstep",
        "kind",
        "created_at",
        "executors",
        "runtime",
        "metadata",
    }
)
_FIELDS_BY_VERSION = {2: _FIELDS, FORMAT_VERSION: _FIELDS | {"history"}}


class CheckpointKind(enum.StrEnum):
    """Why a checkpoint was taken (see docs/architecture.md, "Checkpoints")."""

    ENTRY = "entry"
    """Superstep 0: the input is queued and no executor has run yet."""
    STEP = "step"
    """A barrier after a superstep."""
    RESPONSE = "response"
    """Responses to requests are queued and not yet handled."""
    FINAL = "final"
    """The run went idle or completed."""
    HALT = "halt"
    """The run stopped before going idle: it failed, was cancelled or reached its
    superstep limit. The state is its last barrier's (a superstep that failed is
    rolled back, its messages in flight again), so resuming from it continues the
    run; its history entries say why it stopped."""
    PARTIAL = "partial"
    """One executor's finished part of a superstep whose barrier was not reached yet
    (its parent is the last cut); lets a crash cost only the unfinished executors."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One consistent cut of a run, as plain data.

    The record owns its containers: construction copies ``executors`` and
    ``metadata`` into fresh dicts, lists and tuples, so nothing the caller still
    holds is reachable from it, and every record a store hands out is the caller's
    own (mutating it changes neither the store nor any other record).

    Raises:
        TypeError: a field has the wrong type.
        ValueError: ``kind`` is not a :class:`CheckpointKind` value.
        EncodeError: ``metadata`` holds something that is not plain msgpack
            (``None``, bool, int, float, str, bytes, lists and str-keyed dicts).
    """

    id: str
    """Time-sortable id from :func:`new_checkpoint_id`: sorting ids sorts by creation."""
    parent_id: str | None
    """The previous checkpoint of this lineage; ``None`` for the first one."""
    session: str
    """Lineage key: the session id."""
    workflow: str
    """Name of the workflow that took the checkpoint."""
    graph_signature: str
    """Hex digest of the graph's structure, checked on restore."""
    superstep: int
    """Superstep the barrier closed."""
    kind: CheckpointKind
    """Why the checkpoint was taken."""
    created_at: float
    """Unix time in seconds."""
    executors: Mapping[str, tuple[str, ...]]
    """Executor id -> ordered digests of the blobs holding its snapshot chunks."""
    runtime: bytes
    """Opaque msgpack owned by the runtime (messages in flight, fan-in buffers, ...)."""
    metadata: Mapping[str, Any]
    """User metadata: plain msgpack values under str keys."""
    format_version: int = FORMAT_VERSION
    """Record format version; only :data:`FORMAT_VERSION` can be encoded."""
    history: tuple[HistoryEntry, ...] = ()
    """The session's history entries this cut carries (what happened since the
    lineage's previous cut), ascending by ``seq``; each names this record as its
    ``checkpoint_id`` (an entry naming another record is given this one's id).
    Stored atomically with the record (see ``_history``)."""

    def __post_init__(self) -> None:
        for name in ("id", "session", "workflow", "graph_signature"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Checkpoint.{name} must be a str")
        if self.parent_id is not None and not isinstance(self.parent_id, str):
            raise TypeError("Checkpoint.parent_id must be a str or None")
        if not _is_int(self.superstep) or not _is_int(self.format_version):
            raise TypeError("Checkpoint.superstep and format_version must be ints")
        if not 0 <= self.superstep < 2**63:
            raise ValueError("Checkpoint.superstep must be in [0, 2**63)")
        if not isinstance(self.created_at, int | float) or isinstance(self.created_at, bool):
            raise TypeError("Checkpoint.created_at must be a number (unix seconds)")
        if not isinstance(self.runtime, bytes | bytearray | memoryview):
            raise TypeError("Checkpoint.runtime must be bytes")
        if not isinstance(self.executors, Mapping) or not isinstance(self.metadata, Mapping):
            raise TypeError("Checkpoint.executors and metadata must be mappings")
        executors: dict[str, tuple[str, ...]] = {}
        # Typed as object: callers (and decoded bytes) may break the annotation.
        given: Mapping[Any, object] = self.executors
        for executor, digests in given.items():
            if not isinstance(executor, str) or not isinstance(digests, tuple | list):
                raise TypeError("Checkpoint.executors maps executor ids to tuples of digests")
            chunk_digests = tuple(digests)
            if not all(is_blob_digest(d) for d in chunk_digests):
                raise ValueError(
                    f"Checkpoint.executors[{executor!r}] must hold blob digests "
                    "(64 lowercase hex, see blob_digest())"
                )
            executors[executor] = chunk_digests
        # object.__setattr__ is how a frozen dataclass normalises its own fields.
        object.__setattr__(self, "kind", CheckpointKind(self.kind))
        object.__setattr__(self, "created_at", float(self.created_at))
        object.__setattr__(self, "runtime", bytes(self.runtime))
        object.__setattr__(self, "executors", executors)
        object.__setattr__(self, "metadata", _plain_copy(self.metadata, "metadata"))
        object.__setattr__(self, "history", _checked_history(self.id, self.history))

    @classmethod
    def _from_runtime(
        cls,
        *,
        id: str,
        parent_id: str | None,
        session: str,
        workflow: str,
        graph_signature: str,
        superstep: int,
        kind: CheckpointKind,
        created_at: float,
        executors: dict[str, tuple[str, ...]],
        runtime: bytes,
        metadata: Mapping[str, Any],
        history: tuple[HistoryEntry, ...] = (),
    ) -> Checkpoint:
        """Build a record without re-checking what the runtime already guarantees.

        For the supervisor's own records, written every superstep: ``executors`` is
        a fresh dict of tuples of sha256 hex digests, ``runtime`` fresh bytes, ``kind``
        a member, ``created_at`` a float, ``history`` checked entries of this record in
        order. User ``metadata`` is still copied and checked.
        """
        record = object.__new__(cls)
        fields_of = {
            "id": id,
            "parent_id": parent_id,
            "session": session,
            "workflow": workflow,
            "graph_signature": graph_signature,
            "superstep": superstep,
            "kind": kind,
            "created_at": created_at,
            "executors": executors,
            "runtime": runtime,
            "metadata": _plain_copy(metadata, "metadata") if metadata else {},
            "format_version": FORMAT_VERSION,
            "history": history,
        }
        for name, value in fields_of.items():
            object.__setattr__(record, name, value)  # frozen: set as __init__ would
        return record

    def blob_digests(self) -> frozenset[str]:
        """Every blob digest this record references (each once)."""
        return frozenset(chain.from_iterable(self.executors.values()))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _checked_history(checkpoint_id: str, history: object) -> tuple[HistoryEntry, ...]:
    """``history`` as a tuple of this record's entries in ascending ``seq``.

    An entry's ``checkpoint_id`` is the record that holds it, so an entry naming
    another one (a record copied under a new id) is given this record's id.
    """
    if not isinstance(history, tuple | list):
        raise TypeError("Checkpoint.history must be a tuple of HistoryEntry")
    entries: list[HistoryEntry] = []
    last = -1
    for entry in history:
        if not isinstance(entry, HistoryEntry):
            raise TypeError("Checkpoint.history must hold HistoryEntry values")
        if entry.seq <= last:
            raise ValueError("Checkpoint.history must be in strictly ascending seq")
        last = entry.seq
        if entry.checkpoint_id == checkpoint_id:
            entries.append(entry)
        else:
            entries.append(
                HistoryEntry(entry.seq, entry.kind, entry.time, entry.data, checkpoint_id)
            )
    return tuple(entries)


def _plain_copy(value: Any, path: str) -> Any:
    """A fresh deep copy of a plain msgpack value; EncodeError names what is not."""
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise EncodeError(f"{path} is an int outside msgpack's 64-bit range", type_name="int")
        return int(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    # Exactly tuple: a namedtuple (msgpack's ExtType is one) would lose its type silently.
    if isinstance(value, list) or type(value) is tuple:
        return [_plain_copy(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        copied: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise EncodeError(f"{path} has a non-str key {key!r}", type_name=type(key).__name__)
            copied[key] = _plain_copy(item, f"{path}[{key!r}]")
        return copied
    kind = type(value)
    raise EncodeError(
        f"{path} holds {'an' if kind.__qualname__[:1].lower() in 'aeiou' else 'a'} "
        f"{kind.__qualname__}; checkpoint metadata takes only plain msgpack "
        "values (None, bool, int, float, str, bytes, lists, str-keyed dicts)",
        type_name=f"{kind.__module__}.{kind.__qualname__}",
    )


# --- ids and digests -------------------------------------------------------------

_id_lock = threading.Lock()
_id_last_ns = 0
_id_seq = 0
_ID_SEQ_LIMIT = 0x10000
# The id suffix needs to differ between processes, not to be secret: a private
# generator (never the user's global random state) seeded from os.urandom and
# reseeded in every forked child costs a tenth of a getrandom() system call.
_id_random = random.Random()


def _id_clock_after_fork() -> None:
    """In a forked child: a suffix of its own, and the clock's lock free (a parent thread
    making an id at the fork would otherwise hold it in the child for good)."""
    global _id_lock  # noqa: PLW0603 - the id clock is process-wide state by design
    _id_random.seed()
    _id_lock = threading.Lock()


os.register_at_fork(after_in_child=_id_clock_after_fork)


def new_checkpoint_id() -> str:
    """A new checkpoint id whose lexicographic order is its creation order.

    The id is ``<ns since epoch, 16 hex>-<per-process sequence, 4 hex>-<8 random hex>``.
    Within one process ids strictly increase even if the clock steps back; across
    processes they sort by creation time within the clock's precision, and the
    random suffix keeps simultaneous ids distinct. Ids use only ``[0-9a-f-]``, so
    they are safe as file names. Thread-safe.
    """
    global _id_last_ns, _id_seq  # noqa: PLW0603  # the id clock is process-wide state by design
    with _id_lock:
        now = time.time_ns()
        if now > _id_last_ns:
            _id_last_ns, _id_seq = now, 0
        else:
            _id_seq += 1
            if _id_seq == _ID_SEQ_LIMIT:
                _id_last_ns, _id_seq = _id_last_ns + 1, 0
        stamp, seq = _id_last_ns, _id_seq
    return "%016x-%04x-%08x" % (stamp, seq, _id_random.getrandbits(32))  # noqa: UP031 - an f-string with three format specs costs 1.5x


def blob_digest(data: bytes) -> str:
    """The content address of a blob: the lowercase sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


_DIGEST_SHAPE = re.compile(r"[0-9a-f]{64}")


def is_blob_digest(value: object) -> bool:
    """Whether ``value`` has the shape of a :func:`blob_digest` (64 lowercase hex)."""
    return isinstance(value, str) and _DIGEST_SHAPE.fullmatch(value) is not None


def verify_blob(digest: str, data: bytes) -> bytes:
    """Return ``data`` if it matches ``digest``.

    Raises:
        CheckpointCorrupt: the bytes do not hash to ``digest`` (naming it).
    """
    if blob_digest(data) != digest:
        raise CheckpointCorrupt(f"blob {digest} is corrupt: its bytes do not match its digest")
    return data


# --- encoding --------------------------------------------------------------------


def _frame_digest(version: int, body: bytes) -> bytes:
    # Hash the prefix and the body in turn: no concatenated copy of the body.
    if version == FORMAT_VERSION:
        digest = _PREFIX_HASH.copy()
    else:
        digest = hashlib.sha256(f"{_MAGIC}:{version}:".encode())
    digest.update(body)
    return digest.digest()


_PREFIX_HASH = hashlib.sha256(f"{_MAGIC}:{FORMAT_VERSION}:".encode())
"""The frame digest's state after its constant prefix; only ever copied."""


# The last record's executors (a copy), their order, and their raw digests: a
# lineage's records mostly name the same chunks as the one before. Replaced whole,
# never changed, so threads racing on it at worst miss.
_last_raw: tuple[dict[str, tuple[str, ...]], list[str], dict[str, bytes]] = ({}, [], {})


def _raw_digests(executors: Mapping[str, tuple[str, ...]]) -> dict[str, bytes]:
    """``executors`` with each digest tuple as its 32-byte digests, concatenated."""
    global _last_raw  # noqa: PLW0603  # a one-entry cache, replaced atomically
    cached = _last_raw
    if executors == cached[0] and list(executors) == cached[1]:
        return cached[2]
    raw = {k: bytes.fromhex("".join(v)) for k, v in executors.items()}
    _last_raw = (dict(executors), list(executors), raw)
    return raw


# The frame is a msgpack array of 4: the magic, the version, a bin8 of the 32-byte
# digest, then the body as a bin: the bytes msgpack.packb writes for it.
_FRAME_HEAD = b"\x94" + msgpack.packb(_MAGIC) + msgpack.packb(FORMAT_VERSION) + b"\xc4\x20"


def encode_checkpoint(cp: Checkpoint) -> bytes:
    """Encode a record as plain msgpack with its own integrity digest.

    Raises:
        UnsupportedFormat: ``cp.format_version`` is not :data:`FORMAT_VERSION`.
    """
    if cp.format_version != FORMAT_VERSION:
        raise UnsupportedFormat(
            f"cannot write checkpoint format {cp.format_version}: "
            f"this actorflow writes format {FORMAT_VERSION} only"
        )
    body: bytes = packer().pack(
        {
            "id": cp.id,
            "parent_id": cp.parent_id,
            "session": cp.session,
            "workflow": cp.workflow,
            "graph_signature": cp.graph_signature,
            "superstep": cp.superstep,
            "kind": str(cp.kind),
            "created_at": cp.created_at,
            # Digests travel as raw 32-byte strings, concatenated per executor: a record
            # names every chunk of every executor, and hex would double its size.
            "executors": _raw_digests(cp.executors),
            "runtime": cp.runtime,
            "metadata": cp.metadata,
            "history": raw_entries(cp.history),
        }
    )
    digest = _frame_digest(FORMAT_VERSION, body)
    return b"".join((_FRAME_HEAD, digest, bin_header(len(body)), body))


# The body's first field is the id (see encode_checkpoint): a map header, "id", a str.
# Records of every readable version share the frame's shape; only the version in the
# frame head and the body's field count differ.
_HEADS = {
    version: (
        b"\x94" + msgpack.packb(_MAGIC) + msgpack.packb(version) + b"\xc4\x20",
        bytes([0x80 | len(fields)]) + b"\xa2id",
    )
    for version, fields in _FIELDS_BY_VERSION.items()
}
_BODY_HEAD = _HEADS[FORMAT_VERSION][1]
_BIN_SIZES = {0xC4: 1, 0xC5: 2, 0xC6: 4}
RECORD_ID_SPAN = len(_FRAME_HEAD) + _DIGEST_SIZE + 5 + len(_BODY_HEAD) + 2 + 255
"""How many first bytes of a record :func:`record_id` needs for an id of up to 255 bytes."""


def record_id(head: bytes) -> str | None:
    """The id a record written by :func:`encode_checkpoint` names, from its first bytes.

    A store that keeps ids beside its records checks them against this without
    decoding whole records. The id is not verified (only the whole record's digest
    is): it says which record the bytes claim to be. None: ``head`` is too short,
    or is not the start of a record of a readable format (decoding it says what is
    wrong).
    """
    heads = next((h for h in _HEADS.values() if head.startswith(h[0])), None)
    if heads is None:
        return None
    frame_head, body_head = heads
    at = len(frame_head) + _DIGEST_SIZE
    if len(head) <= at or head[at] not in _BIN_SIZES:
        return None
    at += 1 + _BIN_SIZES[head[at]]
    if head[at : at + len(body_head)] != body_head:
        return None
    at += len(body_head)
    tag = head[at] if at < len(head) else 0
    if 0xA0 <= tag <= 0xBF:
        size, at = tag & 0x1F, at + 1
    elif tag == 0xD9 and at + 1 < len(head):
        size, at = head[at + 1], at + 2
    else:
        return None
    ident = head[at : at + size]
    if len(ident) != size:
        return None
    try:
        return ident.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _Rejected(ValueError):
    """Internal: a msgpack ext type appeared where only plain data is allowed."""


def _reject_ext(code: int, data: bytes) -> NoReturn:
    raise _Rejected(f"msgpack ext type {code} is not allowed in a checkpoint record")


def _unpack(data: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True, use_list=True, ext_hook=_reject_ext
        )
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        # ValueError covers truncation, ExtraData, FormatError, StackError, bad UTF-8
        # and _Rejected; TypeError covers non-bytes input.
        raise CheckpointCorrupt(f"{what} is not a valid checkpoint record: {exc}") from exc


def decode_checkpoint(data: bytes) -> Checkpoint:
    """Decode and verify a record written by :func:`encode_checkpoint`.

    Returns a fresh :class:`Checkpoint` whose containers nobody else holds. Never
    returns ``None`` or a raw dict, never imports or calls anything.

    Raises:
        CheckpointCorrupt: the bytes are truncated, bit-flipped, tampered with, or
            not a checkpoint record at all.
        UnsupportedFormat: an intact record of a format version this actorflow
            does not read.
    """
    frame = _unpack(data, "record frame")
    if not (
        isinstance(frame, list)
        and len(frame) == 4
        and frame[0] == _MAGIC
        and _is_int(frame[1])
        and isinstance(frame[2], bytes)
        and len(frame[2]) == _DIGEST_SIZE
        and isinstance(frame[3], bytes)
    ):
        raise CheckpointCorrupt("bytes are not an actorflow checkpoint record (bad frame)")
    _, version, digest, body = frame
    if _frame_digest(version, body) != digest:
        raise CheckpointCorrupt("checkpoint record failed its integrity check (sha256 mismatch)")
    if version not in _READABLE:
        raise UnsupportedFormat(
            f"checkpoint record has format version {version}; this actorflow reads "
            f"versions {', '.join(map(str, sorted(_READABLE)))}. Use the actorflow "
            "version that wrote it."
        )
    fields = _unpack(body, "record body")
    if not isinstance(fields, dict) or set(fields) != _FIELDS_BY_VERSION[version]:
        raise CheckpointCorrupt("checkpoint record body does not have the expected fields")
    try:
        return _from_fields(fields)
    except (TypeError, ValueError, EncodeError) as exc:
        # Only a writer that computed a valid digest over a wrong body gets here.
        raise CheckpointCorrupt(f"checkpoint record has a malformed field: {exc}") from exc


def _from_fields(f: dict[str, Any]) -> Checkpoint:
    # Checkpoint.__post_init__ checks every type; these are the checks it is
    # lenient about on construction but that an encoded record never needs.
    if not isinstance(f["created_at"], float):
        raise TypeError("created_at must be a float")
    if not isinstance(f["executors"], dict) or not all(
        isinstance(v, bytes) and len(v) % _DIGEST_SIZE == 0 for v in f["executors"].values()
    ):
        raise TypeError("executors must map executor ids to concatenated 32-byte digests")
    executors = {
        k: tuple(v[i : i + _DIGEST_SIZE].hex() for i in range(0, len(v), _DIGEST_SIZE))
        for k, v in f["executors"].items()
    }
    if not isinstance(f["metadata"], dict) or not isinstance(f["runtime"], bytes):
        raise TypeError("metadata must be a map and runtime must be bytes")
    if not isinstance(f["kind"], str):
        raise TypeError("kind must be a str")
    history = f.get("history", [])
    if not isinstance(history, list):
        raise TypeError("history must be a list")
    return Checkpoint(
        id=f["id"],
        parent_id=f["parent_id"],
        session=f["session"],
        workflow=f["workflow"],
        graph_signature=f["graph_signature"],
        superstep=f["superstep"],
        kind=CheckpointKind(f["kind"]),
        created_at=f["created_at"],
        executors=executors,
        runtime=f["runtime"],
        metadata=f["metadata"],
        history=entries_of(f["id"], history) if isinstance(f["id"], str) else (),
    )
