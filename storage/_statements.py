"""Statements a store commits in the transaction of a checkpoint (``ctx.sql``).

A handler's ``ctx.sql`` queues a write to the store's own database; the runtime
hands the statements of the supersteps a cut commits to the store with that cut,
and a store that :class:`CommitsStatements` executes them inside the transaction
that inserts the record: after a crash both are there or neither is (DBOS's
transactional step, or an outbox in the same database).

Only the class that defines the store's ``save`` counts (as for ``SavesCuts``): a
wrapper or an ``EncryptedStore`` in front of a SQL store forwards records, not
transactions, and ``ctx.sql`` refuses to run against it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, NamedTuple, Protocol, runtime_checkable

from actorflow.errors import StatementFailed

from ._cut import Cut
from ._format import Checkpoint
from ._lease import Lease
from ._protocol import CheckpointStore

__all__ = [
    "CommitsStatements",
    "SqlValue",
    "Statement",
    "StatementSaver",
    "sql_dialect",
    "statement_failed",
    "statement_saver",
]

SqlValue = None | bool | int | float | str | bytes
"""A statement parameter: what both SQLite and PostgreSQL bind as is."""


class Statement(NamedTuple):
    """One ``ctx.sql`` call: the statement, its parameters, and who made it when."""

    sql: str
    params: tuple[SqlValue, ...]
    executor: str
    superstep: int


@runtime_checkable
class CommitsStatements(Protocol):
    """A store that runs statements in the transaction that saves a checkpoint."""

    sql_dialect: ClassVar[str]
    """``"sqlite"`` or ``"postgres"``: the placeholders and SQL its statements use."""

    def save_with_statements(
        self,
        checkpoint: Checkpoint,
        blobs: Mapping[str, bytes],
        statements: Sequence[Statement],
        *,
        lease: Lease | None = None,
    ) -> None:
        """``save(checkpoint, blobs, lease=lease)``, with ``statements`` executed, in order,
        in the same transaction, after the fencing check and before the record is
        inserted. Nothing is committed if any of them fails.

        Raises:
            StatementFailed: a statement failed (names its executor and superstep).
            Whatever ``save`` raises.
        """
        ...


def sql_dialect(store: CheckpointStore) -> str | None:
    """The dialect of ``store``'s statements, or None if it commits none (see module doc)."""
    if not isinstance(store, CommitsStatements):
        return None
    owner = next((c for c in type(store).__mro__ if "save" in c.__dict__), None)
    if owner is None or "save_with_statements" not in owner.__dict__:
        return None
    return store.sql_dialect


StatementSaver = Callable[[Cut, Mapping[str, bytes], Sequence[Statement]], None]
"""Saves a cut, its new blobs and its statements in one transaction."""


def statement_saver(store: CheckpointStore, lease: Lease | None) -> StatementSaver | None:
    """How to save a cut with statements into ``store`` (None: it commits none)."""
    if sql_dialect(store) is None:
        return None
    assert isinstance(store, CommitsStatements)
    commits = store.save_with_statements

    def save(cut: Cut, blobs: Mapping[str, bytes], statements: Sequence[Statement]) -> None:
        commits(cut.checkpoint(), blobs, statements, lease=lease)

    return save


def statement_failed(statement: Statement, error: BaseException) -> StatementFailed:
    """The error of a statement the store's database refused."""
    return StatementFailed(
        f"the ctx.sql statement {statement.sql[:80]!r} of executor {statement.executor!r} "
        f"(superstep {statement.superstep}) failed in the checkpoint's transaction: "
        f"{type(error).__name__}: {error}; nothing of the checkpoint was committed; fix the "
        "statement or its table and resume the session (the superstep runs again)",
        executor=statement.executor,
        superstep=statement.superstep,
    )
