"""``actorflow serve`` as a user starts it: a real process serving on 127.0.0.1."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from actorflow.cli import main
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
