"""Whether a stored state fits the current executor class.

A state fits when the class's ``restore()`` takes it and leaves the instance with
every attribute a freshly built instance has (unless the class writes its own
``snapshot()``, whose keys need not be attributes). A state that does not fit
fails with :class:`~actorflow.errors.StateMigrationError`, naming the executor,
both versions and the fix, not the first handler with an ``AttributeError``.

Two ways to tell, one rule (:func:`check_names`):

- :func:`restore_fitted` restores the state and looks at the instance's
  attributes: what the host does with every snapshot it restores, and what a
  resume does on a scratch instance for a migrated state or a class with its own
  ``restore()``;
- :func:`fits_unread` reads the attribute names from the snapshot's manifest
  and decodes (and drops) only the chunks that differ from the blueprint's: what
  a resume does for a class with the default ``restore()`` (which sets exactly
  the stored attributes). A large state that is mostly as built is then not
  decoded until its executor first runs, yet every stored byte this code did not
  write itself has been checked before anything runs.
"""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

from actorflow.actors import check_state, stable_name
from actorflow.errors import DecodeError, StateMigrationError

from .graph import Executor


class ExecutorProgram(Protocol):
    """What fitting a stored state reads of an executor's program (``_runner``)."""

    @property
    def executor_id(self) -> str: ...

    @property
    def cls(self) -> type[Executor]: ...

    @property
    def blueprint_digest_set(self) -> AbstractSet[str]: ...

    @property
    def state_names(self) -> Collection[str]: ...


__all__ = [
    "fits_unread",
    "migration_error",
    "overrides",
    "restore_fitted",
    "undecodable",
    "version_of",
]

_HOW = (
    "declare state_version = {next} on the class and a classmethod migrate(cls, state, "
    "from_version) that returns the state in the new shape, or give restore() defaults"
)


def version_of(cls: type[Executor]) -> int:
    """The class's declared ``state_version`` (1 when it declares none)."""
    version = getattr(cls, "state_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version < 1 << 63:
        raise StateMigrationError(
            f"{stable_name(cls)}.state_version must be an int from 1 to 2**63 - 1 (it is "
            f"stored as a 64-bit number), got {version!r}"
        )
    return version


def migration_error(
    program: ExecutorProgram, stored: int, current: int, what: str, fix: str, *, where: str
) -> StateMigrationError:
    """The error for a state of ``program``'s executor that cannot be brought to its class."""
    name = stable_name(program.cls)
    return StateMigrationError(
        f"{where}executor {program.executor_id!r} ({name}): {what} (stored state version "
        f"{stored}, current state_version {current}); {fix}",
        executor=program.executor_id,
        stored_version=stored,
        current_version=current,
    )


def restore_fitted(
    program: ExecutorProgram,
    instance: Executor,
    state: dict[str, Any],
    *,
    stored: int | None = None,
    where: str = "",
) -> None:
    """``instance.restore(state)``, then check the instance is complete.

    Args:
        program: the executor's program (its class and blueprint).
        instance: fresh from ``cls.__new__``, with its id and code attached.
        state: the decoded (and, where needed, migrated) state; handed to ``restore``.
        stored: the state version the checkpoint recorded (the current one if None).
        where: prefix for error messages (a sub-workflow's path).

    Raises:
        StateMigrationError: ``restore()`` raised, or the instance lacks attributes
            the current class's blueprint has.
    """
    current = version_of(program.cls)
    stored = current if stored is None else stored
    try:
        instance.restore(state)
    except StateMigrationError:
        raise
    except Exception as exc:
        raise migration_error(
            program,
            stored,
            current,
            f"restore() of the current class raised {type(exc).__name__}: {exc}",
            _HOW.format(next=current + 1),
            where=where,
        ) from exc
    check_names(program, vars(instance), stored, where=where)


def fits_unread(
    program: ExecutorProgram, chunks: list[tuple[str, bytes]], stored: int, *, where: str = ""
) -> bool:
    """Check a stored state of a class with the default ``restore()`` without building it.

    Its manifest gives the attribute names; every chunk other than the blueprint's
    own (bytes this code encoded at build time) is decoded and dropped, so bytes the
    code cannot decode fail now, before anything runs.

    Returns:
        False when the class overrides ``restore()``: only restoring tells then
        (:func:`restore_fitted`); True when the state fits.

    Raises:
        StateMigrationError: the state lacks attributes the current class has.
        DecodeError: a chunk does not decode (the executor is named).
    """
    if overrides(program.cls, "restore"):
        return False
    known = program.blueprint_digest_set
    try:
        names = check_state([c for _, c in chunks], [d in known for d, _ in chunks])
    except DecodeError as exc:
        raise undecodable(program, exc, where=where) from exc
    check_names(program, names, stored, where=where)
    return True


def undecodable(program: ExecutorProgram, exc: DecodeError, *, where: str = "") -> DecodeError:
    """``exc``, raised decoding ``program``'s stored state, naming the executor."""
    return DecodeError(
        f"{where}executor {program.executor_id!r} ({stable_name(program.cls)}): its stored "
        f"state cannot be decoded: {exc}"
    )


def check_names(
    program: ExecutorProgram, names: Collection[str], stored: int, *, where: str
) -> None:
    """Raise unless ``names`` (a restored instance's attributes) has every attribute of
    the current blueprint; a class with its own ``snapshot()`` is not checked."""
    if overrides(program.cls, "snapshot"):
        return  # a custom snapshot: its keys need not be attributes
    lacking = sorted(name for name in program.state_names if name not in names)
    if lacking:
        current = version_of(program.cls)
        fix = _HOW.format(next=current + 1)
        if stored < current and overrides(program.cls, "migrate"):  # it ran, and missed them
            fix = (
                f"make {stable_name(program.cls)}.migrate() set them when it brings a "
                f"version-{stored} state to version {current}"
            )
        raise migration_error(
            program,
            stored,
            current,
            f"its stored state lacks attribute(s) {', '.join(lacking)} that the current class has",
            fix,
            where=where,
        )


def overrides(cls: type[Executor], method: str) -> bool:
    """Whether ``cls`` (or a base below :class:`Executor`) defines ``method`` itself."""
    mro = cls.__mro__
    return any(method in vars(k) for k in mro[: mro.index(Executor)])
