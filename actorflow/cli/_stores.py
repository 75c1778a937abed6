"""The store a ``STORE`` argument names: a SQLite file, a FileStore folder or a PostgreSQL URI."""

from __future__ import annotations

import difflib
import urllib.parse
from pathlib import Path

from actorflow.errors import CheckpointError, StoreNotFound
from actorflow.storage import FILESTORE_MARKER, CheckpointStore, FileStore, SQLiteStore

__all__ = ["open_store"]

_SQLITE_HEADER = b"SQLite format 3\x00"


def open_store(target: str, *, create: bool = False, upgrade: bool = False) -> CheckpointStore:
    """The store a command-line argument names: a PostgreSQL URI is a PostgresStore,
    a folder a FileStore, a file a SQLiteStore.

    Args:
        target: the argument as given.
        create: make a new, empty store when nothing is at ``target`` (only ``serve``
            does, and says so: for the others a mistyped path must be an error, never a
            new store; a folder that is not a FileStore is refused either way).
        upgrade: first bring a store written by an older actorflow to the current
            layout (``checkpoints upgrade``).

    Without ``create`` every store is opened with ``create=False``: nothing is made
    on a mistyped path, folder, database or schema.

    Raises:
        StoreNotFound: no actorflow store at ``target`` (nothing there, or something
            that is not a store).
        CheckpointError: the store cannot be opened.
        UnsupportedFormat: a store of an older layout (the message names ``upgrade``).
    """
    if target.startswith(("postgresql://", "postgres://")):
        return _open_postgres(target, create=create)  # an older schema is upgraded as it opens
    path = Path(target)
    if path.is_dir():
        if not (path / FILESTORE_MARKER).exists():
            raise StoreNotFound(
                f"{target} is a folder but not an actorflow FileStore (no {FILESTORE_MARKER} file in "
                "it); give the folder a FileStore wrote, or a SQLite file"
            )
        if upgrade:
            FileStore.upgrade(path)
        return FileStore(path, create=create)
    if not path.exists():
        if not create:
            raise StoreNotFound(
                f"no checkpoint store at {target}: no such file or folder; check the path"
            )
    elif not _is_sqlite(path):
        raise StoreNotFound(
            f"{target} is neither a SQLite database nor a FileStore folder; give a store "
            "written by actorflow"
        )
    return SQLiteStore(path, create=create)  # a SQLite store upgrades its schema when opened


def _open_postgres(uri: str, *, create: bool) -> CheckpointStore:
    # ``schema`` is ours, not libpq's (which refuses unknown URI parameters).
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    for key, _value in query:
        if key != "schema" and difflib.get_close_matches(key, ["schema"], cutoff=0.7):
            raise CheckpointError(
                f"{_shown(uri)}: unknown option {key!r} in the URI; did you mean "
                "?schema=NAME (the PostgreSQL schema of the store)?"
            )
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "schema"])
    dsn = urllib.parse.urlunsplit(parts._replace(query=rest))
    from actorflow.storage import PostgresStore  # noqa: PLC0415  # the extra is optional

    return PostgresStore(dsn, schema=schemas[-1] if schemas else "actorflow", create=create)


def _shown(uri: str) -> str:
    """``uri`` without its password, for messages."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False
