"""What a source distribution carries, and what the conformance kit says without pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _manifest_selection() -> set[str]:
    """The files MANIFEST.in adds to the sdist, by setuptools' own template processing
    (which reads the file tree, as building the sdist does)."""
    import os

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
