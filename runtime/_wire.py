"""The byte protocol between the supervisor and an executor's runner.

Both ends live in :mod:`actorflow.runtime`; the host in between only forwards
bytes. Frames are plain msgpack (no ext types): payloads inside them are already
encoded values the supervisor routes without decoding.

``step`` request: ``[superstep, deliveries, want_snapshot]`` where a delivery is
``[source, group, payload]``: ``group`` is :data:`SINGLE` (payload: one value),
a fan-in group index >= 0 (payload: list of values, in source order), or
:data:`RESPONSE` (payload: ``[request_id, request value, answer value]``).

``step`` report: ``[sends, outputs, requests, snapshot]``; a send is
``[target, group, payload]``, a request ``[request_id, payload, response_type]``,
and the snapshot (only when asked for) is a list of ``[digest, chunk or None]``,
the chunk omitted when the runner already reported that digest.
"""

from __future__ import annotations

import threading
from typing import Any

import msgpack

__all__ = [
    "RESPONSE",
    "SINGLE",
    "pack",
    "unpack",
]

SINGLE = -1
RESPONSE = -2


class _Packers(threading.local):
    def __init__(self) -> None:
        self.packer = msgpack.Packer(use_bin_type=True, autoreset=True)


_PACKERS = _Packers()  # a Packer is not thread-safe; building one per frame costs ~1 us


def pack(frame: Any) -> bytes:
    """Encode a protocol frame (plain msgpack types only)."""
    data: bytes = _PACKERS.packer.pack(frame)
    return data


def pack_map_header(size: int) -> bytes:
    """The msgpack header of a map of ``size`` entries (the entries follow, packed)."""
    header: bytes = _PACKERS.packer.pack_map_header(size)
    return header


def unpack(data: bytes) -> Any:
    """Decode a protocol frame; lists stay lists, bytes stay bytes."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
