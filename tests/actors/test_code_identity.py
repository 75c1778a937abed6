"""Code identity: classes are named the same whether their module ran as __main__ or was imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from tests.support import child_env, owners

OWNERS = str(Path(owners.__file__).resolve())
"""Run as a script by path: its classes live in ``__main__`` there."""

WAIT_S = 60


def _run(*args: str, cwd: Path | None = None, stdin: str = "") -> str:
    done = subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
        cwd=cwd,
        env=child_env(),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_script_session_resumes_where_the_module_is_imported(tmp_path: Path) -> None:
    """`python tests/support/owners.py` writes the session (classes in __main__); importing code resumes it."""
    db = str(tmp_path / "s.db")
    assert _run(OWNERS, "sqlite", db, "s1", "pause").strip() == "PAUSED"
    store = af.SQLiteStore(db)
    with owners.build() as wf, wf.resume(store, session="s1") as s:
        assert wf.describe()["executors"]["desk"]["type"] == "tests.support.owners.Desk"
        assert s.respond({"desk:1:0": True}).outputs == [[1, True]]
    store.close()


def test_an_imported_module_session_resumes_in_the_script(tmp_path: Path) -> None:
    """The reverse: code that imports the module writes, the script resumes and answers."""
    db = str(tmp_path / "s.db")
    store = af.SQLiteStore(db)
    with owners.build() as wf, wf.session("s1", store=store) as s:
        s.run(owners.Order(3))
    store.close()
    out = _run(OWNERS, "sqlite", db, "s1", "answer", stdin="go\n")
    assert out.splitlines()[-1] == "DONE [[3, True]]"


PACKAGE_MODULE = """
import actorflow as af
from actorflow.actors.codec._naming import stable_name

class Worker(af.Executor):
    @af.handler
    def on_int(self, n: int, ctx: af.Context) -> None:
        ctx.output(n)

if __name__ == "__main__":
    print(stable_name(Worker))
"""


@pytest.mark.parametrize("how", ["path", "module"])
def test_a_script_inside_a_package_is_named_by_its_import_path(tmp_path: Path, how: str) -> None:
    """`python pkg/jobs.py` and `python -m pkg.jobs` both name the class pkg.jobs.Worker."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(textwrap.dedent(PACKAGE_MODULE))
    args = [str(package / "jobs.py")] if how == "path" else ["-m", "pkg.jobs"]
    assert _run(*args, cwd=tmp_path).strip() == "pkg.jobs.Worker"


class Renamed(af.Executor):
    """tests.support.owners.Desk after a rename that kept its stored name."""

    __actorflow_name__ = "tests.support.owners.Desk"

    @af.handler
    def on_order(self, order: owners.Order, ctx: af.Context[Any]) -> None:
        ctx.request(order, bool)

    @af.response_handler
    def on_decision(self, order: owners.Order, ok: bool, ctx: af.Context[Any]) -> None:
        ctx.output(["renamed", order.number, ok])


class Other(Renamed):
    """A truly different class: no declared name, so its own."""

    __actorflow_name__ = ""


def test_a_declared_name_survives_a_rename_and_a_true_difference_says_how(tmp_path: Path) -> None:
    """__actorflow_name__ keeps a moved class resumable; a real difference is a GraphMismatch."""
    store = af.SQLiteStore(tmp_path / "s.db")
    with owners.build() as wf, wf.session("s1", store=store) as s:
        s.run(owners.Order(2))
    renamed = af.WorkflowBuilder("desk", start=Renamed("desk")).build()
    with renamed as wf, wf.resume(store, session="s1") as s:
        assert s.respond({"desk:1:0": False}).outputs == [["renamed", 2, False]]
    other = af.WorkflowBuilder("desk", start=Other("desk")).build()
    with (
        other as wf,
        pytest.raises(
            af.GraphMismatch,
            match=r"was a tests\.support\.owners\.Desk, now a .*__actorflow_name__",
        ),
    ):
        wf.resume(store, session="s1")
    store.close()
