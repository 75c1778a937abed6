"""State versions: bringing executor snapshots written by older code to the current class.

An executor class declares the version of its state (``state_version = 2``) and
how to bring an older snapshot up to it (a ``migrate(state, from_version)``
classmethod returning the new state dict). Checkpoints record the version of
every executor whose class declares one other than 1 (the runtime field
``"versions"``).

On resume, before any actor starts, :func:`prepare_snapshots` reads every
executor's stored state and checks that it fits the current class
(:mod:`._state_fit`): a state of an older version is decoded, migrated and
restored into a scratch instance of the current class (``restore()`` as the
runner calls it, no resources); so is a state of a class with its own
``restore()``. A state of the current version of a class with the default
``restore()`` is checked from its manifest alone and decoded by its host when its
executor first runs, so a resume that runs one executor decodes one state. A
snapshot that does not fit fails the resume with
:class:`~actorflow.errors.StateMigrationError`, naming the executor, both
versions and the fix, instead of the first handler failing with an
``AttributeError``. Sub-workflows check their nested states the same way when
restored, and migrate them when their inner session resumes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from actorflow.actors import decode_state, encode_state
from actorflow.errors import DecodeError, EncodeError
from actorflow.runtime._runner import ExecutorProgram
from actorflow.runtime._state_fit import (
    fits_unread,
    migration_error,
    overrides,
    restore_fitted,
    undecodable,
    version_of,
)
from actorflow.runtime._wire import pack

__all__ = ["prepare_snapshots", "version_entries"]

Chunks = list[tuple[str, bytes | None]]
Reader = Callable[[list[str]], Mapping[str, bytes]]


def version_entries(programs: Mapping[str, ExecutorProgram]) -> dict[str, bytes]:
    """The ``"versions"`` runtime field for these executors (none if every version is 1)."""
    versions = {eid: version_of(p.cls) for eid, p in sorted(programs.items())}
    declared = {eid: v for eid, v in versions.items() if v != 1}
    return {"versions": pack(declared)} if declared else {}


def prepare_snapshots(
    programs: Mapping[str, ExecutorProgram],
    extra: Mapping[str, Any],
    snapshots: dict[str, Chunks],
    read: Reader,
    *,
    where: str = "",
) -> set[str]:
    """Check every snapshot in ``snapshots`` against its class, migrating older ones in place.

    Args:
        programs: executor id -> its program (the current code).
        extra: the checkpoint's runtime fields (``"versions"`` among them).
        snapshots: executor id -> its chunks, bytes or None (read through ``read``);
            replaced by chunks that all hold bytes, migrated where needed.
        read: digest list -> bytes, for the chunks not in hand.
        where: prefix for error messages (a sub-workflow's path).

    Returns:
        The executors whose state was migrated.

    Raises:
        StateMigrationError: a snapshot cannot be decoded, migrated or restored.
    """
    stored_versions = extra.get("versions", {})
    if not isinstance(stored_versions, dict):
        stored_versions = {}
    missing = sorted({d for chunks in snapshots.values() for d, c in chunks if c is None})
    got = read(missing) if missing else {}
    migrated: set[str] = set()
    for eid in sorted(snapshots):
        program = programs.get(eid)
        if program is None:
            continue  # the graph check reports executors the graph lacks
        chunks = [(d, c if c is not None else got[d]) for d, c in snapshots[eid]]
        current = version_of(program.cls)
        stored = stored_versions.get(eid, 1)
        snapshots[eid] = list(chunks)
        if stored == current and fits_unread(program, chunks, stored, where=where):
            continue
        state = _decoded(program, chunks, where)
        if stored != current:
            state = _migrated(program, state, stored, current, where)
            try:
                encoded = encode_state(state)
            except EncodeError as exc:
                raise migration_error(
                    program,
                    stored,
                    current,
                    f"migrate() returned a state that cannot be stored: {exc}",
                    "return built-in values or @actorflow.message types from migrate(), as "
                    "the executor's own attributes must be",
                    where=where,
                ) from exc
            snapshots[eid] = [(hashlib.sha256(c).hexdigest(), c) for c in encoded]
            migrated.add(eid)
        _check_restores(program, state, stored, where)
    return migrated


def _decoded(
    program: ExecutorProgram, chunks: list[tuple[str, bytes]], where: str
) -> dict[str, Any]:
    try:
        return decode_state([c for _, c in chunks])
    except DecodeError as exc:
        raise undecodable(program, exc, where=where) from exc


def _migrated(
    program: ExecutorProgram, state: dict[str, Any], stored: int, current: int, where: str
) -> dict[str, Any]:
    cls = program.cls
    if stored > current:
        raise migration_error(
            program,
            stored,
            current,
            "the checkpoint was written by newer code",
            "resume it with the code that wrote it (state is never migrated backwards)",
            where=where,
        )
    if not overrides(cls, "migrate"):
        raise migration_error(
            program,
            stored,
            current,
            "the class declares a new state version but no migrate()",
            "define a classmethod migrate(cls, state, from_version) returning the state "
            "of the current version",
            where=where,
        )
    try:
        new = cls.migrate(dict(state), stored)
    except Exception as exc:
        raise migration_error(
            program,
            stored,
            current,
            f"migrate() raised {type(exc).__name__}: {exc}",
            "fix migrate() for this version, or resume with the code that wrote it",
            where=where,
        ) from exc
    if not isinstance(new, dict) or not all(isinstance(k, str) for k in new):
        raise migration_error(
            program,
            stored,
            current,
            f"migrate() returned a {type(new).__name__}, not a dict of attributes",
            "return the migrated state dict",
            where=where,
        )
    return new


def _check_restores(
    program: ExecutorProgram, state: dict[str, Any], stored: int, where: str
) -> None:
    """Restore ``state`` into a scratch instance as the runner would; it must fit."""
    restore_fitted(program, program.bare_instance(), dict(state), stored=stored, where=where)
