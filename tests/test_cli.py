"""The actorflow command: checkpoints list/show/verify/prune, graph."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.cli import main
from actorflow.storage import FileStore, SQLiteStore, encode_checkpoint
from actorflow.storage.conformance import make_checkpoint
from tests.storage.test_file_store import write_layout_1
from tests.support import ROOT


class Count(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
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


def test_show_of_an_unknown_id_says_where_the_ids_are(
    store_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``show`` of an id the store does not hold (``latest``, a typo) fails with one line
    that says how to list the ids."""
    assert main(["checkpoints", "show", store_path, "latest"]) != 0
    err = capsys.readouterr().err
    assert "no checkpoint 'latest' in this store" in err
    assert "`actorflow checkpoints list STORE`" in err
    assert "Traceback" not in err


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
        [sys.executable, "-m", "actorflow.cli", "graph", "tests.test_cli:build"],
        cwd=ROOT,
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

    from actorflow.cli._describe import describe_runtime as _describe_runtime

    body = msgpack.packb({"partial": "w1", "report": [[["z", -1, b"\x01\x02"]], [b"\x03"], []]})
    assert _describe_runtime(body) == {
        "partial": "w1",
        "sends": [["z", -1, "2 bytes"]],
        "outputs": 1,
        "requests": 0,
        "effects": 0,
        "statements": 0,
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


def test_prune_keep_0_deletes_a_session_only_when_nobody_holds_it(
    store_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--keep 0`` is the whole session: refused in one line while a session holds it
    open (its owner's next save would name deleted blobs), done once it is closed."""
    store = SQLiteStore(store_path)
    with build() as wf:
        owner = wf.resume(store, session="s1")
        try:
            assert main(["checkpoints", "prune", store_path, "--session", "s1", "--keep", "0"]) != 0
            err = capsys.readouterr().err
            assert "cannot delete it while it is open" in err and "Traceback" not in err
            assert store.list(session="s1")
        finally:
            owner.close()
    assert main(["checkpoints", "prune", store_path, "--session", "s1", "--keep", "0"]) == 0
    assert "all of session 's1'" in capsys.readouterr().out
    assert store.sessions() == []
    store.close()


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
    from tests.support import pg

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


def _cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``actorflow ARGS`` in a child process, and the seconds it took."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "actorflow", *args],
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
    )
    return done, time.monotonic() - started


def test_a_postgres_server_that_refuses_is_one_line_within_seconds() -> None:
    """Nothing listening at the URI: exit 2 within seconds, one line with the reason,
    and none of the connection pool's log lines."""
    done, seconds = _cli("checkpoints", "list", "postgresql://u@127.0.0.1:1/db")
    assert done.returncode == 2 and seconds < 10
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Connection refused" in done.stderr


def test_a_postgres_database_that_does_not_exist_is_named() -> None:
    """An unknown database: the server's own message, in one line, within seconds."""
    from tests.support import pg

    uri = pg.dsn().rsplit("/", 1)[0] + "/af_no_such_db"
    done, seconds = _cli("checkpoints", "list", uri)
    assert done.returncode == 2 and seconds < 10
    assert done.stderr.count("\n") == 1, done.stderr
    assert 'database "af_no_such_db" does not exist' in done.stderr


def test_a_mistyped_uri_option_is_named() -> None:
    """``?schem=x``: the option named, and the one meant, at once."""
    done, seconds = _cli("checkpoints", "list", "postgresql://u:pw@127.0.0.1:1/db?schem=x")
    assert done.returncode == 2 and seconds < 10
    assert "'schem'" in done.stderr and "?schema=NAME" in done.stderr
    assert ":pw@" not in done.stderr


@pytest.mark.parametrize("action", ["list", "verify", "show"])
def test_read_only_commands_never_create_a_postgres_schema(
    action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``?schema=typo``: exit 2, one line saying there is no actorflow store there, and
    no schema or table created."""
    import psycopg

    from tests.support import pg

    dsn, schema = pg.dsn(), pg.new_schema()
    extra = ["some-id"] if action == "show" else []
    try:
        assert main(["checkpoints", action, f"{dsn}?schema={schema}", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no actorflow store there" in err and schema in err
        with psycopg.connect(dsn, autocommit=True) as db:
            assert db.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone() == (None,)
    finally:
        pg.drop_schema(dsn, schema)


def test_read_only_commands_leave_a_foreign_sqlite_file_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SQLite file of another program: exit 2, one line, the file unchanged."""
    import sqlite3

    other = tmp_path / "notes.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    before = other.read_bytes()
    assert main(["checkpoints", "list", str(other)]) == 2
    assert "no actorflow tables" in capsys.readouterr().err
    assert other.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["notes.db"]


@pytest.mark.parametrize("action", ["list", "verify", "show", "prune"])
def test_commands_never_create_a_store_at_a_mistyped_path(
    action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing file, or an empty folder, is an error naming the path; nothing is written."""
    extra = {"show": ["some-id"], "prune": ["--session", "s", "--keep", "1"]}.get(action, [])
    missing = tmp_path / "nope.db"
    assert main(["checkpoints", action, str(missing), *extra]) == 2
    assert f"no checkpoint store at {missing}" in capsys.readouterr().err
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["checkpoints", action, str(empty), *extra]) == 2
    assert "not an actorflow FileStore" in capsys.readouterr().err
    assert list(empty.iterdir()) == []
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    assert main(["checkpoints", action, str(other), *extra]) == 2
    assert "neither a SQLite database nor a FileStore" in capsys.readouterr().err
    assert other.read_text() == "hello"


GRAPH_TARGETS = """
import actorflow as af

def needs(n: int) -> af.Workflow:
    raise AssertionError("never called")

def broken() -> af.Workflow:
    raise RuntimeError("no database")

number = 3
"""


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("nosuchmod:wf", "no module named 'nosuchmod'"),
        ("targets:needs", "needs arguments (n)"),
        ("targets:broken", "calling targets:broken() failed: RuntimeError: no database"),
        ("targets:number", "is 'int', not a Workflow"),
        ("targets:missing", "has no attribute 'missing'"),
        ("targets", "is not MODULE:ATTRIBUTE"),
    ],
)
def test_bad_graph_targets_are_one_line_errors(tmp_path: Path, target: str, expected: str) -> None:
    """Each mistake is one line on stderr with exit status 2, never a traceback."""
    (tmp_path / "targets.py").write_text(GRAPH_TARGETS)
    done = subprocess.run(
        [sys.executable, "-m", "actorflow", "graph", target],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("actorflow: graph: ") and expected in line


def test_python_dash_m_and_help_read_as_plain_text() -> None:
    """``python -m actorflow --help`` works and shows no reST markup."""
    for argv in (["--help"], ["checkpoints", "show", "--help"], ["graph", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "actorflow", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "usage: actorflow" in done.stdout
        assert "``" not in done.stdout and ":class:" not in done.stdout


def test_piping_into_head_prints_no_broken_pipe(store_path: str) -> None:
    """``actorflow checkpoints list STORE | head -1`` prints one line and no error."""
    store = af.SQLiteStore(store_path)
    with build() as wf, wf.session("s2", store=store) as s:
        for n in range(200):
            s.run(n % 3)
    store.close()
    done = subprocess.run(
        f"{sys.executable} -m actorflow checkpoints list {store_path} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert len(done.stdout.splitlines()) == 1
    assert "BrokenPipeError" not in done.stderr and "Traceback" not in done.stderr


@af.message
@dataclasses.dataclass
class Invoice:
    number: int


class Approver(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.asked: list[int] = []

    @af.handler
    def on_invoice(self, invoice: Invoice, ctx: af.Context[None]) -> None:
        self.asked.append(invoice.number)
        ctx.request(invoice, bool, request_id=f"approve-{invoice.number}")

    @af.response_handler
    def on_answer(self, invoice: Invoice, ok: bool, ctx: af.Context[None]) -> None:
        ctx.output(ok)


def test_show_lists_pending_requests_and_executor_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """show prints each pending request (id, type, decoded value) and each executor's state
    as digests and sizes, decoded with --decode."""
    path = str(tmp_path / "ask.db")
    store = af.SQLiteStore(path)
    with (
        af.WorkflowBuilder("ask", start=Approver("ap")).build() as wf,
        wf.session("s", store=store) as s,
    ):
        s.run(Invoice(7))
        checkpoint_id = s.last_checkpoint_id
    store.close()
    assert checkpoint_id is not None
    assert main(["checkpoints", "show", path, checkpoint_id]) == 0
    shown = json.loads(capsys.readouterr().out)
    [pending] = shown["runtime"]["pending"]
    assert pending["id"] == "approve-7"
    assert pending["executor"] == "ap"
    assert pending["response_type"] == "bool"
    assert pending["value"] == "Invoice(number=7)"  # registered in this process
    state = shown["executors"]["ap"]
    assert state["digests"] and state["bytes"] > 0 and "state" not in state
    assert main(["checkpoints", "show", path, checkpoint_id, "--decode"]) == 0
    decoded = json.loads(capsys.readouterr().out)["executors"]["ap"]["state"]
    assert decoded == {"asked": [7]}


def test_demo_runs_from_the_installed_package(tmp_path: Path) -> None:
    """``actorflow demo`` needs nothing outside the package (run far from the checkout)."""
    done = subprocess.run(
        [sys.executable, "-m", "actorflow", "demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "identical to the reference run: True" in done.stdout


FLOWS = """
from dataclasses import dataclass

import actorflow as af


@af.message
@dataclass
class Parcel:
    weight: int


class Keep(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.kept: list[Parcel] = []

    @af.handler
    def on_parcel(self, parcel: Parcel, ctx: af.Context[None]) -> None:
        self.kept.append(parcel)


def build() -> af.Workflow:
    return af.WorkflowBuilder("flows", start=Keep("keep")).build()


if __name__ == "__main__":
    store = af.SQLiteStore("runs.db")
    with build() as wf, wf.session("s", store=store) as s:
        s.run(Parcel(3))
        print(s.last_checkpoint_id)
    store.close()
"""


def test_import_and_graph_see_the_current_folder_alike(tmp_path: Path) -> None:
    """From the folder holding flows.py, ``show --decode --import flows`` imports it as
    ``graph flows:build`` does (the current folder is importable, as under ``python -m``)."""
    (tmp_path / "flows.py").write_text(FLOWS)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        # -P: the current folder is not put on the path by Python itself, as with the
        # installed `actorflow` script (whose folder is put there instead).
        return subprocess.run(
            [sys.executable, "-P", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=55,
            check=False,
        )

    made = run("flows.py")  # a script's own folder is on its path
    assert made.returncode == 0, made.stderr
    checkpoint_id = made.stdout.strip()
    graph = run("-m", "actorflow", "graph", "flows:build")
    assert graph.returncode == 0, graph.stderr
    shown = run(
        "-m", "actorflow", "checkpoints", "show", "runs.db", checkpoint_id, "--decode",
        "--import", "flows",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)["executors"]["keep"]["state"]
    assert state == {"kept": ["Parcel(weight=3)"]}, state
    missing = run(
        "-m", "actorflow", "checkpoints", "show", "runs.db", checkpoint_id, "--import", "flow"
    )
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "no module named 'flow'" in missing.stderr


GRAPH_FLOWS = """
import actorflow as af


class Pass(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n)


class Keep(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)


class Gather(af.Executor):
    @af.handler
    def on_nums(self, n: list[int], ctx: af.Context[None]) -> None:
        ctx.output(sum(n))


def is_big(n: int) -> bool:
    return n > 5


def build() -> af.Workflow:
    b = af.WorkflowBuilder('shop "eu"', start=Pass("src"))
    b.add_edge("src", Keep("big"), when=is_big)
    b.add_edge("src", Keep("small"), when=lambda n: n <= 5)
    b.add_switch(
        "src",
        [af.Case(is_big, Pass("s1")), af.Case(lambda n: n == 0, Keep("zero")), af.Default(Pass("s2"))],
    )
    b.add_fan_in(["s1", "s2"], Gather("gather"))
    return b.build()
"""


def _graph_of(tmp_path: Path, *extra: str) -> str:
    (tmp_path / "graph_flows.py").write_text(GRAPH_FLOWS)
    done = subprocess.run(
        [sys.executable, "-m", "actorflow", "graph", "graph_flows:build", *extra],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_graph_labels_conditional_edges_in_mermaid(tmp_path: Path) -> None:
    """Conditional edges are dashed and say what decides them: the predicate's name,
    ``when`` for a lambda, ``case i[: name]`` and ``default`` for a switch."""
    lines = _graph_of(tmp_path).splitlines()
    assert lines[0] == "flowchart LR"
    assert '    n_src(("src<br/>Pass"))' in lines
    assert '    n_big["big<br/>Keep"]' in lines
    for edge in (
        '    n_src -.->|"is_big"| n_big',
        '    n_src -.->|"when"| n_small',
        '    n_src -.->|"case 0: is_big"| n_s1',
        '    n_src -.->|"case 1"| n_zero',
        '    n_src -.->|"default"| n_s2',
        '    n_s1 -->|"fan_in"| n_gather',
        '    n_s2 -->|"fan_in"| n_gather',
    ):
        assert edge in lines, (edge, lines)


def test_graph_in_graphviz_dot(tmp_path: Path) -> None:
    """``--format dot``: a digraph named after the workflow (quotes escaped), the start
    executor in bold, conditional edges dashed with their labels."""
    text = _graph_of(tmp_path, "--format", "dot")
    lines = text.splitlines()
    assert lines[0] == 'digraph "shop \\"eu\\"" {' and lines[-1] == "}"
    assert '    "src" [label="src\\nPass", shape=ellipse, style=bold];' in lines
    assert '    "gather" [label="gather\\nGather"];' in lines
    for edge in (
        '    "src" -> "big" [label="is_big", style=dashed];',
        '    "src" -> "small" [label="when", style=dashed];',
        '    "src" -> "s1" [label="case 0: is_big", style=dashed];',
        '    "src" -> "zero" [label="case 1", style=dashed];',
        '    "src" -> "s2" [label="default", style=dashed];',
        '    "s1" -> "gather" [label="fan_in"];',
    ):
        assert edge in lines, (edge, lines)


def test_cancel_stops_a_run_another_process_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``actorflow cancel STORE SESSION`` finds the run going on in the session's stored
    history and asks its holder, through the store, to stop it: the run ends cancelled.
    With nobody holding the session, or no run going on, it says so and exits 1."""
    from tests.runtime.test_cancel_requests import ticking

    path = str(tmp_path / "runs.db")
    with ticking(limit=2000) as wf, SQLiteStore(path) as store, wf.session("s", store=store) as s:
        ended: list[af.Event] = []
        started = threading.Event()

        def run() -> None:
            for event in s.stream(0):
                if isinstance(event, af.OutputEvent) and event.value == 2:
                    started.set()  # its start is stored by now (a cut a superstep)
                ended[:] = [event]

        runner = threading.Thread(target=run)
        runner.start()
        assert started.wait(30)
        assert main(["cancel", path, "s"]) == 0
        assert "asked the holder of session 's' (pid " in capsys.readouterr().out
        runner.join(30)
        assert not runner.is_alive() and isinstance(ended[0], af.RunCancelledEvent)
        assert main(["cancel", path, "s"]) == 1
        assert "has no run going on" in capsys.readouterr().out
    assert main(["cancel", path, "s", "--run", "r1"]) == 1
    assert "nobody holds session 's'" in capsys.readouterr().out
