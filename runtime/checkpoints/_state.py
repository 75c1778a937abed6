"""The supervisor's part of a consistent cut: what is in flight between supersteps.

Everything here is plain data holding encoded payloads (bytes), so it can be
written into a checkpoint's ``runtime`` field and read back in another process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from actorflow.errors import CheckpointCorrupt, CheckpointSealed
from actorflow.runtime._wire import pack, pack_map_header
from actorflow.storage import is_sealed

__all__ = [
    "Delivery",
    "PackedEntries",
    "PendingEntry",
    "RunState",
    "decode_runtime",
    "effects_ok",
    "statements_ok",
]

Delivery = list[Any]
"""``[source, group, payload]`` as in :mod:`._wire`."""

PendingEntry = list[Any]
"""``[executor, request payload, response type label]``."""


_OWN_FIELDS = 6
"""Entries of the runtime map that :meth:`RunState.to_bytes` packs itself."""
_SUPERSTEP_KEY = pack("superstep")
_INBOX_KEY = pack("inbox")
_SEQ_KEY = pack("seq")
_EFFECTS_KEY = pack("effects")
_EMPTY_ENTRIES = (
    pack("fan_in") + pack({}) + pack("pending") + pack({}) + pack("answered") + pack([])
)
"""The last three of those entries when all three are empty."""


class PackedEntries:
    """Map entries for :meth:`RunState.to_bytes`, packed once for a lineage."""

    __slots__ = ("entries", "header", "header_with_effects")

    def __init__(self, fields: Mapping[str, bytes]) -> None:
        """``fields`` maps each key to its value, already msgpack-encoded."""
        size = _OWN_FIELDS + len(fields)
        assert size + 1 < 16  # a fixmap, even with the effects entry: the header is one byte
        self.header = pack_map_header(size)
        self.header_with_effects = pack_map_header(size + 1)
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

    def to_bytes(
        self, extra: PackedEntries, seq: int = 0, effects: list[list[Any]] | None = None
    ) -> bytes:
        """Encode for a checkpoint's ``runtime`` field.

        ``extra`` holds more map entries, already msgpack-encoded (the graph
        description, which is the same in every checkpoint: packing it once matters
        for a graph of a thousand executors). ``seq`` is the number the session's next
        history entry gets (a resume continues from it). ``effects``: the journaled
        effects this cut commits, ``[executor, superstep, name, n, result]`` each (see
        ``runtime._effects``); the entry is left out when there are none.
        """
        if effects:
            return self._with_effects(extra, seq, effects)
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
                    _SEQ_KEY,
                    pack(seq),
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
                "seq": seq,
            }
        )
        # Splice the extra entries into the packed map: with fewer than 16 entries the
        # header is one byte (a msgpack fixmap), so only it changes.
        assert packed[0] == 0x80 | _OWN_FIELDS
        if len(packed) < 4096:  # a slice and two concatenations beat a join with a view
            return extra.header + packed[1:] + extra.entries
        return b"".join((extra.header, memoryview(packed)[1:], extra.entries))

    def _with_effects(self, extra: PackedEntries, seq: int, effects: list[list[Any]]) -> bytes:
        """:meth:`to_bytes` of a cut that commits effects: one more entry, at the end."""
        plain = self.to_bytes(extra, seq)
        return extra.header_with_effects + plain[1:] + _EFFECTS_KEY + pack(effects)

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


MAX_SUPERSTEP = (1 << 62) - 1
"""The largest superstep a runtime record may hold: a run can go on from it (the
counter and the ids derived from it stay within msgpack's 64-bit ints)."""
_MAX_GROUP = (1 << 31) - 1
_OWN_KEYS = frozenset({"superstep", "inbox", "fan_in", "pending", "answered"})
_EXTRA_KEYS = frozenset(
    {"graph", "lineage", "lineages", "left", "origin", "versions", "seq", "effects"}
)
_SINGLE, _RESPONSE = -1, -2  # as in ._wire (SINGLE, RESPONSE)


def decode_runtime(data: bytes) -> dict[str, Any]:
    """Decode and shape-check a checkpoint's ``runtime`` bytes; never runs code.

    Accepts exactly what :meth:`RunState.to_bytes` writes: the entries of the
    run state plus the graph description, the lineage tags and the state versions, every key a str, every count within
    the bounds a run can continue from, every payload bytes in the shape its
    delivery group implies, fan-in group keys as canonical decimal numbers.

    Raises:
        CheckpointCorrupt: anything else (plain msgpack only: an ext type, a
            pickle or a wrong shape is refused).
    """
    if is_sealed(data):
        raise CheckpointSealed(
            "the checkpoint was sealed by an EncryptedStore and is read without its keys: "
            "nothing is damaged; open the store as EncryptedStore(<this store>, keys=...) "
            "with the keys it was written with"
        )
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_refuse_ext)
    except Exception as exc:
        raise CheckpointCorrupt(
            f"the checkpoint's runtime record is malformed ({type(exc).__name__}: {exc}); "
            "restore an older checkpoint or run `actorflow checkpoints verify`"
        ) from exc
    _check(type(body) is dict and all(type(k) is str for k in body), "not a map")
    keys = set(body)
    _check(_OWN_KEYS <= keys <= _OWN_KEYS | _EXTRA_KEYS, "its entries")
    superstep = body["superstep"]
    _check(type(superstep) is int and 0 <= superstep <= MAX_SUPERSTEP, "superstep")
    for target, deliveries in _items(body, "inbox"):
        _check(type(deliveries) is list, f"inbox of {target}")
        for delivery in deliveries:
            _check(type(delivery) is list and len(delivery) == 3, f"delivery to {target}")
            source, group, payload = delivery
            _check(type(source) is str and _delivery_ok(group, payload), f"delivery to {target}")
    for group, sources in _items(body, "fan_in"):
        _check(group.isdigit() and group.isascii() and str(int(group)) == group, "fan_in")
        _check(int(group) <= _MAX_GROUP and type(sources) is dict, f"fan-in group {group}")
        for source, payloads in sources.items():
            _check(type(source) is str and type(payloads) is list, f"fan-in {group}/{source}")
            _check(all(type(p) is bytes for p in payloads), f"fan-in {group}/{source}")
    for request_id, entry in _items(body, "pending"):
        _check(type(entry) is list and len(entry) == 3, f"request {request_id}")
        _check(
            type(entry[0]) is str and type(entry[1]) is bytes and type(entry[2]) is str,
            f"request {request_id}",
        )
    answered = body["answered"]
    _check(type(answered) is list and all(type(a) is str for a in answered), "answered")
    if "graph" in body:
        _check(_graph_ok(body["graph"], 0), "graph")
    if "lineage" in body:  # written by ._lineage.Lineage.entries, with "lineages"
        _check(type(body["lineage"]) is str, "lineage")
    if "origin" in body:  # the random id of this use of the session id (see ._lineage)
        _check(type(body["origin"]) is str, "origin")
    if "lineages" in body:
        tags = body["lineages"]
        _check(type(tags) is list and all(type(t) is str for t in tags), "lineages")
    if "left" in body:  # ancestor tag -> the superstep a time-travel branch left it at
        left = body["left"]
        _check(
            type(left) is dict
            and all(
                type(t) is str and type(v) is int and 0 <= v <= MAX_SUPERSTEP
                for t, v in left.items()
            ),
            "left",
        )
    if "seq" in body:  # the session's next history number (older records have none)
        seq = body["seq"]
        _check(type(seq) is int and 0 <= seq < 2**63, "seq")
    if "effects" in body:  # the journaled effects the cut commits
        _check(effects_ok(body["effects"], with_place=True), "effects")
    if "versions" in body:  # written by ._migration.version_entries
        versions = body["versions"]
        _check(
            type(versions) is dict
            and all(
                type(e) is str and type(v) is int and 0 < v <= MAX_SUPERSTEP
                for e, v in versions.items()
            ),
            "versions",
        )
    result: dict[str, Any] = body
    return result


def effects_ok(effects: object, *, with_place: bool) -> bool:
    """Whether ``effects`` is a list of ``[name, n, result]`` (``with_place``:
    ``[executor, superstep, name, n, result]``), as the supervisor writes them."""
    head = 2 if with_place else 0
    return type(effects) is list and all(
        type(e) is list
        and len(e) == head + 3
        and (not with_place or (type(e[0]) is str and type(e[1]) is int and e[1] >= 0))
        and type(e[head]) is str
        and type(e[head + 1]) is int
        and e[head + 1] >= 0
        and type(e[head + 2]) is bytes
        for e in effects
    )


def statements_ok(statements: object) -> bool:
    """Whether ``statements`` is a list of ``[sql, params]`` as ``ctx.sql`` queues them."""
    return type(statements) is list and all(
        type(s) is list
        and len(s) == 2
        and type(s[0]) is str
        and type(s[1]) is list
        and all(p is None or type(p) in (bool, int, float, str, bytes) for p in s[1])
        for s in statements
    )


def _delivery_ok(group: object, payload: object) -> bool:
    if type(group) is not int:
        return False
    if group == _SINGLE:
        return type(payload) is bytes
    if group == _RESPONSE:
        return (
            type(payload) is list
            and len(payload) == 3
            and type(payload[0]) is str
            and type(payload[1]) is bytes
            and type(payload[2]) is bytes
        )
    return (
        0 <= group <= _MAX_GROUP
        and type(payload) is list
        and all(type(p) is bytes for p in payload)
    )


def _graph_ok(graph: object, depth: int) -> bool:
    """The shape of :func:`._graph.describe` (sub-workflows nest under ``nested``)."""
    if type(graph) is not dict or depth > 64:
        return False
    executors = graph.get("executors", {})
    if not (
        type(graph.get("start", "")) is str
        and type(executors) is dict
        and type(graph.get("edges", [])) is list
        and type(graph.get("fan_in", [])) is list
    ):
        return False
    for entry in executors.values():
        if not (
            type(entry) is dict
            and type(entry.get("type")) is str
            and type(entry.get("handlers")) is list
            and all(type(h) is str for h in entry["handlers"])
            and ("nested" not in entry or _graph_ok(entry["nested"], depth + 1))
        ):
            return False
    return all(
        type(edge) is list and all(type(part) in (str, list, bool) for part in edge)
        for edge in graph.get("edges", [])
    )


def _items(body: dict[str, Any], key: str) -> list[tuple[str, Any]]:
    section = body.get(key)
    _check(type(section) is dict and all(type(k) is str for k in section), key)
    assert isinstance(section, dict)
    return list(section.items())


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckpointCorrupt(
            f"the checkpoint's runtime record is malformed at {what!r}; restore an older "
            "checkpoint or run `actorflow checkpoints verify`"
        )
