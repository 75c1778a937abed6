"""A missing optional extra, and Ctrl-C, are one line each: no traceback.

A missing extra is simulated in a child process whose ``sitecustomize`` makes the
extra's modules fail to import (nothing is uninstalled).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import actorflow as af
from actorflow.cli import _checkpoints, main
from tests.support import python_path
from tests.support.signals import CLI_CHILD

_BLOCKER = '''
import sys

BLOCKED = {blocked!r}


class _Blocker:
    """Imports of BLOCKED packages fail, as they would were the packages not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Blocker())
'''


def _without(blocked: set[str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with the ``blocked`` packages unimportable."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BLOCKER.format(blocked=sorted(blocked)))
    env = {"PYTHONPATH": f"{site}:{python_path()}"}
    import os

    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
        env={**os.environ, **env},
        cwd=tmp_path,
    )


_RAY_BUILD = """
import actorflow as af

class Echo(af.Executor):
    @af.handler
    def on_int(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)

try:
    af.WorkflowBuilder("w", start=Echo("e")).build(backend=af.RayBackend())
except af.MissingExtra as exc:
    assert isinstance(exc, ImportError) and exc.extra == "ray"
    print(exc)
"""


def test_a_ray_backend_without_ray_names_the_extra(tmp_path: Path) -> None:
    """``RayBackend()`` without Ray: MissingExtra naming ``pip install 'actorflow[ray]'``,
    raised when the backend is made, before any run."""
    done = _without({"ray"}, tmp_path, "-c", _RAY_BUILD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "RayBackend needs the actorflow[ray] extra, which is not installed "
        "(no module named 'ray'): pip install 'actorflow[ray]'"
    )


def test_postgres_store_without_psycopg_names_the_extra(tmp_path: Path) -> None:
    """``af.PostgresStore`` without psycopg: MissingExtra naming actorflow[postgres]."""
    code = (
        "import actorflow as af\n"
        "try:\n"
        "    af.PostgresStore\n"
        "except af.MissingExtra as exc:\n"
        "    print(exc.extra, exc)\n"
    )
    done = _without({"psycopg", "psycopg_pool"}, tmp_path, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("postgres PostgresStore needs the actorflow[postgres] extra")


def test_the_cli_without_psycopg_is_one_line(tmp_path: Path) -> None:
    """A postgresql:// STORE without psycopg: one line naming the extra, exit 2."""
    done = _without(
        {"psycopg", "psycopg_pool"},
        tmp_path,
        "-m",
        "actorflow",
        "checkpoints",
        "list",
        "postgresql://u@127.0.0.1:1/db",
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'actorflow[postgres]'" in done.stderr


def test_the_ui_without_its_extra_is_one_line(tmp_path: Path) -> None:
    """``actorflow ui`` without Starlette: one line naming actorflow[ui], exit 2."""
    store = tmp_path / "runs.db"
    af.SQLiteStore(store).close()
    done = _without({"starlette", "uvicorn"}, tmp_path, "-m", "actorflow", "ui", str(store))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'actorflow[ui]'" in done.stderr


def test_ctrl_c_in_the_ui_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """Ctrl-C while ``actorflow ui`` serves: ``actorflow: interrupted`` and exit 130."""
    pytest.importorskip("uvicorn")
    store = tmp_path / "runs.db"
    af.SQLiteStore(store).close()
    # The child gives itself Python's SIGINT handler: this process may run with SIGINT
    # ignored (`nohup make test &`), which a child would otherwise inherit.
    child = subprocess.Popen(
        [sys.executable, "-c", CLI_CHILD, "ui", str(store), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().split(" on ", 1)[1].split()[0]
        # The socket listens before the line is printed: this waits until the server
        # serves, and returns once it has answered.
        with urllib.request.urlopen(url, timeout=30) as page:
            page.read()
        child.send_signal(signal.SIGINT)
        _out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130
    assert err == "actorflow: interrupted\n"


def test_ctrl_c_in_any_command_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KeyboardInterrupt anywhere under a command: one line, exit status 130."""

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_checkpoints, "open_store", interrupted)
    assert main(["checkpoints", "list", "runs.db"]) == 130
    assert capsys.readouterr().err == "actorflow: interrupted\n"
