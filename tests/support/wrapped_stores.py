"""Conformance-kit factories for wrapped stores: a pass-through StoreWrapper and an
EncryptedStore over any built-in store's factory.

Module level and picklable, so the kit's multi-process tests can send them to
``spawn`` children. Each has the capabilities and damage hooks of the factory it
wraps (a hook the inner factory lacks is None, which the kit skips).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actorflow.errors import CheckpointError
from actorflow.storage import CheckpointStore, EncryptedStore, StoreWrapper

Mutation = Callable[[bytes], bytes]

KEYS = (("2024", b"k" * 32),)
"""The test key set: one 256-bit key (tests of rotation make their own)."""

_OPENED: weakref.WeakSet[EncryptedStore] = weakref.WeakSet()
"""The EncryptedStores the factories of this process made: a blob's damage hook asks
them where the inner store keeps it, since a fresh handle learns that only from
records it can read (and the kit damages records before blobs)."""


@dataclass(frozen=True)
class _Wrapped:
    inner: Any
    """The wrapped store's factory (a kit factory)."""

    @property
    def durable(self) -> bool:
        return bool(getattr(self.inner, "durable", False))

    @property
    def multiprocess(self) -> bool:
        return bool(getattr(self.inner, "multiprocess", False))

    @property
    def corrupt_record(self) -> Callable[[str, Mutation], None] | None:
        hook: Callable[[str, Mutation], None] | None = getattr(self.inner, "corrupt_record", None)
        return hook

    @property
    def corrupt_header(self) -> Callable[[Mutation], None] | None:
        hook: Callable[[Mutation], None] | None = getattr(self.inner, "corrupt_header", None)
        return hook

    @property
    def corrupt_column(self) -> Callable[[str, str, str], None] | None:
        hook: Callable[[str, str, str], None] | None = getattr(self.inner, "corrupt_column", None)
        return hook

    @property
    def set_lease_expiry(self) -> Callable[[str, float], bool] | None:
        hook: Callable[[str, float], bool] | None = getattr(self.inner, "set_lease_expiry", None)
        return hook


@dataclass(frozen=True)
class PassThroughFactory(_Wrapped):
    """A :class:`StoreWrapper` that overrides nothing, over the inner factory's store."""

    def __call__(self) -> CheckpointStore:
        return StoreWrapper(self.inner())

    @property
    def corrupt_blob(self) -> Callable[[str, Mutation], None] | None:
        hook: Callable[[str, Mutation], None] | None = getattr(self.inner, "corrupt_blob", None)
        return hook


@dataclass(frozen=True)
class EncryptedFactory(_Wrapped):
    """An :class:`EncryptedStore` over the inner factory's store."""

    keys: tuple[tuple[str, bytes], ...] = KEYS

    def __call__(self) -> EncryptedStore:
        store = EncryptedStore(self.inner(), keys=dict(self.keys))
        _OPENED.add(store)
        return store

    @property
    def corrupt_blob(self) -> Callable[[str, Mutation], None] | None:
        """Damage the sealed bytes of the blob the caller knows by ``digest``."""
        hook: Callable[[str, Mutation], None] | None = getattr(self.inner, "corrupt_blob", None)
        if hook is None:
            return None
        inner_hook = hook

        def corrupt_blob(digest: str, mutate: Mutation) -> None:
            # An in-memory store has one handle: the lookup must not close it.
            fresh = EncryptedStore(self.inner(), keys=dict(self.keys), close_inner=self.durable)
            try:
                for store in [*_OPENED, fresh]:
                    try:
                        at = store.stored_digest(digest)
                    except CheckpointError:
                        continue  # closed, or damaged past reading
                    if at is not None:
                        inner_hook(at, mutate)
                        return
            finally:
                fresh.close()
            raise AssertionError(f"no stored record references blob {digest}")

        return corrupt_blob
