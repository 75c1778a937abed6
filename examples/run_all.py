"""Run every example as its own process; fail if any fails (used by `make test`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failed: list[str] = []
    for script in sorted(HERE.glob("*.py")):
        if script.name == "run_all.py":
            continue
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
        )
        status = "ok" if done.returncode == 0 else f"FAILED ({done.returncode})"
        print(f"example {script.name}: {status} in {time.perf_counter() - started:.1f}s")
        if done.returncode != 0:
            failed.append(script.name)
            print(done.stdout[-2000:], done.stderr[-4000:], sep="\n")
    print(f"{len(failed)} example(s) failed" if failed else "all examples passed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
