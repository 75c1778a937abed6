"""Whether a stored state fits the current executor class.

A state fits when the class's ``restore()`` takes it and leaves the instance with
every attribute a freshly built instance has (unless the class writes its own
``snapshot()``, whose keys need not be attributes). The host checks this as it
restores a snapshot into its instance, which a resumed session does before
``wf.resume`` returns; the driver checks a migrated state the same way on a
scratch instance. Either way a state the code cannot use fails the resume with
:class:`~actorflow.errors.StateMigrationError`, not the first handler with an
``AttributeError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actorflow.actors._naming import stable_name
from actorflow.errors import StateMigrationError

from ._executor import Executor

if TYPE_CHECKING:
    from ._runner import ExecutorProgram

__all__ = ["migration_error", "restore_fitted", "version_of"]

_HOW = (
    "declare state_version = {next} on the class and a classmethod migrate(cls, state, "
    "from_version) that returns the state in the new shape, or give restore() defaults"
)


def version_of(cls: type[Executor]) -> int:
    """The class's declared ``state_version`` (1 when it declares none)."""
    version = getattr(cls, "state_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise StateMigrationError(
            f"{stable_name(cls)}.state_version must be an int >= 1, got {version!r}"
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
    mro = program.cls.__mro__
    if any("snapshot" in vars(k) for k in mro[: mro.index(Executor)]):
        return  # a custom snapshot: its keys need not be attributes
    attributes = vars(instance)
    lacking = sorted(name for name in program.state_names if name not in attributes)
    if lacking:
        raise migration_error(
            program,
            stored,
            current,
            f"its stored state lacks attribute(s) {', '.join(lacking)} that the current class has",
            _HOW.format(next=current + 1),
            where=where,
        )
