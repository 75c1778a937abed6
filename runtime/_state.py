"""The supervisor's part of a consistent cut: what is in flight between supersteps.

Everything here is plain data holding encoded payloads (bytes), so it can be
written into a checkpoint's ``runtime`` field and read back in another process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from actorflow.errors import CheckpointCorrupt

from ._wire import pack, pack_map_header

__all__ = ["Delivery", "PackedEntries", "PendingEntry", "RunState", "decode_runtime"]

Delivery = list[Any]
"""``[source, group, payload]`` as in :mod:`._wire`."""

PendingEntry = list[Any]
"""``[executor, request payload, response type label]``."""


_OWN_FIELDS = 5
"""Entries of the runtime map that :meth:`RunState.to_bytes` packs itself."""
_SUPERSTEP_KEY = pack("superstep")
_INBOX_KEY = pack("inbox")
_EMPTY_ENTRIES = (
    pack("fan_in") + pack({}) + pack("pending") + pack({}) + pack("answered") + pack([])
)
"""The last three of those entries when all three are empty."""


class PackedEntries:
    """Map entries for :meth:`RunState.to_bytes`, packed once for a lineage."""

    __slots__ = ("entries", "header")

    def __init__(self, fields: Mapping[str, bytes]) -> None:
        """``fields`` maps each key to its value, already msgpack-encoded."""
        size = _OWN_FIELDS + len(fields)
        assert size < 16  # a fixmap: the header is one byte
        self.header = pack_map_header(size)
        self.entries = b"".join(pack(key) + raw for key, raw in fields.items())


@dataclass(slots=True)
class RunState:
    """In-flight messages, fan-in buffers, pending requests and counters.

    Owned by one session's driver; mutated only on the supervisor's thread.
    """

    superstep: int = 0
    """Supersteps completed in this lineage so far."""
    inbox: dict[str, list[Delivery]] = field(default_factory=dict)
    """Deliveries for the next superstep, per target, in delivery order."""
    fan_in: dict[int, dict[str, list[bytes]]] = field(default_factory=dict)
    """Fan-in group -> source -> payloads waiting for the other sources."""
    pending: dict[str, PendingEntry] = field(default_factory=dict)
    """Open requests by id."""
    answered: set[str] = field(default_factory=set)
    """Request ids already answered (a second answer is refused)."""
    snapshots: dict[str, list[str]] = field(default_factory=dict)
    """Executor id -> digests of its last checkpointed (or last good) snapshot."""

    def to_bytes(self, extra: PackedEntries) -> bytes:
        """Encode for a checkpoint's ``runtime`` field.

        ``extra`` holds more map entries, already msgpack-encoded (the graph
        description, which is the same in every checkpoint: packing it once matters
        for a graph of a thousand executors).
        """
        fan_in = self.fan_in
        if not (fan_in or self.pending or self.answered):
            # The common cut (no fan-in waiting, no request open): the same bytes as
            # below, with the three empty entries packed once (~0.5 us less per cut).
            return b"".join(
                (
                    extra.header,
                    _SUPERSTEP_KEY,
                    pack(self.superstep),
                    _INBOX_KEY,
                    pack(self.inbox),
                    _EMPTY_ENTRIES,
                    extra.entries,
                )
            )
        packed = pack(
            {
                "superstep": self.superstep,
                "inbox": self.inbox,
                "fan_in": {str(g): srcs for g, srcs in fan_in.items()} if fan_in else {},
                "pending": self.pending,
                "answered": sorted(self.answered) if self.answered else [],
            }
        )
        # Splice the extra entries into the packed map: with fewer than 16 entries the
        # header is one byte (a msgpack fixmap), so only it changes.
        assert packed[0] == 0x80 | _OWN_FIELDS
        if len(packed) < 4096:  # a slice and two concatenations beat a join with a view
            return extra.header + packed[1:] + extra.entries
        return b"".join((extra.header, memoryview(packed)[1:], extra.entries))

    @classmethod
    def from_bytes(
        cls, data: bytes, snapshots: dict[str, list[str]]
    ) -> tuple[RunState, dict[str, Any]]:
        """Decode what :meth:`to_bytes` wrote; returns the state and the extra fields.

        Raises:
            CheckpointCorrupt: the bytes are not a well-formed runtime record (plain
                msgpack only: an ext type, a pickle or a wrong shape is refused).
        """
        body = decode_runtime(data)
        state = cls(
            superstep=body.pop("superstep"),
            inbox=body.pop("inbox"),
            fan_in={int(g): srcs for g, srcs in body.pop("fan_in").items()},
            pending=body.pop("pending"),
            answered=set(body.pop("answered")),
            snapshots=snapshots,
        )
        return state, body

    def clear(self) -> None:
        """Drop everything in flight (used by ``reset``)."""
        self.inbox.clear()
        self.fan_in.clear()
        self.pending.clear()
        self.answered.clear()
        self.snapshots.clear()


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"ext type {code} is not allowed in a runtime record")


def decode_runtime(data: bytes) -> dict[str, Any]:
    """Decode and shape-check a checkpoint's ``runtime`` bytes; never runs code.

    Raises:
        CheckpointCorrupt: anything but the plain structure :meth:`RunState.to_bytes` writes.
    """
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_refuse_ext)
        _check(isinstance(body, dict), "not a map")
        _check(isinstance(body.get("superstep"), int), "superstep")
        for target, deliveries in _items(body, "inbox"):
            _check(isinstance(deliveries, list), f"inbox of {target}")
            for delivery in deliveries:
                _check(isinstance(delivery, list) and len(delivery) == 3, f"delivery to {target}")
                source, group, payload = delivery
                _check(isinstance(source, str) and isinstance(group, int), f"delivery to {target}")
                _check(_payload_ok(payload), f"payload to {target}")
        for group, sources in _items(body, "fan_in"):
            _check(isinstance(sources, dict), f"fan-in group {group}")
            for source, payloads in sources.items():
                _check(isinstance(payloads, list), f"fan-in {group}/{source}")
                _check(all(isinstance(p, bytes) for p in payloads), f"fan-in {group}/{source}")
        for request_id, entry in _items(body, "pending"):
            _check(isinstance(entry, list) and len(entry) == 3, f"request {request_id}")
            _check(
                isinstance(entry[0], str) and isinstance(entry[1], bytes), f"request {request_id}"
            )
            _check(isinstance(entry[2], str), f"request {request_id}")
        _check(isinstance(body.get("answered"), list), "answered")
        _check(all(isinstance(a, str) for a in body["answered"]), "answered")
    except CheckpointCorrupt:
        raise
    except Exception as exc:
        raise CheckpointCorrupt(
            f"the checkpoint's runtime record is malformed ({type(exc).__name__}: {exc}); "
            "restore an older checkpoint or run `actorflow checkpoints verify`"
        ) from exc
    result: dict[str, Any] = body
    return result


def _items(body: dict[str, Any], key: str) -> list[tuple[str, Any]]:
    section = body.get(key)
    _check(isinstance(section, dict), key)
    assert isinstance(section, dict)
    return [(str(k), v) for k, v in section.items()]


def _payload_ok(payload: Any) -> bool:
    if isinstance(payload, bytes):
        return True
    if isinstance(payload, list):
        return all(isinstance(p, bytes | str | list) for p in payload)
    return False


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckpointCorrupt(
            f"the checkpoint's runtime record is malformed at {what!r}; restore an older "
            "checkpoint or run `actorflow checkpoints verify`"
        )
