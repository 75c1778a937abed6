"""FileStore's session leases: one small file per session, changed under a per-session lock.

Layout, inside the store's folder::

    leases/<key>.lock     flock(2) target: held exclusively by every lease change and
                          every save of the session, so the fencing check and the
                          record's commit are one step
    leases/<key>.lease    the lease row as JSON, replaced by rename (never torn); it
                          also carries a cancel request (``request_cancel``)

``<key>`` is a digest of the session id (ids may hold any character). The row
outlives release, so the next grant's token is greater: tokens are never reused.
A row is fsynced before it is renamed into place; a grant also fsyncs the folder,
so a token once handed out survives power loss.

:class:`FileLeases` owns them; :class:`~._store.FileStore` holds one, delegates
the protocol's lease methods to it, and does the fencing step of a save through
:meth:`FileLeases.fenced`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from actorflow.errors import CheckpointCorrupt, CheckpointError, SessionOwned, StoreLocked
from actorflow.storage._lease import (
    Lease,
    LeaseRow,
    cancel_noted,
    check_owner,
    check_run_id,
    check_ttl,
    fence,
    grant,
    leaseless_check,
    renewed,
)
from actorflow.storage._lock_wait import (
    check_lock_wait,
    describe_holders,
    flock_within,
    lease_lock_held,
    lock_holders,
)

LEASES = "leases"

__all__ = ["LEASES", "FileLeases", "lease_key"]


class FileLeases:
    """The lease rows of one FileStore folder (thread- and process-safe)."""

    def __init__(self, root: Path) -> None:
        self._dir = root / LEASES

    def acquire(self, session: str, owner: str, ttl: float, lock_wait: float | None) -> Lease:
        ttl, owner = check_ttl(ttl), check_owner(owner)
        with self._locked(session, within=check_lock_wait(lock_wait)) as key:
            row = grant(session, self._read(key, session), owner, ttl, time.time())
            self._write(key, session, row, durable=True)
        return row.as_lease(session)

    def renew(self, lease: Lease, ttl: float) -> Lease:
        ttl = check_ttl(ttl)
        with self._locked(lease.session) as key:
            row = renewed(self._read(key, lease.session), lease, ttl, time.time())
            self._write(key, lease.session, row, durable=False)
        return row.as_lease(lease.session)

    def release(self, lease: Lease) -> None:
        with self._locked(lease.session) as key:
            row = self._read(key, lease.session)
            if row is not None and not row.released and row.token == lease.token:
                released = LeaseRow(row.token, row.owner, row.expires_at, True)
                self._write(key, lease.session, released, durable=False)

    def request_cancel(self, session: str, run_id: str) -> bool:
        run_id = check_run_id(run_id)
        with self._locked(session) as key:
            noted = cancel_noted(self._read(key, session), run_id, time.time())
            if noted is not None:
                self._write(key, session, noted, durable=False)
        return noted is not None

    def current(self, session: str) -> Lease | None:
        # Read without the lock: rows are replaced by rename, so a read sees a whole one.
        row = self._read(lease_key(session), session)
        return row.as_lease(session) if row is not None and row.live(time.time()) else None

    @contextlib.contextmanager
    def fenced(self, session: str, lease: Lease | None, checkpoint_id: str) -> Iterator[None]:
        """Hold the session's lock around a save after checking its lease (or its absence).

        Raises:
            LeaseLost / SessionOwned: see CheckpointStore.save.
        """
        with self._locked(session) as key:
            row = self._read(key, session)
            if lease is not None:
                fence(row, lease, session, checkpoint_id)
            elif row is not None:
                leaseless_check(row, session, checkpoint_id, time.time())
            yield

    @contextlib.contextmanager
    def unopened(self, sessions: Iterable[str]) -> Iterator[set[str]]:
        """Of ``sessions``, those no one has open, each locked until the block ends.

        A session is taken when its lock is free at once and no live lease holds it.
        While the block runs, no lease of those is granted and no save of theirs
        commits: what deleting them whole needs (``FileStore.prune_older_than``, under
        the store's exclusive lock). A save takes its session's lock before the
        store's, so this never waits for one: a lock held now means the session is in
        use, and it is left out.
        """
        with contextlib.ExitStack() as held:
            taken: set[str] = set()
            for session in sessions:
                fd = self._lock_file(session)
                try:
                    idle = self._unopened(fd, session)
                except BaseException:
                    os.close(fd)
                    raise
                if idle:
                    held.callback(os.close, fd)  # closing the file releases its lock
                    taken.add(session)
                else:
                    os.close(fd)  # in use: its owner's saves must not wait for the deletion
            yield taken

    # --- internals -------------------------------------------------------------------

    def _unopened(self, fd: int, session: str) -> bool:
        """Whether the session's lock (``fd``) is free at once and no live lease holds
        it; if so, ``fd`` now holds the lock."""
        try:
            if not flock_within(fd, 0.0):
                return False
        except OSError as exc:
            raise CheckpointError(f"cannot lock the lease of session {session!r}: {exc}") from exc
        row = self._read(lease_key(session), session)
        return row is None or not row.live(time.time())

    def _lock_file(self, session: str) -> int:
        """An open file description of the session's lock file (created if missing)."""
        path = self._dir / f"{lease_key(session)}.lock"
        try:
            try:
                return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            except FileNotFoundError:
                self._dir.mkdir(exist_ok=True)
                return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise CheckpointError(f"cannot lock the lease of session {session!r}: {exc}") from exc

    @contextlib.contextmanager
    def _locked(self, session: str, *, within: float | None = None) -> Iterator[str]:
        """Hold the session's lock; ``within``: seconds to wait for it (None: unbounded).

        Raises:
            SessionOwned / StoreLocked: not taken ``within`` (see ``lease_lock_held``).
        """
        key = lease_key(session)
        path = self._dir / f"{key}.lock"
        fd = self._lock_file(session)
        try:
            # A fresh open file description per call: threads of this process are
            # serialised like other processes (see FileStore._locked).
            try:
                taken = flock_within(fd, within)
            except OSError as exc:
                raise CheckpointError(
                    f"cannot lock the lease of session {session!r}: {exc}"
                ) from exc
            if not taken:
                raise self._held(session, key, path, within or 0.0)
            yield key
        finally:
            os.close(fd)

    def _held(
        self, session: str, key: str, path: Path, waited: float
    ) -> StoreLocked | SessionOwned:
        # The row is read without the lock (rows are replaced by rename: always whole).
        return lease_lock_held(
            session=session,
            where=f"the FileStore {self._dir.parent}",
            lock=f"its lock file {path}",
            waited=waited,
            holder=describe_holders(lock_holders(path)),
            row=self._read(key, session),
            now=time.time(),
        )

    def _read(self, key: str, session: str) -> LeaseRow | None:
        path = self._dir / f"{key}.lease"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(f"cannot read lease file {path}: {exc}") from exc
        try:
            body = json.loads(data)
            cancel = body.get("cancel")  # absent from rows older actorflow versions wrote
            row = LeaseRow(
                int(body["token"]),
                str(body["owner"]),
                float(body["expires_at"]),
                body["released"],
                cancel,
            )
            valid = (
                body["session"] == session
                and isinstance(row.released, bool)
                and row.token > 0
                and (cancel is None or isinstance(cancel, str))
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise _damaged(path, str(exc)) from exc
        if not valid:
            raise _damaged(path, "it holds another session's lease or bad values")
        return row

    def _write(self, key: str, session: str, row: LeaseRow, *, durable: bool) -> None:
        path = self._dir / f"{key}.lease"
        body = {
            "session": session,
            "token": row.token,
            "owner": row.owner,
            "expires_at": row.expires_at,
            "released": row.released,
        }
        if row.cancel is not None:
            body["cancel"] = row.cancel
        tmp = self._dir / f".{key}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(json.dumps(body).encode())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            if durable:
                dir_fd = os.open(self._dir, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        except OSError as exc:
            raise CheckpointError(f"cannot write lease file {path}: {exc}") from exc


def lease_key(session: str) -> str:
    """The name of a session's lease files (a digest: session ids may hold any character)."""
    return hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _damaged(path: Path, why: str) -> CheckpointCorrupt:
    return CheckpointCorrupt(
        f"lease file {path} is damaged ({why}); while no process uses that session, "
        "delete it (tokens of the session then start again from 1)"
    )
