"""FileStore's store lock: the ``flock`` of ``.lock`` that saves share and collections take.

:class:`StoreLock` owns the lock file's path and syncs the store's pack index on
every entry (the index learns of a collection through the token the lock file
holds, see ``_packindex``); the store and its blob reads hold it through
:meth:`StoreLock.held`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from actorflow.errors import CheckpointError
from actorflow.storage._common import store_closed
from actorflow.storage._lock_wait import flock_within, lock_bound, store_lock_held

from ._packindex import TOKEN_SIZE, PackIndex

__all__ = ["StoreLock"]


class StoreLock:
    """The store lock of one FileStore folder, and the pack index it keeps in sync.

    Args:
        root: the store's folder (its ``.lock`` is the lock file).
        index: the handle's pack index, synced whenever the lock is taken.
        name: how messages name the store (``FileStore('/path')``).
    """

    def __init__(self, root: Path, index: PackIndex, name: str) -> None:
        self._root = root
        self._path = root / ".lock"
        self._index = index
        self._name = name
        self._token_fd: int | None = None
        """A read-only descriptor of the lock file, for :meth:`token` (opened by its first read)."""
        self._closed = False
        self._guard = threading.Lock()
        """Held for each read of the descriptor and for its close: a close that ran beside
        a read would make it fail on a closed descriptor, or read whatever file was
        opened next under the same number."""

    def token(self) -> bytes | None:
        """The collection token as it is now (see ``_packindex``), read without taking
        the lock; None while there is no lock file (nothing ever wrote the store).

        Raises:
            StoreClosed: :meth:`close` ran (maybe while the caller's listing did).
            CheckpointError: the lock file exists but cannot be read.
        """
        with self._guard:
            if self._closed:
                raise store_closed(self._name)
            try:
                if self._token_fd is None:
                    self._token_fd = os.open(self._path, os.O_RDONLY)
                return os.pread(self._token_fd, TOKEN_SIZE, 0)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise CheckpointError(f"cannot read the lock file {self._path}: {exc}") from exc

    def close(self) -> None:
        """Close the descriptor :meth:`token` reads; later reads raise StoreClosed."""
        with self._guard:
            self._closed = True
            fd, self._token_fd = self._token_fd, None
            if fd is not None:
                os.close(fd)

    @contextlib.contextmanager
    def held(self, *, exclusive: bool, write: bool = True) -> Iterator[int | None]:
        """Hold the store lock; yields its fd. The pack index is synced on entry.

        ``write=False`` (a section that only reads) also works on a read-only file
        system: the lock file is opened read-only, and if it cannot be (it was never
        created, or cannot be opened there) no lock is taken: nothing can collect
        on a read-only file system, and what the lock guards against is a collection.

        Raises:
            CheckpointError: the lock cannot be taken (for a write: a read-only or
                full file system, permissions), naming the cause.
        """
        # A fresh open file description per call: flock(2) locks held through
        # different descriptions conflict even within one process, so threads
        # of this process are serialised exactly like other processes.
        try:
            fd: int | None = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            fd = None if write else self._read_only()
            if write:
                raise CheckpointError(
                    f"cannot lock the FileStore {self._root} for writing: {exc}; a store on a"
                    " read-only file system can only be read"
                ) from exc
        try:
            try:
                if fd is not None:
                    bound = lock_bound(None)  # an open's wait=, if this is one
                    if not flock_within(fd, bound, shared=not exclusive):
                        raise store_lock_held(
                            where=self._name,
                            lock=f"its store lock {self._path}",
                            path=str(self._path),
                            waited=bound or 0.0,
                        )
                self._index.sync(fd)
            except OSError as exc:  # e.g. a folder named .lock
                raise CheckpointError(
                    f"cannot use the lock file {self._path}: {exc}; it must be a regular file"
                ) from exc
            yield fd
        finally:
            if fd is not None:
                os.close(fd)  # closing the description releases the lock

    def _read_only(self) -> int | None:
        try:
            return os.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(f"cannot open {self._path}: {exc}") from exc
