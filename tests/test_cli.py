"""The actorflow command: checkpoints list/show/verify/prune, graph."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_file_store import write_layout_1  # tests/ is on sys.path

import actorflow as af
from actorflow.cli import main
from actorflow.storage import FileStore, SQLiteStore, encode_checkpoint
from actorflow.storage.conformance import make_checkpoint


class Count(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        self.seen.append(n)
        if n < 3:
            ctx.send(n + 1)
        else:
            ctx.output(self.seen)


def build() -> af.Workflow:
    return (
        af.WorkflowBuilder("cli", start=Count("a"))
        .add_edge("a", Count("b"))
        .add_edge("b", "a")
        .build()
    )


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    """A SQLite store holding one finished session."""
    path = str(tmp_path / "cli.db")
    store = af.SQLiteStore(path)
    with build() as wf, wf.session("s1", store=store) as s:
        s.run(0)
    store.close()
    return path


def test_list_show_verify_prune(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    """list prints one JSON line per checkpoint; show, verify and prune work on them."""
    assert main(["checkpoints", "list", store_path]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed[0]["kind"] == "entry"
    assert listed[-1]["kind"] == "final"
    assert main(["checkpoints", "show", store_path, listed[-1]["id"]]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert set(shown["executors"]) == {"a", "b"}
    assert main(["checkpoints", "verify", store_path]) == 0
    assert "0 problem(s)" in capsys.readouterr().out
    assert main(["checkpoints", "prune", store_path, "--session", "s1", "--keep", "1"]) == 0
    assert f"removed {len(listed) - 1}" in capsys.readouterr().out


def test_verify_reports_damage_with_a_nonzero_exit(
    store_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tampered blob makes verify print the problem and exit 1."""
    import sqlite3

    db = sqlite3.connect(store_path)
    db.execute("UPDATE blobs SET data = x'00' WHERE id = (SELECT min(id) FROM blobs)")
    db.commit()
    db.close()
    assert main(["checkpoints", "verify", store_path]) == 1
    assert "corrupt" in capsys.readouterr().out


def test_graph_prints_mermaid(tmp_path: Path) -> None:
    """graph MODULE:ATTR prints a Mermaid flowchart of the workflow."""
    out = subprocess.run(
        [sys.executable, "-m", "actorflow.cli", "graph", "test_cli:build"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("flowchart LR")
    assert "n_a" in out.stdout and "n_b" in out.stdout


def test_show_describes_a_partial_record_without_decoding_payloads() -> None:
    """A partial record's runtime is shown as sizes: its executor, sends, outputs, requests."""
    import msgpack

    from actorflow.cli import _describe_runtime

    body = msgpack.packb({"partial": "w1", "report": [[["z", -1, b"\x01\x02"]], [b"\x03"], []]})
    assert _describe_runtime(body) == {
        "partial": "w1",
        "sends": [["z", -1, "2 bytes"]],
        "outputs": 1,
        "requests": 0,
    }


def test_upgrade_converts_an_old_filestore_folder_and_is_a_no_op_on_current_stores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`checkpoints upgrade` is the command the layout-1 refusal names; it is idempotent."""
    old = tmp_path / "old"
    checkpoint, blobs = make_checkpoint(session="s")
    write_layout_1(old, {checkpoint.id: encode_checkpoint(checkpoint)}, blobs)
    assert main(["checkpoints", "list", str(old)]) == 2
    assert "checkpoints upgrade" in capsys.readouterr().err
    assert main(["checkpoints", "upgrade", str(old)]) == 0
    assert main(["checkpoints", "upgrade", str(old)]) == 0
    with FileStore(old) as store:
        assert store.list() == [checkpoint]
    db = tmp_path / "s.db"
    SQLiteStore(db).close()
    assert main(["checkpoints", "upgrade", str(db)]) == 0
    assert "schema is current" in capsys.readouterr().out


def test_prune_older_than_removes_by_age(
    store_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """prune --older-than keeps each session's newest cut; --whole-sessions drops idle sessions."""
    import dataclasses
    import time

    with SQLiteStore(store_path) as store:
        before = store.list(session="s1")
        aged, blobs = make_checkpoint(session="idle")
        store.save(dataclasses.replace(aged, created_at=time.time() - 9 * 86400), blobs)
    assert main(["checkpoints", "prune", store_path, "--older-than", "1h"]) == 0
    assert "removed 0 checkpoint(s)" in capsys.readouterr().out
    assert main(["checkpoints", "prune", store_path, "--older-than", "0s"]) == 0
    assert f"removed {len(before) - 1} checkpoint(s)" in capsys.readouterr().out
    with SQLiteStore(store_path) as store:
        assert store.list(session="s1") == before[-1:]
        assert store.sessions() == ["idle", "s1"]
    assert main(["checkpoints", "prune", store_path, "--older-than", "7d", "--whole-sessions"]) == 0
    assert "removed 1 checkpoint(s)" in capsys.readouterr().out
    with SQLiteStore(store_path) as store:
        assert store.sessions() == ["s1"]
        assert store.verify() == []


@pytest.mark.parametrize(
    "args",
    [
        ["--older-than", "7 days"],
        ["--older-than", "7d", "--session", "s1", "--keep", "1"],
        ["--session", "s1"],
        [],
    ],
)
def test_prune_refuses_unclear_arguments(store_path: str, args: list[str]) -> None:
    """prune needs exactly one of --session/--keep or --older-than, and an age with a unit."""
    with pytest.raises(SystemExit) as exc:
        main(["checkpoints", "prune", store_path, *args])
    assert exc.value.code != 0
    with SQLiteStore(store_path) as store:
        assert store.verify() == []
        assert len(store.list()) > 1


def test_postgres_uri_works_for_list_show_verify_prune(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every checkpoints command takes a postgresql:// URI (schema as ?schema=NAME)."""
    import pg

    with pg.schema() as (dsn, schema):
        store = af.PostgresStore(dsn, schema=schema)
        try:
            with build() as wf, wf.session("s1", store=store) as s:
                s.run(0)
            count = len(store.list())
        finally:
            store.close()
        uri = f"{dsn}?schema={schema}"
        assert main(["checkpoints", "list", uri, "--session", "s1"]) == 0
        listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert len(listed) == count
        assert main(["checkpoints", "show", uri, listed[-1]["id"]]) == 0
        assert json.loads(capsys.readouterr().out)["kind"] == "final"
        assert main(["checkpoints", "verify", uri]) == 0
        assert f"0 problem(s) in {count} checkpoint(s)" in capsys.readouterr().out
        assert main(["checkpoints", "prune", uri, "--session", "s1", "--keep", "1"]) == 0
        assert f"removed {count - 1} checkpoint(s)" in capsys.readouterr().out
        assert main(["checkpoints", "prune", uri, "--older-than", "0s", "--whole-sessions"]) == 0
        assert "removed 1 checkpoint(s)" in capsys.readouterr().out
        assert main(["checkpoints", "list", uri]) == 0
        assert capsys.readouterr().out == ""
