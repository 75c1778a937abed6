"""The byte protocol between the supervisor and an executor's runner.

Both ends live in :mod:`actorflow.runtime`; the host in between only forwards
bytes. Frames are plain msgpack (no ext types): payloads inside them are already
encoded values the supervisor routes without decoding.

``step`` request (:class:`StepRequest`): ``[superstep, deliveries, want_snapshot,
suffix, trace, effects]`` where a delivery is ``[source, group, payload]``: ``group`` is
:data:`SINGLE` (payload: one value), a fan-in group index >= 0 (payload: list of
values, in source order), or :data:`RESPONSE` (payload: ``[request_id, request
value, answer value]``); ``suffix`` tags default request ids (see ``_lineage``),
``trace`` is the trace part of a traced run (see ``telemetry``) or None, and
``effects`` is ``[scope, fencing token, SQL dialect, recorded, remembered]`` for the
effect journal (see ``_effects``): ``recorded``, a replay's ``[[name, n, result], ...]``,
is None in a live run; ``remembered``, likewise, the results a failed superstep's halt
cut recorded, handed to its next attempt after a resume (else None).

``step`` report (:class:`StepReport`): ``[sends, outputs, requests, snapshot,
send_contexts, dropped, effects, statements]``; a send is ``[target, group, payload]``, a request ``[request_id,
payload, response_type]``, a drop (None when there is none) ``[type name, [targets
passed over]]``, and the snapshot (only when asked for) is a list of
``[digest, chunk or None]``, the chunk omitted when the runner already reported
that digest (or was given it by a ``restore`` or its blueprint: the supervisor
holds those). ``send_contexts`` (traced runs only, else None) holds the span
context of each send, in send order. ``effects`` holds ``[name, n, result]`` per
effect the step made or found remembered, ``statements`` ``[sql, params]`` per
``ctx.sql`` call (each None when there is none).

Both frames are named tuples, checked once when they are decoded; a frame of
another shape (a host of another version) is refused there, never read by position.

``restore`` request: ``[digests, chunk, chunk, ...]``, ``digests`` being the
chunks' hex digests concatenated, as bytes (so the frame stays a list of bytes,
packed in one copy).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Self

import msgpack

from actorflow._msgpack import bin_header, packer
from actorflow.errors import BackendError

__all__ = [
    "RESPONSE",
    "SINGLE",
    "StepReport",
    "StepRequest",
    "pack",
    "restore_digests",
    "split_digests",
    "unpack",
]

SINGLE = -1
RESPONSE = -2


def pack(frame: Any) -> bytes:
    """Encode a protocol frame (plain msgpack types only)."""
    # A restore frame is a list of bytes; every other frame starts with something else,
    # so looking at the first item first keeps the check off the hot path.
    if (
        type(frame) is list
        and frame
        and type(frame[0]) is bytes
        and all(type(item) is bytes for item in frame)
    ):
        return _pack_chunks(frame)
    data: bytes = packer().pack(frame)
    return data


def _pack_chunks(chunks: list[bytes]) -> bytes:
    """A list of bytes (a snapshot's chunks: up to megabytes), as msgpack, in one copy.

    The same bytes as the Packer's, which would copy the chunks into a buffer it grows
    by doubling and then copy that buffer out: on a new thread every page of both is a
    fresh page fault (~0.4 ms per MB on the test VM). A restore on a fresh supervisor
    thread paid ~0.9 ms for the 1 MB snapshot of W4; one join pays about half that.
    """
    parts: list[bytes] = [packer().pack_array_header(len(chunks))]
    for chunk in chunks:
        parts += (bin_header(len(chunk)), chunk)
    return b"".join(parts)


_HEX_DIGEST = 64


def restore_digests(digests: list[str]) -> bytes:
    """The ``digests`` field of a ``restore`` request (see the module docstring)."""
    return "".join(digests).encode("ascii")


def split_digests(field: bytes) -> list[str]:
    """The inverse of :func:`restore_digests`."""
    text = field.decode("ascii")
    return [text[i : i + _HEX_DIGEST] for i in range(0, len(text), _HEX_DIGEST)]


def pack_map_header(size: int) -> bytes:
    """The msgpack header of a map of ``size`` entries (the entries follow, packed)."""
    header: bytes = packer().pack_map_header(size)
    return header


def unpack(data: bytes) -> Any:
    """Decode a protocol frame; lists stay lists, bytes stay bytes."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


Delivery = list[Any]
"""``[source, group, payload]`` (see the module docstring)."""
Send = list[Any]
"""``[target, group, payload]``."""
Request = list[Any]
"""``[request_id, payload, response_type]``."""
Drop = list[Any]
"""``[type name, [targets passed over]]``: a send that every condition declined."""
Snapshot = list[list[Any]]
"""``[[digest, chunk or None], ...]``."""


_SUPERSTEP_HEAD = 14
"""Bytes that hold a request's array header (at most 5) and its superstep (at most 9)."""


class StepRequest(NamedTuple):
    """What the supervisor asks of one executor in one superstep."""

    superstep: int
    deliveries: list[Delivery]
    want_snapshot: bool
    suffix: str
    """Appended to default request ids: the lineage's tag, or ``""``."""
    trace: list[Any] | None
    """The trace part of a traced run (see ``telemetry``); None when untraced."""
    effects: list[Any] | None = None
    """``[scope, fencing token, SQL dialect, recorded, remembered]`` for the effect journal."""

    def packed(self) -> bytes:
        """The request as bytes."""
        data: bytes = packer().pack(self)
        return data

    @staticmethod
    def superstep_of(data: bytes) -> int:
        """The superstep of a packed request, read off its first bytes only (a request
        may carry megabytes of deliveries)."""
        head = msgpack.Unpacker()
        head.feed(data[:_SUPERSTEP_HEAD])
        head.read_array_header()
        superstep: int = head.unpack()
        return superstep

    @classmethod
    def unpacked(cls, data: bytes) -> Self:
        """Decode a request, checking its shape once.

        Raises:
            BackendError: the frame has another shape (another version sent it).
        """
        return cls._make(_checked(unpack(data), cls._fields, "step request"))


class StepReport(NamedTuple):
    """What one executor reports of its part of a superstep."""

    sends: list[Send]
    outputs: list[bytes]
    requests: list[Request]
    snapshot: Snapshot | None
    """Only when asked for (see the module docstring)."""
    send_contexts: list[bytes] | None
    """Traced runs only: each send's span context, in send order."""
    dropped: list[Drop] | None = None
    """The sends no target received (every condition declined them); None if none."""
    effects: list[list[Any]] | None = None
    """``[name, n, result]`` of each effect of the step; None if none."""
    statements: list[list[Any]] | None = None
    """``[sql, params]`` of each ``ctx.sql`` call of the step; None if none."""

    def packed(self) -> bytes:
        """The report as bytes."""
        data: bytes = packer().pack(self)
        return data

    @classmethod
    def unpacked(cls, data: bytes) -> Self:
        """Decode a report, checking its shape once.

        Raises:
            BackendError: the frame has another shape (another version sent it).
        """
        return cls._make(_checked(unpack(data), cls._fields, "step report"))


def _checked(frame: Any, fields: tuple[str, ...], what: str) -> list[Any]:
    if type(frame) is list and len(frame) == len(fields):
        return frame
    shape = f"{len(frame)} fields" if type(frame) is list else f"a {type(frame).__name__}"
    raise BackendError(
        f"a {what} arrived as {shape}, where this version sends {len(fields)} "
        f"({', '.join(fields)}): the supervisor and the executor hosts run different "
        "versions of actorflow; install the same version on every host"
    )
