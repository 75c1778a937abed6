"""What a source distribution carries, and what the conformance kit says without pytest."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _manifest_selection() -> set[str]:
    """The files MANIFEST.in adds to the sdist, by setuptools' own template processing
    (which reads the file tree, as building the sdist does)."""
    from setuptools.command.egg_info import FileList

    files = FileList()
    here = Path.cwd()
    os.chdir(ROOT)  # template paths are relative to the project root
    try:
        for line in (ROOT / "MANIFEST.in").read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                files.process_template_line(line)
    finally:
        os.chdir(here)
    return set(files.files)


def test_the_sdist_carries_what_its_tests_run() -> None:
    """tests/ runs bench/run_all.py (smoke test) and examples/: the sdist ships them all."""
    selected = _manifest_selection()
    needed = {
        "bench/run_all.py",
        "bench/_common.py",
        "bench/loop_lag.py",
        "tests/test_bench_smoke.py",
        "tests/conftest.py",
        "examples/run_all.py",
        "docs/running.md",
        "README.md",
    }
    assert needed <= selected, sorted(needed - selected)
    assert not any("__pycache__" in f or f.endswith(".db") for f in selected)


def test_the_conformance_kit_without_pytest_names_the_extra_to_install() -> None:
    """Importing actorflow.storage.conformance with no pytest raises ImportError naming
    actorflow[test], not a bare ModuleNotFoundError from deep inside the kit."""
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "try:\n"
        "    import actorflow.storage.conformance\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'actorflow[test]'" in done.stdout


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_for_setuptools() -> None:
    """A subpackage missing from [tool.setuptools] packages is left out of the wheel:
    `pip install .` would install an actorflow that cannot import itself."""
    setuptools = _pyproject()["tool"]["setuptools"]
    found = set()
    for name, path in setuptools["package-dir"].items():
        # followlinks=False: actorflow/actors (runtime, storage) link to the root folders,
        # which are walked under their own names.
        for folder, _dirs, files in os.walk(ROOT / path, followlinks=False):
            if "__init__.py" in files:
                relative = Path(folder).relative_to(ROOT / path).parts
                found.add(".".join((name, *relative)))
    assert found - set(setuptools["packages"]) == set(), (
        "list them under [tool.setuptools] packages"
    )


def test_the_version_is_written_once() -> None:
    """actorflow/_version.py is the version's one home: the package re-exports it and the
    build reads it from there, so a release changes one line."""
    import importlib.metadata

    import actorflow
    import actorflow._version

    project = _pyproject()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "actorflow._version.__version__"
    assert actorflow.__version__ == actorflow._version.__version__
    assert importlib.metadata.version("actorflow") == actorflow.__version__
    writers = [
        str(source.relative_to(ROOT))
        for folder in ("actorflow", "actors", "runtime", "storage")
        for source in (ROOT / folder).rglob("*.py")
        if "__version__ =" in source.read_text()
    ]
    assert writers == ["actorflow/_version.py"]


def _editable_options() -> list[str]:
    """The options the Makefile gives `pip install -e` (its one place)."""
    match = re.search(r"^EDITABLE := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "the Makefile names its editable install options in EDITABLE"
    return shlex.split(match.group(1))


@pytest.mark.slow
def test_mypy_strict_follows_the_development_install(tmp_path: Path) -> None:
    """The editable install `make` makes is one type checkers follow: `mypy --strict` on
    a user's file outside the checkout (the quickstart, copied) finds actorflow and its
    types, rather than failing on `import actorflow` as under an import-hook install."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "MYPYPATH"}}
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    done = subprocess.run(
        [*pip, "--no-deps", *_editable_options(), "-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        env=clean,
    )
    assert done.returncode == 0, done.stderr
    # actorflow's dependencies, from the running environment (so nothing is downloaded).
    import msgpack
    import pykka
    import structlog

    found = sorted({str(Path(m.__file__ or "").parent.parent) for m in (msgpack, pykka, structlog)})
    site = next((env_dir / "lib").glob("python*/site-packages"))
    (site / "zz_dependencies.pth").write_text("\n".join(found) + "\n")
    user = tmp_path / "project"
    user.mkdir()
    shutil.copy(ROOT / "examples" / "quickstart.py", user / "quickstart.py")
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-executable",
            str(python),
            "--cache-dir",
            str(tmp_path / "cache"),
            "quickstart.py",
        ],
        cwd=user,
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
        env=clean,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
