"""SQLiteStore's heads table: each session's record saved last, kept by triggers, against
which a session's ``latest`` and ``list`` check the session index in one lookup."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from actorflow.errors import CheckpointCorrupt
from actorflow.storage import SQLiteStore, encode_checkpoint
from actorflow.storage.conformance import make_checkpoint
from actorflow.storage.conformance._base import save_new


def drop_heads(db: sqlite3.Connection) -> None:
    """Take a file back to before schema 5: no heads table, no triggers keeping it."""
    db.execute("DROP TRIGGER heads_after_insert")
    db.execute("DROP TRIGGER heads_after_delete")
    db.execute("DROP TABLE heads")


def heads(path: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return dict(db.execute("SELECT session, id FROM heads"))


def test_heads_follow_saves_deletes_and_prunes(tmp_path: Path) -> None:
    """A save makes its record its session's head; deleting the head deletes the row
    (the table holds only what saves wrote), and latest still gives the newest left."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        first = save_new(store, session="s")
        second = save_new(store, session="s", parent=first)
        other = save_new(store, session="t")
        assert heads(path) == {"s": second.id, "t": other.id}

        store.delete(first.id)  # not a head: nothing changes
        assert heads(path) == {"s": second.id, "t": other.id}
        third = save_new(store, session="s", parent=second)
        store.delete(third.id)
        assert heads(path) == {"t": other.id}
        assert store.latest(session="s") == second  # the long way, and right
        fourth = save_new(store, session="s", parent=second)
        assert heads(path) == {"s": fourth.id, "t": other.id}

        assert store.prune("t", keep=0) == 1
        assert heads(path) == {"s": fourth.id}
        assert store.latest(session="t") is None
        assert store.latest(session="never") is None


def test_a_writer_that_knows_nothing_of_heads_keeps_them_right(tmp_path: Path) -> None:
    """A row inserted by another program (an older actorflow, a hand-made INSERT) moves
    its session's head too: the triggers run in the writer's transaction."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        first = save_new(store, session="s")
        second, _ = make_checkpoint(session="s", parent=first, chunks={})
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute(
                "INSERT INTO checkpoints (id, session, workflow, kind, superstep, created_at,"
                " parent_id, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    second.id,
                    second.session,
                    second.workflow,
                    second.kind.value,
                    second.superstep,
                    second.created_at,
                    second.parent_id,
                    encode_checkpoint(second),
                ),
            )
        assert heads(path) == {"s": second.id}
        assert store.latest(session="s") == second


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE heads SET id = 'zzzz'",  # a head newer than every record
        "UPDATE heads SET id = '0'",  # older than every record
        "UPDATE heads SET id = CAST(X'FF61' AS TEXT)",  # text that is not UTF-8
        "UPDATE heads SET id = X'00'",  # not text at all
        "UPDATE heads SET session = 'elsewhere'",
        "DELETE FROM heads",
        "INSERT INTO heads (session, id) VALUES ('absent', 'zzzz')",
    ],
)
def test_a_damaged_heads_table_never_changes_what_latest_gives(tmp_path: Path, damage: str) -> None:
    """Heads that disagree with the session index send latest the long way, which
    gives the right answer: the table can cost time, never a wrong record."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        first = save_new(store, session="s")
        newest = save_new(store, session="s", parent=first)
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute(damage)
        assert store.latest(session="s") == newest
        assert store.latest(session="absent") is None
        assert store.latest(workflow=newest.workflow, session="s") == newest


def test_a_row_moved_to_another_session_is_caught_by_its_head(tmp_path: Path) -> None:
    """The newest row's session column changed (index and row agree, the record does
    not): the head its save recorded differs from the index's answer, so latest takes
    the long way and raises rather than give the older record."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        first = save_new(store, session="s")
        newest = save_new(store, session="s", parent=first)
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("UPDATE checkpoints SET session = 'other' WHERE id = ?", (newest.id,))
        with pytest.raises(CheckpointCorrupt, match=newest.id):
            store.latest(session="s")


def test_schema_4_is_upgraded_with_heads_read_from_the_table(tmp_path: Path) -> None:
    """A schema-4 file opens upgraded to 5, each session's head filled in, and later
    saves move them."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        first = save_new(store, session="s")
        second = save_new(store, session="s", parent=first)
        other = save_new(store, session="t")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        drop_heads(db)
        db.execute("UPDATE actorflow_schema SET version = 4")
    with SQLiteStore(path) as store:
        assert heads(path) == {"s": second.id, "t": other.id}
        assert store.latest(session="s") == second
        third = save_new(store, session="s", parent=second)
        assert heads(path) == {"s": third.id, "t": other.id}
        assert store.verify() == []
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT version FROM actorflow_schema").fetchall() == [(5,)]


def _steps(store: SQLiteStore, read: Callable[[], object]) -> int:
    """SQLite virtual-machine steps (in tens) that ``read`` runs on this thread's
    connection: a count of the work done, not a time."""
    db = store._connections.conn()
    count = 0

    def step() -> int:
        nonlocal count
        count += 1
        return 0

    db.set_progress_handler(step, 10)
    try:
        read()
    finally:
        db.set_progress_handler(None, 10)
    return count


def test_reads_of_an_old_session_do_not_grow_with_the_records_saved_after_it(
    tmp_path: Path,
) -> None:
    """latest and list of the first session written, and latest of a session with no
    record, do as much work after 400 more sessions were saved as before them."""
    with SQLiteStore(tmp_path / "s.db") as store:
        first = save_new(store, session="old")
        save_new(store, session="old", parent=first)
        reads: dict[str, Callable[[], object]] = {
            "latest": lambda: store.latest(session="old"),
            "latest with its workflow": lambda: store.latest(
                workflow=first.workflow, session="old"
            ),
            "list": lambda: store.list(session="old"),
            "history": lambda: store.session_history("old"),
            "latest of nothing": lambda: store.latest(session="absent"),
        }
        before = {name: _steps(store, read) for name, read in reads.items()}
        for n in range(400):
            save_new(store, session=f"later-{n}", chunks={})
        after = {name: _steps(store, read) for name, read in reads.items()}
    assert after == pytest.approx(before, abs=10), (before, after)  # 100 steps


def test_the_last_record_saved_is_the_head_even_with_an_older_id(tmp_path: Path) -> None:
    """A record saved with an older id (another host's clock behind) is its session's
    head, the last saved; latest still gives the newest id, the long way."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        first = save_new(store, session="s")
        behind, blobs = make_checkpoint(session="s", parent=first)  # its id first
        ahead = save_new(store, session="s", parent=first)
        store.save(behind, blobs)
        assert behind.id < ahead.id
        assert heads(path) == {"s": behind.id}
        assert store.latest(session="s") == ahead
        assert store.list(session="s") == [first, behind, ahead]
