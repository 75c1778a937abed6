"""``actorflow serve`` as a user starts it: a real process serving on 127.0.0.1."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

import actorflow as af
from actorflow.cli import main
from actorflow.serve import Server, ServiceApp
from tests.serve.conftest import build
from tests.support.signals import cli_child

pytestmark = pytest.mark.timeout(90)


def test_serve_makes_its_store_where_none_is_yet_and_says_so(tmp_path: Path) -> None:
    """The documented first command, ``actorflow serve app:build --store runs.db``, on
    a machine where ``runs.db`` does not exist yet: the store is made, and said."""
    path = tmp_path / "runs.db"
    argv = ["serve", "tests.serve.conftest:build", "--store", str(path), "--port", "0"]
    with cli_child(*argv) as child:
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert url, line
        assert f"created a new, empty store at {path}" in child.stderr.readline()
        with httpx.Client(base_url=url.group(0), timeout=30) as client:
            done = client.post("/runs/wait", json={"input": {"id": 1, "items": ["a"]}})
            assert done.json() == {"outputs": ["a"]}, done.text
    assert path.is_file()


def test_serve_refuses_a_folder_that_is_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder is never made a store by ``serve``: a typo there must not start an
    empty service in someone's home directory."""
    (tmp_path / "notes.txt").write_text("mine")
    argv = ["serve", "tests.serve.conftest:build", "--store", str(tmp_path), "--port", "0"]
    assert main(argv) != 0
    assert "not an actorflow FileStore" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_run_whose_worker_was_killed_is_joined_on_another_as_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker process is killed in the middle of a run: another worker on the same
    store, asked to join that run, follows it in the store until the dead worker's lease
    has expired, then answers with what it did and an error saying it was lost."""
    path = tmp_path / "runs.db"
    monkeypatch.setenv("ACTORFLOW_TEST_GATE", "shut")  # its ticker holds at tick 5
    argv = ["serve", "tests.serve.conftest:build", "--store", str(path), "--port", "0"]
    with cli_child(*argv) as child:
        assert child.stdout is not None
        url = re.search(r"http://127\.0\.0\.1:\d+", child.stdout.readline())
        assert url
        with httpx.Client(base_url=url.group(0), timeout=30) as client:
            client.post(
                "/threads/t1/runs/wait", json={"input": {"id": 1}, "if_not_exists": "create"}
            )
            body = {"input": 0, "stream_mode": "events"}
            with client.stream("POST", "/threads/t1/runs/stream", json=body) as stream:
                lines = stream.iter_lines()
                assert next(lines) == "event: metadata"
                run_id = json.loads(next(lines).removeprefix("data: "))["run_id"]
                outputs = 0
                while outputs < 5:  # ticks 0-4 are out: the run holds at tick 5
                    outputs += '"event":"output"' in next(lines)
                child.kill()
        child.wait(timeout=30)
    with (
        build() as wf,
        af.SQLiteStore(str(path)) as store,
        Server(ServiceApp(wf, store)) as other,
        httpx.Client(base_url=other.url, timeout=30) as client,
    ):
        joined = client.get(f"/threads/t1/runs/{run_id}/join").json()
        # Output 4 was seen live: the cut before its superstep, holding 0-3, was stored.
        stored = joined["outputs"]
        assert stored in ([0, 1, 2, 3], [0, 1, 2, 3, 4]), joined
        assert joined["__error__"]["error"] == "RunLost", joined
        assert client.get(f"/threads/t1/runs/{run_id}").json()["status"] == "error"
