"""The README's quickstart runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    """The first python block of README.md runs in a fresh interpreter and prints the documented output."""
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    script = tmp_path / "quickstart.py"
    script.write_text(code)
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
    assert (tmp_path / "runs.db").exists()
