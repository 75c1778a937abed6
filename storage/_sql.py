"""What the SQL stores (SQLiteStore, PostgresStore) share: rows, filters, blobs, verify.

The two differ in their SQL dialect and placeholder style (``?`` against ``%s``);
what is the same logic is written once here: the filter builder, decoding a row
against its columns, the check of rows a read left out, loading a batch of blobs
and the verify walk over the stored records.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from actorflow.errors import CheckpointCorrupt, CheckpointNotFound, UnsupportedFormat

from ._common import decode_stored
from ._format import Checkpoint, CheckpointKind, verify_blob
from ._summary import SessionSummary

COLUMNS = "id, session, workflow, kind, record"
"""The columns a checkpoint row is decoded from (see :func:`decode_row`)."""

_ROW_FIELDS = ("session", "workflow", "kind")

SUMMARIES = (
    "SELECT c.id, c.session, c.workflow, c.kind, c.record, s.records, s.first_at, s.last_at"
    " FROM (SELECT session, max(id) AS newest, count(*) AS records,"
    " min(created_at) AS first_at, max(created_at) AS last_at"
    " FROM {table} GROUP BY session) AS s"
    " JOIN {table} AS c ON c.id = s.newest"
)
"""One query for every session's summary (``SummarisesSessions``): each session's
newest record (by id) joined to its record count and first and last ``created_at``;
``{table}`` is the dialect's checkpoints table. Rows go to :func:`summaries_of`."""


def filters(
    workflow: str | None, session: str | None, kind: CheckpointKind | None, *, mark: str
) -> tuple[str, tuple[str, ...]]:
    """The ``WHERE`` clause (``""`` without filters) and its parameters of a read by
    workflow, session and kind; ``mark`` is the dialect's placeholder (``?``, ``%s``)."""
    clauses: builtins.list[str] = []
    params: builtins.list[str] = []
    for column, value in (("workflow", workflow), ("session", session)):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if kind is not None:
        clauses.append(f"kind = {mark}")
        params.append(CheckpointKind(kind).value)
    return (f" WHERE {' AND '.join(clauses)}" if clauses else ""), tuple(params)


def as_bytes(value: object, what: str) -> bytes:
    """``value`` (a blob column: bytes, or a buffer the driver hands out) as bytes.

    Raises:
        CheckpointCorrupt: it is not a binary value (a damaged row), naming ``what``.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    raise CheckpointCorrupt(f"{what} is stored as {type(value).__name__}, not bytes")


def decode_row_record(row_id: object, columns: tuple[object, ...], record: bytes) -> Checkpoint:
    """Decode the record of a row found by its id, session, workflow and kind columns
    (``columns``: those three), which must agree with the record itself.

    Raises:
        CheckpointCorrupt: the record is damaged, or the row's columns name another
            record than the one it holds (the message names both and what to do).
        UnsupportedFormat: the record is of a format this version cannot read.
    """
    cp = decode_stored(str(row_id), record)
    held = (cp.session, cp.workflow, cp.kind.value)
    if held != columns:
        wrong = ", ".join(
            f"{name} {got!r} (the record says {want!r})"
            for name, got, want in zip(_ROW_FIELDS, columns, held, strict=True)
            if got != want
        )
        raise CheckpointCorrupt(
            f"checkpoint {str(row_id)!r}: its row's columns disagree with the record it holds:"
            f" {wrong}; restore the row from a backup, or delete {str(row_id)!r}"
        )
    return cp


def decode_row(row: tuple[Any, ...]) -> Checkpoint:
    """The record of a row of :data:`COLUMNS`, checked against its columns."""
    checkpoint_id, session, workflow, kind, record = row
    data = as_bytes(record, f"checkpoint {checkpoint_id}")
    return decode_row_record(checkpoint_id, (session, workflow, kind), data)


def summaries_of(rows: Iterable[tuple[Any, ...]]) -> builtins.list[SessionSummary]:
    """The summaries of :data:`SUMMARIES`'s rows, sorted by session (in Python: a
    database's collation may order text otherwise); each newest record is decoded and
    checked against its row like any other.

    Raises:
        CheckpointCorrupt: a newest record is damaged, or its row's columns disagree with it.
    """
    found: builtins.list[SessionSummary] = []
    for row in rows:
        latest = decode_row(row[:5])
        records, first_at, last_at = row[5:]
        found.append(
            SessionSummary(latest.session, int(records), float(first_at), float(last_at), latest)
        )
    found.sort(key=lambda summary: summary.session)
    return found


def shown_filters(**given: object) -> str:
    """A read's filters as its call shows them (``session='s', kind='final'``), for messages."""
    return ", ".join(f"{k}={str(v)!r}" for k, v in given.items() if v is not None)


def check_left_out(
    decode: Callable[[tuple[Any, ...]], Checkpoint],
    rows: Iterable[tuple[Any, ...]],
    *,
    read: str,
    next_to: str,
    matches: Callable[[Checkpoint], bool] | None = None,
) -> None:
    """Decode rows a read left out that are next to its answer in a lineage (a child of
    the newest record, a parent or child of a listed one).

    Such a row whose columns disagree with its record may be what the read should
    have returned (its session or id column changed, say, so the filter or the order
    skipped it): an older record, or a shorter list, would be a silent rollback. So
    is a healthy one that ``matches`` the read's filters (a list's: see
    ``_common.matching``): an index that lost it gave the list without it. Other rows
    that decode are other lineages' (forks) and fine; a record of a newer format is
    left to the reads that return it.

    Raises:
        CheckpointCorrupt: one of them is damaged or was left out by a damaged index,
            naming it, ``read`` and ``next_to``.
    """
    for row in rows:
        try:
            cp = decode(row)
        except CheckpointCorrupt as exc:
            raise CheckpointCorrupt(
                f"{read}: a record it may have to return is damaged ({next_to}): {exc};"
                " `actorflow checkpoints verify` lists every problem"
            ) from exc
        except UnsupportedFormat:
            continue
        if matches is not None and matches(cp):
            raise CheckpointCorrupt(
                f"{read}: an index left out checkpoint {cp.id} ({next_to}), which the read"
                " should return; run `actorflow checkpoints verify` and restore the store"
                " from a backup (or REINDEX it)"
            )


def verified_blobs(wanted: Iterable[str], found: Mapping[str, object]) -> dict[str, bytes]:
    """The blobs ``wanted`` from the rows ``found`` (digest -> data column), each verified.

    Raises:
        CheckpointNotFound: one of them is not among ``found``.
        CheckpointCorrupt: one of them is damaged, or does not match its digest.
    """
    ordered = sorted(wanted)
    missing = [d for d in ordered if d not in found]
    if missing:
        raise CheckpointNotFound(f"no blob {missing[0]!r} in this store")
    return {d: verify_blob(d, as_bytes(found[d], f"blob {d}")) for d in ordered}


def blob_state(digest: str, data: object) -> str:
    """``"ok"``, ``"missing"`` (``data`` is None: no row) or ``"corrupt"``, for verify."""
    if data is None:
        return "missing"
    try:
        verify_blob(digest, as_bytes(data, f"blob {digest}"))
    except CheckpointCorrupt:
        return "corrupt"
    return "ok"


def verify_rows(
    rows: Iterable[tuple[Any, ...]],
    *,
    stored: AbstractSet[object],
    deleted: AbstractSet[object],
    references: Callable[[tuple[Any, ...]], set[str]],
    blobs: Callable[[tuple[Any, ...]], Iterable[tuple[str, str]]],
    disagree: str,
    damaged: Callable[[tuple[Any, ...]], builtins.list[str]] = lambda row: [],
) -> builtins.list[str]:
    """The verify walk over every record row, one line per problem.

    Args:
        rows: each record's row, in id order: :data:`COLUMNS`, ``parent_id``, then
            whatever the store's callables below read (Postgres: ``blob_ids``).
        stored: every stored id; ``deleted``: every id deleted or pruned (a parent
            among them is fine, a parent in neither was never stored).
        references: the digests the row's references (refs rows, an array) name;
            ``<missing blob #n>`` for one naming no blob row.
        blobs: ``(how to name it, its blob_state)`` of each blob the row references,
            in the order to report them.
        disagree: what the references are called when they disagree with the record
            (``the refs table``, ``its blob_ids``).
        damaged: problems of the row itself, reported first (a NULL in an array).
    """
    problems: builtins.list[str] = []
    for row in rows:
        checkpoint_id, parent = str(row[0]), row[5]
        problems += damaged(row)
        try:
            cp = decode_row(row[:5])
            if cp.blob_digests() != references(row):
                problems.append(
                    f"checkpoint {checkpoint_id}: its blob references disagree with {disagree}"
                )
        except (CheckpointCorrupt, UnsupportedFormat) as exc:
            problems.append(str(exc))
        if parent is not None and parent not in stored and parent not in deleted:
            problems.append(f"checkpoint {checkpoint_id}: parent {parent} was never stored")
        for named, state in blobs(row):
            if state != "ok":
                problems.append(f"checkpoint {checkpoint_id}: blob {named} is {state}")
    return problems
