"""The last good state of each executor, as the supervisor knows it.

Kept only when someone asked for it (a store or a restart policy): the digests
of each executor's snapshot at its last barrier, and the chunk bytes behind them
that the store may not hold yet. Restarts and rollbacks restore from here; a
checkpoint writes from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from actorflow.errors import RunFailed
from actorflow.runtime._wire import Snapshot

__all__ = ["Chunks", "LastGood"]

Chunks = list[tuple[str, bytes | None]]
"""A snapshot as (digest, bytes or None when the bytes are held elsewhere)."""


class LastGood:
    """Per-executor snapshot digests plus the chunk bytes still needed. Supervisor thread only."""

    __slots__ = ("_fallback", "_fallback_many", "chunks", "digests", "dirty")

    def __init__(
        self,
        fallback: Callable[[str], bytes] | None,
        fallback_many: Callable[[list[str]], dict[str, bytes]] | None = None,
    ) -> None:
        self._fallback = fallback
        self._fallback_many = fallback_many
        self.chunks: dict[str, bytes] = {}
        """Digest -> bytes of chunks some remembered snapshot uses."""
        self.digests: dict[str, list[str]] = {}
        """Executor -> digests of its last good snapshot."""
        self.dirty: set[str] = set()
        """Executors whose state changed since their snapshot was taken."""

    def remember(
        self, executor: str, chunks: Sequence[tuple[str, bytes | None]] | Snapshot
    ) -> None:
        """Record ``executor``'s snapshot (held here, or as a step report carries it) as
        its last good state; forget unused bytes."""
        digests = []
        for digest, chunk in chunks:
            digests.append(digest)
            if chunk is not None:
                self.chunks[digest] = chunk
        old = self.digests.get(executor)
        self.digests[executor] = digests
        self.dirty.discard(executor)
        if not old or old == digests:
            return  # every digest it had is still in use: nothing to forget
        live = {d for ds in self.digests.values() for d in ds}
        for digest in old:
            if digest not in live:
                self.chunks.pop(digest, None)

    def forget_all(self) -> None:
        """Drop every snapshot (the hosts start over for an unrelated run)."""
        self.chunks.clear()
        self.digests.clear()
        self.dirty.clear()

    def knows(self, executor: str) -> bool:
        """Whether a last good state exists for ``executor``."""
        return executor in self.digests

    def exact(self, executors: list[str]) -> bool:
        """Whether each of ``executors`` has a snapshot taken at the last barrier."""
        return all(e in self.digests and e not in self.dirty for e in executors)

    def snapshot_of(self, executor: str) -> Chunks:
        """``executor``'s last good snapshot, with the bytes held here."""
        return [(d, self.chunks.get(d)) for d in self.digests[executor]]

    def prefetch(self, digests: list[str]) -> None:
        """Read the chunks not held here in one batch, when the store can (a resume)."""
        absent = sorted({d for d in digests if d not in self.chunks})
        if absent and self._fallback_many is not None:
            self.chunks.update(self._fallback_many(absent))

    def resolve(self, chunks: Chunks) -> list[bytes]:
        """The bytes of every chunk: given, held here, or read through the fallback (the store).

        Raises:
            RunFailed: a chunk is nowhere to be found.
        """
        return [c if c is not None else self._bytes(d) for d, c in chunks]

    def _bytes(self, digest: str) -> bytes:
        chunk = self.chunks.get(digest)
        if chunk is None and self._fallback is not None:
            chunk = self._fallback(digest)
        if chunk is None:
            raise RunFailed(f"snapshot chunk {digest} is not available; resume from a checkpoint")
        return chunk
