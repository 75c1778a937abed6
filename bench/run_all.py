"""Run every actorflow benchmark, each in its own subprocess (so peak RSS is per benchmark).

stdout: one JSON object per figure, one per line (pipe it to a file or ``jq``).
stderr: a human summary table, then the wall time of each benchmark.

Usage::

    python bench/run_all.py                 # the full suite (effects_crash alone ~9 minutes)
    python bench/run_all.py --quick         # smoke mode: fewer repetitions (CI)
    python bench/run_all.py --only w1,w2    # some benchmarks (repeatable option)
    python bench/run_all.py --out bench/results/latest.jsonl
    python bench/run_all.py --pin 0         # every benchmark on CPU 0 only (less noise)

Exit status: 0 when every benchmark ran and printed its figures, 1 otherwise. A
figure that misses its target is reported (``"pass": false``), never an error:
benchmarks do not assert timings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

BENCHMARKS: dict[str, str] = {
    "w1": "W1 and W1-1MB: two-executor cycle, small and ~1 MB messages; W1 against a short and a sustained floor",
    "w2": "W2 and W2-io: fan-out to 8 workers, fan-in (plain and 20 ms blocking)",
    "scale": "Scale: fan-out to 1,000 workers, fan-in; wall time and peak RSS",
    "w3": "W3: 8-executor ring, 100 supersteps checkpointed (file, sqlite)",
    "w4": "W4: fresh setup resumes W3's last checkpoint and runs superstep 101",
    "w_encrypted": "Encryption at rest: W3 and W4 on an EncryptedStore vs the same store (file, sqlite)",
    "w_postgres": "W3 and W4 on PostgreSQL (needs ACTORFLOW_TEST_PG_DSN; make bench starts a server)",
    "restart_cost": "Restart cost: W1 checkpointed to a MemoryStore, a fault every 100 supersteps",
    "takeover": "Leases: takeover after kill -9 (default TTL), a lease's cost per save",
    "soak": "Soak: 100 sessions x 1,200 runs of a 3-step workflow on 8 threads; RSS, threads",
    "loop_lag": "Loop lag: 20 sessions x 10 runs on one asyncio loop (sqlite, memory); p50/p99/max",
    "busy_thread": "W1 beside a thread computing in Python, at the default GIL switch interval and at 0.5 ms",
    "serve": "Service: 100 SSE clients dropping and resuming one run (lost/repeated); first event latency",
    "stop_time": "Stop time: one Ctrl-C to process exit, a run hung in a handler (run, stream, arun)",
    "ui_sessions": "Inspector: the sessions page with 10,000 sessions on an SQLiteStore",
    "large_store": "Opening, resuming and listing sessions on an SQLiteStore of 10,000 sessions vs one of 6",
    "effects_cost": "Effects: a journaled ctx.effect per superstep vs the same call made directly (file, sqlite)",
    "effects_crash": "Effects under SIGKILL: duplicate rows, calls repeated after commit, repeats per kill",
    "replay": "Replay: 1,000 stored short sessions re-run against the code and compared",
}

TIMEOUT_S = {"full": 600.0, "quick": 120.0}
LONGER_S = {"effects_crash": 1500.0}
"""Benchmarks whose full run takes longer than ``TIMEOUT_S["full"]``: 1,000 SIGKILLs
take ~9 minutes on 2 cores."""


def run_one(
    name: str, quick: bool, pin: str | None
) -> tuple[list[dict[str, Any]], str | None, float]:
    """Run ``bench.<name>``; returns its records, an error text (or None) and its wall time."""
    cmd = [sys.executable, "-m", f"bench.{name}"] + (["--quick"] if quick else [])
    cmd += ["--pin", pin] if pin else []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    try:
        done = subprocess.run(
            cmd,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S["quick"] if quick else LONGER_S.get(name, TIMEOUT_S["full"]),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return [], f"timed out after {exc.timeout:g} s", time.perf_counter() - started
    elapsed = time.perf_counter() - started
    records: list[dict[str, Any]] = []
    error: str | None = None
    for line in done.stdout.splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            error = f"printed a line that is not JSON: {line[:200]!r}"
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        error = f"exited with {done.returncode}:\n{tail}"
    elif not records:
        error = "printed no figures"
    return records, error, elapsed


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def summary(records: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table of every figure."""
    header = ("bench", "metric", "value", "floor", "ratio", "target", "result")
    rows = [header]
    for r in records:
        result = {True: "pass", False: "MISS", None: "-"}[r.get("pass")]
        rows.append(
            (
                str(r.get("bench")),
                str(r.get("metric")),
                f"{_fmt(r.get('value'))} {r.get('unit', '')}",
                f"{_fmt(r.get('floor'))} {r.get('floor_unit', '')}",
                f"{r['ratio_vs_floor']:.2f}x" if r.get("ratio_vs_floor") is not None else "-",
                str(r.get("target")),
                result,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected benchmarks and print their figures."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke mode: fewer repetitions")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these (comma-separated or repeated): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--out", type=Path, help="also write the JSON lines to this file")
    parser.add_argument(
        "--pin",
        metavar="CPUS",
        help="run every benchmark on these CPUs only (e.g. 0): steadier ratios on small VMs",
    )
    args = parser.parse_args(argv)
    names = [n for spec in args.only for n in spec.split(",") if n] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")

    everything: list[dict[str, Any]] = []
    failures: list[str] = []
    timings: list[str] = []
    for name in names:
        if name == "w_postgres" and not os.environ.get("ACTORFLOW_TEST_PG_DSN"):
            timings.append(f"{name}: skipped (no PostgreSQL server: ACTORFLOW_TEST_PG_DSN unset)")
            continue
        records, error, elapsed = run_one(name, args.quick, args.pin)
        for record in records:
            print(json.dumps(record), flush=True)
        everything.extend(records)
        timings.append(f"{name}: {elapsed:.1f} s")
        if error is not None:
            failures.append(f"{name}: {error}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in everything))

    mode = ("quick" if args.quick else "full") + (
        f", pinned to CPUs {args.pin}" if args.pin else ""
    )
    misses = sum(1 for r in everything if r.get("pass") is False)
    print(f"\nactorflow benchmarks ({mode}): {len(everything)} figures", file=sys.stderr)
    print(summary(everything), file=sys.stderr)
    print(f"\nwall time per benchmark: {', '.join(timings)}", file=sys.stderr)
    print(f"targets missed: {misses} (reported, not asserted)", file=sys.stderr)
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
