"""The programs the driver ships to Ray workers: pickled once, remembered per placement.

A program (a :data:`~actorflow.actors.HostedFactory`) is pickled with Ray's
cloudpickle the first time a host loads it, together with the by-value message
types it may need (:class:`~._worker.Shipped`), and the bytes are kept by the
factory's identity: every later load sends the same bytes, or only their digest to
a worker that holds them. Per placement, the programs last checked are what a
spare worker of that placement unpickles ahead of its first call.

Shared by the backend (checks, spares) and every :class:`~._host.RayHost` it
starts (loads). Thread-safe.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any

from actorflow.actors._host import HostedFactory
from actorflow.actors.codec import registered

from ._runtime import class_of, label, ray_module
from ._worker import PRELOADED, Shipped

__all__ = ["Programs"]

_PICKLED = 512
"""Factories whose pickles are kept, least recent out."""


class Programs:
    """The pickled programs of one backend, and which were checked on which placement."""

    __slots__ = ("_blobs", "_checked", "_init", "_lock", "_recent")

    def __init__(self, init: Mapping[str, Any]) -> None:
        self._init = init
        self._lock = threading.Lock()
        self._blobs: OrderedDict[int, tuple[object, str, bytes]] = OrderedDict()
        self._recent: dict[Hashable, OrderedDict[str, tuple[bytes, str]]] = {}
        self._checked: set[tuple[type, Hashable]] = set()

    def pickled(self, factory: HostedFactory) -> tuple[str, bytes]:
        """(digest, bytes) of ``factory`` with the by-value message types it may need."""
        ident = id(factory)
        with self._lock:
            cached = self._blobs.get(ident)
            if cached is not None and cached[0] is factory:
                self._blobs.move_to_end(ident)
                return cached[1], cached[2]
        ray = ray_module(self._init)
        blob = ray.cloudpickle.dumps(Shipped(factory, _by_value_messages(ray)))
        digest = hashlib.sha256(blob).hexdigest()
        with self._lock:
            # The factory is held, so its id is never reused while the entry lives.
            self._blobs[ident] = (factory, digest, blob)
            if len(self._blobs) > _PICKLED:
                self._blobs.popitem(last=False)
        return digest, blob

    def to_check(self, placement: Hashable, factory: HostedFactory) -> bytes | None:
        """Note ``factory`` as the latest program of ``placement`` (what its spares
        unpickle ahead); its pickle if its class was not yet checked there, else None."""
        digest, blob = self.pickled(factory)
        with self._lock:
            recent = self._recent.setdefault(placement, OrderedDict())
            recent[digest] = (blob, label(factory))
            recent.move_to_end(digest)
            if len(recent) > PRELOADED:
                recent.popitem(last=False)
            if (class_of(factory), placement) in self._checked:
                return None
        return blob

    def checked(self, placement: Hashable, factory: HostedFactory) -> None:
        """A worker of ``placement`` unpickled ``factory``: its class needs no check there again."""
        with self._lock:
            self._checked.add((class_of(factory), placement))

    def recent(self, placement: Hashable) -> list[tuple[str, bytes, str]]:
        """(digest, pickle, label) of the programs last checked for ``placement``, oldest first."""
        with self._lock:
            return [(d, blob, name) for d, (blob, name) in self._recent.get(placement, {}).items()]


def _by_value_messages(ray: Any) -> list[tuple[str, type]]:
    by_value = set(ray.cloudpickle.list_registry_pickle_by_value())
    return [
        (name, cls)
        for name, cls in registered()
        if cls.__module__ == "__main__" or cls.__module__ in by_value
    ]
