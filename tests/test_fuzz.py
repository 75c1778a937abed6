"""The shipped fuzzing, bounded: a few seconds per target, the saved corpus, the guard itself.

The long run is ``make fuzz`` (see docs/fuzzing.md); what it finds is saved under
``tests/fuzz_corpus/`` and replayed here from then on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TARGETS = [
    "wire",
    "snapshot",
    "record",
    "runtime",
    "memory-store",
    "file-store",
    "file-segments",
    "sqlite-store",
]


def _fuzz(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fuzz.run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=55,
        check=False,
    )


@pytest.mark.parametrize("target", TARGETS)
def test_bounded_fuzz_run_finds_nothing(target: str, tmp_path: Path) -> None:
    """Mutants of valid inputs for ``target``: only ActorflowErrors, no import, exec or slow run."""
    done = _fuzz("--targets", target, "--seconds", "1.5", "--save", str(tmp_path), "--hard", "20")
    saved = sorted(str(p) for p in tmp_path.rglob("*.bin"))
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}\nsaved: {saved}"
    line = next(line for line in done.stdout.splitlines() if line.startswith(target))
    tried = int(line.split()[1])
    assert tried >= 5, line  # it really ran (few inputs on a loaded machine: stores take ms each)


def test_saved_failures_are_replayed() -> None:
    """Every input a long run ever saved under tests/fuzz_corpus/ is now an ActorflowError or fine."""
    done = _fuzz("--replay", str(ROOT / "tests" / "fuzz_corpus"))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "replayed" in done.stdout


def test_the_guard_catches_each_kind_of_failure() -> None:
    """Planted-package code, imports, exec, subprocesses, foreign exceptions, slow runs and
    silent rollbacks are caught."""
    done = _fuzz("--self-test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok ") == 7, done.stdout
