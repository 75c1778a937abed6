"""Smoke test of the benchmark suite: it runs and reports; timings are never asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run_all import BENCHMARKS

ROOT = Path(__file__).resolve().parent.parent

PG = bool(os.environ.get("ACTORFLOW_TEST_PG_DSN"))  # some figures need a PostgreSQL server

FIGURES: dict[str, set[tuple[str, str]]] = {
    "w1": {
        ("w1", "supersteps_per_s"),
        ("w1_sustained", "supersteps_per_s"),
        ("w1_1mb", "supersteps_per_s"),
        ("w1_1mb", "mb_per_s"),
    },
    "w2": {("w2", "runs_per_s"), ("w2_io", "latency_ms")},
    "scale": {("scale", "run_wall_s"), ("scale", "peak_rss_mb")},
    "w3": {
        ("w3_file", "ms_per_superstep"),
        ("w3_file", "bytes_on_disk_mb"),
        ("w3_sqlite", "ms_per_superstep"),
        ("w3_sqlite", "bytes_on_disk_mb"),
    },
    "w4": {("w4_file", "resume_plus_step_ms"), ("w4_sqlite", "resume_plus_step_ms")},
    "w_encrypted": {
        ("w3_encrypted_file", "ms_per_superstep"),
        ("w3_encrypted_sqlite", "ms_per_superstep"),
        ("w4_encrypted_file", "resume_plus_step_ms"),
        ("w4_encrypted_sqlite", "resume_plus_step_ms"),
    },
    "w_postgres": {
        ("w3_postgres", "ms_per_superstep"),
        ("w3_postgres", "bytes_stored_mb"),
        ("w4_postgres", "resume_plus_step_ms"),
        ("w4_postgres_fresh_store", "resume_plus_step_ms"),
    }
    if PG
    else set(),  # run_all skips it without a server
    "restart_cost": {("restart_cost", "run_ms")},
    "takeover": {
        *((f"takeover_{store}", "takeover_after_kill9_s") for store in ("file", "sqlite")),
        *((f"lease_save_{store}", "save_with_lease_us") for store in ("file", "sqlite")),
        *((f"lease_check_{store}", "fencing_check_us") for store in ("file", "sqlite")),
        *({("takeover_postgres", "takeover_after_kill9_s")} if PG else set()),
    },
    "soak": {
        ("soak", "runs_per_s"),
        ("soak", "rss_end_mb"),
        ("soak", "threads_max"),
        ("soak", "correct_outputs"),
    },
    "loop_lag": {
        (f"loop_lag_{store}", f"{q}_ms")
        for store in ("sqlite", "memory")
        for q in ("p50", "p99", "max")
    },
    "busy_thread": {
        ("busy_w1", "supersteps_per_s"),
        ("busy_w1_short_interval", "supersteps_per_s"),
    },
    "serve": {
        ("serve", "sse_reconnect_lost"),
        ("serve", "sse_reconnect_repeated"),
        ("serve", "first_event_ms"),
    },
    "stop_time": {(f"stop_{mode}", "ctrl_c_to_exit_ms") for mode in ("run", "stream", "arun")},
    "ui_sessions": {("ui_sessions", "sessions_page_s")},
    "large_store": {
        ("large_store", "open_new_session_ms"),
        ("large_store", "resume_oldest_session_ms"),
        ("large_store", "history_oldest_session_ms"),
    },
    "effects_cost": {
        ("effects_cost_file", "ms_per_superstep"),
        ("effects_cost_sqlite", "ms_per_superstep"),
    },
    "effects_crash": {
        ("effects_crash_sqlite", "violations"),
        ("effects_crash_file", "violations"),
        *({("effects_crash_postgres", "violations")} if PG else set()),
        ("effects_crash", "violations"),
    },
    "replay": {("replay", "seconds")},
}
"""The figures each benchmark of ``bench/run_all.py`` prints."""

KEYS = {
    "bench",
    "metric",
    "value",
    "unit",
    "floor",
    "floor_unit",
    "floor_name",
    "ratio_vs_floor",
    "target",
    "target_on",
    "target_op",
    "target_value",
    "pass",
    "samples",
    "peak_rss_mb",
    "quick",
    "details",
}


def test_every_benchmark_is_smoke_tested() -> None:
    """The benchmarks `bench/run_all.py` runs are the ones these tests know the figures of."""
    assert list(FIGURES) == list(BENCHMARKS)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_run_all_quick_prints_every_figure_as_json(name: str) -> None:
    """`bench/run_all.py --quick --only NAME` exits 0 and prints one well-formed JSON
    record per figure of the benchmark. One benchmark a test: the whole suite in smoke
    mode takes over a minute, and the parts of the test suite share them out."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_all.py"), "--quick", "--only", name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=140,  # one benchmark in smoke mode (run_all bounds it at 120 s)
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]
    assert {(r["bench"], r["metric"]) for r in records} == FIGURES[name]
    assert len(records) == len(FIGURES[name])
    for record in records:
        assert record.keys() >= KEYS, f"missing keys in {record}"
        if record["unit"] == "events":  # a count of lost or repeated events: 0 is its target
            assert record["value"] >= 0 and record["target_on"] == "value", record
            continue
        assert math.isfinite(record["value"]) and record["value"] > 0, record
        assert record["floor"] is not None and record["floor"] > 0, record
        assert record["ratio_vs_floor"] is not None and record["ratio_vs_floor"] > 0, record
        assert record["pass"] in (True, False), record
        assert record["target_op"] in (">=", "<="), record
        assert record["target_on"] in ("ratio_vs_floor", "value"), record
        assert record["quick"] is True
        assert record["peak_rss_mb"] > 0
    assert "targets missed" in done.stderr, "the human summary goes to stderr"
    assert f"{name}: " in done.stderr.split("wall time per benchmark:")[1], done.stderr


@pytest.mark.timeout(120)
def test_probes_run_and_print_their_breakdowns() -> None:
    """The probes behind the figures run and print what they measure: the machine's
    wake-up costs, a hand-off with and without spinning, and W4's store calls with the
    server's own share."""
    probes = [
        ("wake_latency", ["thread_start_us"]),
        ("spin_probe", ["probe", "hops_per_s", "cpu_us_per_hop"]),
    ]
    if PG:
        probes.append(("w4_postgres_probe", ["total_ms", "server_ms", "save_server_ms"]))
    for module, keys in probes:
        done = subprocess.run(
            [sys.executable, "-m", f"bench.{module}", "--quick"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=100,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        assert records, f"{module} printed nothing"
        for record in records:
            for key in keys:
                assert key in record, f"{module}: no {key} in {record}"
    if PG:
        assert {r["probe"] for r in records} == {"fresh_store", "warm_store"}
        assert all(r["server_ms"] > 0 for r in records)
