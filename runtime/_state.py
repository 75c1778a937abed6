"""The supervisor's part of a consistent cut: what is in flight between supersteps.

Everything here is plain data holding encoded payloads (bytes), so it can be
written into a checkpoint's ``runtime`` field and read back in another process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._wire import pack, unpack

__all__ = ["Delivery", "PendingEntry", "RunState"]

Delivery = list[Any]
"""``[source, group, payload]`` as in :mod:`._wire`."""

PendingEntry = list[Any]
"""``[executor, request payload, response type label]``."""


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

    def to_bytes(self, extra: dict[str, Any]) -> bytes:
        """Encode for a checkpoint's ``runtime`` field (``extra`` rides along)."""
        return pack(
            {
                "superstep": self.superstep,
                "inbox": self.inbox,
                "fan_in": {str(g): srcs for g, srcs in self.fan_in.items()},
                "pending": self.pending,
                "answered": sorted(self.answered),
                **extra,
            }
        )

    @classmethod
    def from_bytes(
        cls, data: bytes, snapshots: dict[str, list[str]]
    ) -> tuple[RunState, dict[str, Any]]:
        """Decode what :meth:`to_bytes` wrote; returns the state and the extra fields."""
        body = unpack(data)
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
