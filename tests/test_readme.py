"""The README's quickstart runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    """The first python block of README.md runs in a fresh interpreter and prints the documented
    output, and a second run on the same store continues the session's one lineage."""
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    # Twice on the same runs.db: the second run continues the session it stored
    # (one lineage), rather than failing or silently starting a second one.
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "[1]"
        assert "RunCompletedEvent" in lines
    import actorflow as af

    store = af.SQLiteStore(str(tmp_path / "runs.db"))
    try:
        roots = [cp.id for cp in store.list(session="customer-42") if cp.parent_id is None]
        assert len(roots) == 1, roots
    finally:
        store.close()


def test_readme_quickstart_passes_mypy_strict(tmp_path: Path) -> None:
    """The quickstart type-checks under ``mypy --strict`` exactly as written."""
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(script),
        ],
        cwd=README.parent,  # where mypy finds the package's sources, as in a checkout
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
