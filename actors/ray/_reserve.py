"""The idle Ray workers a backend keeps for reuse, by placement.

A worker process costs ~0.5-1 s to start, so a worker its session let go is parked
here for the next spawn with the same placement (up to the reserve's size), as
are the spares started ahead (not counted against it): a released worker is
taken before a spare, which may still be starting. Each parked worker comes
with the digests of the programs it holds, so its new host sends only digests for
those. Shared by the backend (takes, spares) and every :class:`~._host.RayHost`
it starts (parks). Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

__all__ = ["Reserve"]


class Reserve:
    """Parked workers: ``(handle, known)`` pairs by placement, oldest first.

    ``known``: the digests of the programs the worker holds, in its cache's order,
    or the Ray reference to them (a spare's preload, not yet waited for).
    """

    __slots__ = ("_lock", "_parked", "_size")

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._parked: dict[Hashable, list[tuple[Any, Any]]] = {}

    def take(self, placement: Hashable) -> tuple[tuple[Any, Any] | None, int]:
        """A parked worker of ``placement`` or None, and how many are left parked there.

        A worker a session gave back (``known``: a tuple) is running for sure, so the
        oldest of those goes first; else the oldest spare (``known``: the reference to
        its preload), which may still be starting.
        """
        with self._lock:
            parked = self._parked.get(placement)
            if not parked:
                return None, 0
            index = next((i for i, (_h, known) in enumerate(parked) if type(known) is tuple), 0)
            return parked.pop(index), len(parked)

    def peek(self, placement: Hashable) -> Any | None:
        """The handle of the oldest parked worker of ``placement``, left parked; or None."""
        with self._lock:
            parked = self._parked.get(placement)
            return parked[0][0] if parked else None

    def park(
        self, handle: Any, placement: Hashable, *, spare: bool = False, known: Any = ()
    ) -> bool:
        """Keep an idle worker for the next spawn with ``placement``; False if full
        (a spare always fits)."""
        with self._lock:
            if not spare and sum(len(v) for v in self._parked.values()) >= self._size:
                return False
            self._parked.setdefault(placement, []).append((handle, known))
            return True

    def drain(self) -> list[Any]:
        """Empty the reserve; the handles it held."""
        with self._lock:
            parked = [h for handles in self._parked.values() for h, _known in handles]
            self._parked = {}
        return parked
