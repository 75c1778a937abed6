"""Scale: source -> 1,000 workers -> fan-in aggregator, one run.

Metric: wall time of one run after building (cold: the run starts the 1,000 host
actors), and the peak RSS of the process. Targets: <= 2 s and <= 150 MB.

Floors, measured in the same process after the workflow is closed (so they do not
inflate its peak RSS): 1,000 bare pykka actors started, asked at once and gathered
(cold), and asked again (warm). The RSS floor is the process's RSS before building
(interpreter, imports). A warm second run of the workflow is reported as a detail.

Run: ``python -m bench.scale [--quick]`` (the same work either way: one run).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench._common import GatherFloor, parse_options, peak_rss_mb, report, rss_mb
from bench.w2 import build, check

WIDTH = 1000


def main(argv: Sequence[str] | None = None) -> int:
    """Build, run once cold and once warm, measure RSS, then the floors."""
    options = parse_options(__doc__ or "", argv)
    base_rss = rss_mb()
    expected = sum(i * 2 for i in range(WIDTH))

    started = time.perf_counter()
    wf = build(WIDTH, name="scale")
    build_s = time.perf_counter() - started
    try:
        started = time.perf_counter()
        result = wf.run(1)
        cold_s = time.perf_counter() - started
        check(result, expected)
        started = time.perf_counter()
        check(wf.run(1), expected)
        warm_s = time.perf_counter() - started
        peak = peak_rss_mb()
    finally:
        started = time.perf_counter()
        wf.close()
        close_s = time.perf_counter() - started

    floor = GatherFloor(WIDTH)
    started = time.perf_counter()
    with floor:
        floor.run_once()
        floor_cold_s = time.perf_counter() - started
        floor_warm_s = floor.latency()
    report(
        "scale",
        "run_wall_s",
        cold_s,
        "s",
        floor=floor_cold_s,
        floor_unit="s",
        floor_name=f"start {WIDTH} bare pykka actors, ask all at once, get all",
        target_op="<=",
        target_value=2.0,
        target_on="value",
        quick=options.quick,
        peak_rss=peak,
        executors=WIDTH + 2,
        build_s=build_s,
        warm_run_s=warm_s,
        warm_floor_s=floor_warm_s,
        close_s=close_s,
    )
    details: dict[str, Any] = {
        "rss_before_build_mb": base_rss,
        "growth_mb": peak - base_rss,
        "kb_per_executor": (peak - base_rss) * 1024 / (WIDTH + 2),
    }
    report(
        "scale",
        "peak_rss_mb",
        peak,
        "MB",
        floor=base_rss,
        floor_unit="MB",
        floor_name="RSS of the process before building (interpreter and imports)",
        target_op="<=",
        target_value=150.0,
        target_on="value",
        quick=options.quick,
        peak_rss=peak,
        **details,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
