"""The guides' code blocks run as written, so the docs keep matching the code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)


@pytest.mark.parametrize(
    ("page", "index"),
    [
        (page, i)
        for page in ("requests.md", "running.md", "history.md", "effects.md")
        for i in range(len(_blocks(page)))
    ],
)
def test_every_code_block_runs(page: str, index: int, tmp_path: Path) -> None:
    """Each python block of the page runs in a fresh interpreter without error."""
    script = tmp_path / "block.py"
    script.write_text(_blocks(page)[index])
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
