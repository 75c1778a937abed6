"""StoreWrapper: a store that forwards every call to another, for wrappers that change a few.

A wrapper (metrics, fault injection in tests, encryption) is a store in its own
right: the runtime takes leases through it, fences its saves, inspects its
``acquire_lease`` signature and looks for its fast paths. Subclass
:class:`StoreWrapper` and override only the methods you change; every other
method of :class:`~._protocol.CheckpointStore` goes to the inner store unchanged.

The forwarded methods are not a hand-written list: they are the protocol's own
members (:func:`protocol_methods`), installed on the class when this module is
imported, so a method added to the protocol later is forwarded too (with the
protocol's docstring and signature, which ``help()`` and ``inspect.signature`` show).

>>> from actorflow.storage import MemoryStore, StoreWrapper
>>> class CountingStore(StoreWrapper):
...     saves = 0
...     def save(self, checkpoint, blobs, *, lease=None):
...         self.saves += 1
...         super().save(checkpoint, blobs, lease=lease)
>>> from actorflow.storage.conformance import make_checkpoint
>>> store = CountingStore(MemoryStore())
>>> record, blobs = make_checkpoint()
>>> store.save(record, blobs)
>>> (store.saves, store.load(record.id) == record)
(1, True)
>>> store.close()
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, NoReturn, Protocol, Self

from actorflow.errors import CheckpointError

from ._common import store_closed
from ._cut import Cut
from ._fast_paths import SavesCuts, takes_cuts
from ._lease import Lease
from ._lock_wait import check_lock_wait
from ._protocol import BlobBatchReader, CancelRequests, CheckpointStore

__all__ = ["StoreWrapper", "protocol_methods"]


def protocol_methods(protocol: type) -> tuple[str, ...]:
    """The public methods ``protocol`` (a ``typing.Protocol``) declares, its bases' too, sorted."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (object, Protocol, Generic):
            continue
        names.update(n for n, v in vars(klass).items() if not n.startswith("_") and callable(v))
    return tuple(sorted(names))


class StoreWrapper:
    """A :class:`~actorflow.storage.CheckpointStore` that forwards every call to ``inner``.

    Override what you change; call ``super()`` (or :attr:`inner`) for the rest.
    Every method of the protocol is forwarded, leases included, and so is any
    method added to the protocol later. What needs more than forwarding:

    - ``acquire_lease(..., lock_wait=)`` always takes ``lock_wait`` (the runtime
      reads the signature once per class) and passes it on only when the inner
      store's ``acquire_lease`` takes it.
    - The optional fast paths are always present and always right:
      ``save_cut`` goes to the inner store's own (``SavesCuts``) only while this
      class's ``save`` is the forwarding one and the inner store takes cuts, and
      otherwise through ``self.save(cut.checkpoint(), ...)``; the runtime itself
      uses it only when ``save`` is not overridden (``SavesCuts``' rule), so a
      wrapper that overrides ``save`` sees every record there. ``load_blobs`` goes
      to the inner store's batch read (``BlobBatchReader``) only while
      ``load_blob`` is not overridden, and otherwise calls ``self.load_blob`` per
      digest.
    - ``request_cancel`` (``CancelRequests``) goes to the inner store's, and raises
      CheckpointError for an inner store without one.
    - A wrapper is never volatile (``VolatileStore``): what it adds may outlive
      the process, so the runtime keeps its strict write order.
    - :meth:`close` closes the inner store too, unless ``close_inner=False``: then
      the inner store stays open for its owner, and this wrapper refuses every
      later call with :class:`~actorflow.errors.StoreClosed`.

    Thread safety is the inner store's: a wrapper adds no state of its own
    (a subclass that does must guard it).

    Args:
        inner: the store every call goes to.
        close_inner: whether :meth:`close` closes ``inner``.
    """

    def __init__(self, inner: CheckpointStore, *, close_inner: bool = True) -> None:
        if not isinstance(inner, CheckpointStore):
            raise TypeError(
                f"{type(self).__name__} wraps a checkpoint store (SQLiteStore(path), say), "
                f"got {inner!r}"
            )
        self._inner = inner
        self._close_inner = close_inner
        self._inner_lock_wait = _takes_keyword(inner.acquire_lease, "lock_wait")

    @property
    def inner(self) -> CheckpointStore:
        """The wrapped store."""
        return self._inner

    if TYPE_CHECKING:
        # For the type checker: the protocol's own signatures. At run time these are
        # the forwarders installed below, one per member of CheckpointStore.
        save = CheckpointStore.save
        renew_lease = CheckpointStore.renew_lease
        release_lease = CheckpointStore.release_lease
        current_lease = CheckpointStore.current_lease
        load = CheckpointStore.load
        load_blob = CheckpointStore.load_blob
        has_blobs = CheckpointStore.has_blobs
        list = CheckpointStore.list
        latest = CheckpointStore.latest
        history = CheckpointStore.history
        session_history = CheckpointStore.session_history
        sessions = CheckpointStore.sessions
        delete = CheckpointStore.delete
        prune = CheckpointStore.prune
        prune_older_than = CheckpointStore.prune_older_than
        verify = CheckpointStore.verify

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        """``inner.acquire_lease``, with ``lock_wait`` passed on when the inner store takes it
        (a store written before it is called without; its locks are then waited for
        as long as it waits). See :meth:`CheckpointStore.acquire_lease`."""
        if lock_wait is not None and self._inner_lock_wait:
            return self._inner.acquire_lease(session, owner, ttl, lock_wait=lock_wait)
        check_lock_wait(lock_wait)
        return self._inner.acquire_lease(session, owner, ttl)

    def save_cut(self, cut: Cut, blobs: Mapping[str, bytes], lease: Lease | None = None) -> None:
        """Store a runtime cut: the semantics of ``save(cut.checkpoint(), blobs, lease=lease)``.

        Goes to the inner store's ``save_cut`` only when that is exactly what this
        wrapper's ``save`` would do (see the class docstring).
        """
        if _owner(type(self), "save") is StoreWrapper and takes_cuts(self._inner):
            inner = self._inner
            assert isinstance(inner, SavesCuts)  # checked by takes_cuts
            inner.save_cut(cut, blobs, lease)
        else:
            self.save(cut.checkpoint(), blobs, lease=lease)

    def load_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Every requested blob, verified (``BlobBatchReader``): the inner store's batch read
        while ``load_blob`` is not overridden and the inner store has one, else
        ``self.load_blob`` per digest."""
        inner = self._inner
        if _owner(type(self), "load_blob") is StoreWrapper and isinstance(inner, BlobBatchReader):
            return inner.load_blobs(digests)
        return {digest: self.load_blob(digest) for digest in digests}

    def request_cancel(self, session: str, run_id: str) -> bool:
        """``inner.request_cancel`` (see :class:`~actorflow.storage.CancelRequests`).

        Raises:
            CheckpointError: the inner store carries no cancel requests.
        """
        inner = self._inner
        if not isinstance(inner, CancelRequests):
            raise CheckpointError(
                f"{inner!r} carries no cancel requests (it has no request_cancel, the optional "
                "CancelRequests part of the store protocol): only the process holding a "
                "session can cancel its run"
            )
        return inner.request_cancel(session, run_id)

    def close(self) -> None:
        """Close the wrapper, and the inner store unless ``close_inner=False``. Idempotent;
        every later call raises :class:`~actorflow.errors.StoreClosed`."""
        if self._close_inner:
            self._inner.close()
        else:
            self._inner = _Closed(repr(self))  # raises StoreClosed on every use

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inner!r})"


class _Closed:
    """What a wrapper that did not close its inner store forwards to once closed."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> NoReturn:
        raise store_closed(self._name)

    def __repr__(self) -> str:
        return "<closed>"


def _owner(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO that defines ``name``."""
    return next((c for c in cls.__mro__ if name in c.__dict__), None)


def _takes_keyword(method: Callable[..., object], name: str) -> bool:
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read: call it the old way
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _forwarder(name: str, declared: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: StoreWrapper, /, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._inner, name)(*args, **kwargs)

    functools.update_wrapper(forward, declared)  # name, docstring and signature (__wrapped__)
    forward.__module__ = __name__
    forward.__qualname__ = f"StoreWrapper.{name}"
    return forward


for _name in protocol_methods(CheckpointStore):
    if _name not in vars(StoreWrapper):
        setattr(StoreWrapper, _name, _forwarder(_name, getattr(CheckpointStore, _name)))
del _name
