"""DigestMap: where the inner store keeps each blob, as an EncryptedStore learned it.

A caller names a blob by the sha256 of its plaintext; the inner store by the sha256
of its sealed bytes, which only the keys can compute, and only from the plaintext.
The record that references a blob holds both (the plaintext digests sealed inside
it), so an EncryptedStore learns the pair from every record it saves or reads and
keeps the most recent ones here. Bounded: two generations of ``limit`` entries
each; the older is dropped when the newer fills.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DigestMap"]


class DigestMap:
    """Plaintext digest -> inner digest, bounded. Safe to share between threads (each
    operation is one dict operation; a lost update only costs a later lookup)."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self._limit = limit
        self._young: dict[str, str] = {}
        self._old: dict[str, str] = {}

    def get(self, digest: str) -> str | None:
        """The inner digest last learned for ``digest``, or None."""
        found = self._young.get(digest)
        if found is None:
            found = self._old.get(digest)
            if found is not None:
                self._put(digest, found)
        return found

    def learn(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Remember ``(plaintext digest, inner digest)`` pairs."""
        for digest, inner in pairs:
            self._put(digest, inner)

    def pairs(self) -> list[tuple[str, str]]:
        """Every pair held, newer last."""
        return [*self._old.items(), *self._young.items()]

    def _put(self, digest: str, inner: str) -> None:
        young = self._young
        young[digest] = inner
        if len(young) >= self._limit:
            self._old, self._young = young, {}
