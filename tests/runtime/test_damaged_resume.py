"""A resume that meets a damaged blob names the session's newest intact checkpoint
and how to resume from it."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import actorflow as af
from actorflow.storage import EncryptedStore


class Sum(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        self.seen.append(n)
        ctx.output(sum(self.seen))


def _build() -> af.Workflow:
    return af.WorkflowBuilder("sum", start=Sum("sum")).build()


def _damage(path: Path, digest: str | None) -> None:
    """Change the stored bytes of one blob (every blob: None), so digests no longer match."""
    db = sqlite3.connect(path)
    try:
        changed = db.execute(
            "UPDATE blobs SET data = CAST(x'00' || data AS BLOB) WHERE ? IS NULL OR digest = ?",
            (digest, digest),
        ).rowcount
        db.commit()
    finally:
        db.close()
    assert changed >= 1


def _three_runs(path: Path) -> list[af.storage.Checkpoint]:
    with af.SQLiteStore(path) as store, _build() as wf, wf.session("s", store=store) as s:
        for n in (1, 2, 3):
            s.run(n)
        return store.list(session="s")


def test_a_damaged_blob_names_the_newest_intact_checkpoint(tmp_path: Path) -> None:
    """The newest state's blob damaged: CheckpointCorrupt names the newest checkpoint
    whose record and blobs verify, with the call that resumes from it, which works."""
    path = tmp_path / "runs.db"
    records = _three_runs(path)
    newest = records[-1]
    damaged = newest.executors["sum"][-1]
    intact = [r for r in records if damaged not in r.executors["sum"]][-1]
    _damage(path, damaged)
    with af.SQLiteStore(path) as store, _build() as wf:
        with pytest.raises(af.CheckpointCorrupt) as failed:
            wf.resume(store, session="s")
        message = str(failed.value)
        assert f"blob {damaged} is corrupt" in message
        assert f"newest intact checkpoint of session 's' is {intact.id}" in message
        call = f"wf.resume(store, session='s', checkpoint_id='{intact.id}')"
        assert call in message
        # The third run's entry: its input queued, the state of the two runs before.
        assert intact.kind is af.storage.CheckpointKind.ENTRY and intact.superstep == 2
        with wf.resume(store, session="s", checkpoint_id=intact.id) as s:
            assert s.run().outputs == [1 + 2 + 3]


def test_no_intact_checkpoint_says_so(tmp_path: Path) -> None:
    """Every blob damaged: the message says no checkpoint of the session is intact."""
    path = tmp_path / "runs.db"
    _three_runs(path)
    _damage(path, None)
    with (
        af.SQLiteStore(path) as store,
        _build() as wf,
        pytest.raises(af.CheckpointCorrupt) as failed,
    ):
        wf.resume(store, session="s")
    assert "no checkpoint of session 's' is intact" in str(failed.value)
    assert "restore the store from a backup" in str(failed.value)


def _damage_newest_record(path: Path) -> None:
    """Flip one byte of the newest record (bit rot): it fails its integrity check."""
    db = sqlite3.connect(path)
    try:
        [(rowid, record)] = db.execute(
            "SELECT rowid, record FROM checkpoints ORDER BY rowid DESC LIMIT 1"
        ).fetchall()
        damaged = bytearray(record)
        damaged[100] ^= 1
        db.execute("UPDATE checkpoints SET record = ? WHERE rowid = ?", (bytes(damaged), rowid))
        db.commit()
    finally:
        db.close()


def _plain(path: Path) -> af.SQLiteStore | EncryptedStore:
    return af.SQLiteStore(path)


def _sealed(path: Path) -> af.SQLiteStore | EncryptedStore:
    return EncryptedStore(af.SQLiteStore(path), keys={"k": b"k" * 32})


@pytest.mark.parametrize("opened", [_plain, _sealed])
def test_the_way_on_from_a_damaged_newest_record_works(
    opened: Callable[[Path], af.SQLiteStore | EncryptedStore], tmp_path: Path
) -> None:
    """The call the message names resumes, though the damaged record is still the
    session's newest; its history numbers go on past every entry that can be read."""
    path = tmp_path / "runs.db"
    with opened(path) as store, _build() as wf, wf.session("s", store=store) as s:
        for n in (1, 2, 3):
            s.run(n)
        readable = [e.seq for cp in store.list(session="s")[:-1] for e in cp.history]
    _damage_newest_record(path)
    with opened(path) as store, _build() as wf:
        with pytest.raises(af.CheckpointCorrupt) as failed:
            wf.resume(store, session="s")
        [intact] = re.findall(r"checkpoint_id='([^']+)'", str(failed.value))
        with wf.resume(store, session="s", checkpoint_id=intact) as s:
            assert s.run(4).outputs == [1 + 2 + 3 + 4]
        [damaged] = [line.split()[1].rstrip(":") for line in store.verify()]
        store.delete(damaged)
        numbers = [e.seq for e in store.session_history("s")]
    assert numbers == sorted(set(numbers)) and numbers[-1] > max(readable)
