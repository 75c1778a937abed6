"""``actorflow serve`` as a user starts it: a real process serving on 127.0.0.1."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from actorflow.cli import main
from tests.support.signals import CHILD_PRELUDE

pytestmark = pytest.mark.timeout(90)


def test_serve_makes_its_store_where_none_is_yet_and_says_so(tmp_path: Path) -> None:
    """The documented first command, ``actorflow serve app:build --store runs.db``, on
    a machine where ``runs.db`` does not exist yet: the store is made, and said."""
    path = tmp_path / "runs.db"
    code = (
        CHILD_PRELUDE + "import sys; from actorflow.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = ["serve", "tests.serve.conftest:build", "--store", str(path), "--port", "0"]
    child = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert url, line
        assert f"created a new, empty store at {path}" in child.stderr.readline()
        with httpx.Client(base_url=url.group(0), timeout=30) as client:
            done = client.post("/runs/wait", json={"input": {"id": 1, "items": ["a"]}})
            assert done.json() == {"outputs": ["a"]}, done.text
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
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
