"""W4: resume W3's last checkpoint in a fresh setup and run one more superstep.

W3 is run once per store kind (untimed) to leave its 100-superstep session on disk.
Each repetition copies that store to a new temp dir (untimed: every repetition
resumes from exactly W3's last checkpoint) and makes a fresh setup: a new store
object, the workflow built anew (its executors constructed with their initial
items, then ``builder.build()``). Then ``wf.resume(store, session=...)`` and
``run(max_supersteps=1)``: superstep 101, checkpointed with durability sync, the
``SuperstepLimitExceeded`` caught.

Metric: median over ~10 repetitions of resume + one step (``wf.resume`` through the
end of ``run``). Target: <= 1.5x the floor. The setup phases (``open_store_ms``,
``make_blueprints_ms``, ``build_ms``), the all-inclusive ``with_setup_ms`` and the
untimed-in-total ``close_ms`` are details.

Floor, same process: read the state back by hand (decode every executor's msgpack
state file, as written by W3's floor) and write + fsync the one executor that
superstep 101 changes.

Run: ``python -m bench.w4 [--quick]``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

import msgpack

import actorflow as af
from bench._common import median, parse_options, report
from bench.w3 import (
    POLICY,
    RING,
    SESSION,
    STEPS,
    STORES,
    StoreKind,
    build_ring,
    close_store,
    fsync_floor,
    new_item,
    ring_members,
    run_ring,
    temp_dir,
)


def resume_once(kind: StoreKind, folder: str) -> dict[str, float]:
    """One timed fresh setup + resume + superstep 101; returns the phase times (s)."""
    t0 = time.perf_counter()
    store = kind.open(folder)
    t1 = time.perf_counter()
    members = ring_members()
    t1b = time.perf_counter()
    wf = build_ring(members)
    t2 = time.perf_counter()
    session = wf.resume(store, session=SESSION, checkpoint=POLICY)
    t3 = time.perf_counter()
    try:
        session.run(max_supersteps=1)
    except af.SuperstepLimitExceeded:
        pass
    else:
        raise AssertionError("superstep 101 should end at the limit (the token moves on)")
    t4 = time.perf_counter()
    session.close()
    wf.close()
    latest = store.latest(session=SESSION)
    close_store(store)
    t5 = time.perf_counter()
    if latest is None or latest.superstep != STEPS + 1:
        raise AssertionError(f"expected a checkpoint of superstep {STEPS + 1}, got {latest}")
    return {
        "open_store": t1 - t0,
        "make_blueprints": t1b - t1,
        "build": t2 - t1b,
        "resume": t3 - t2,
        "step": t4 - t3,
        "resume_plus_step": t4 - t2,
        "with_setup": t4 - t0,
        "close": t5 - t4,
    }


def floor_once(folder: str) -> float:
    """Seconds to decode every executor's floor state file and write + fsync the changed one."""
    started = time.perf_counter()
    states: list[dict[str, Any]] = []
    for i in range(RING):
        with open(os.path.join(folder, f"e{i}.bin"), "rb") as src:
            states.append(msgpack.unpackb(src.read()))
    holder = STEPS % RING
    states[holder]["items"].append(new_item(STEPS))
    data = msgpack.packb(states[holder], use_bin_type=True)
    with open(os.path.join(folder, f"e{holder}.next"), "wb") as out:  # W3's files stay as they are
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    """W4 on each store kind."""
    options = parse_options(__doc__ or "", argv)
    repeats = 3 if options.quick else 10
    with temp_dir("w4-floor-") as floor_dir:
        fsync_floor(floor_dir)  # W3's floor files: the state the floor resumes from
        for kind in STORES:
            with temp_dir(f"w4-{kind.name}-") as base:
                original = os.path.join(base, "w3")
                os.mkdir(original)
                with build_ring() as wf:
                    run_ring(wf, kind.open(original), original)
                phases: list[dict[str, float]] = []
                floors: list[float] = []
                for i in range(repeats + 1):  # the first is a warm-up
                    copy = os.path.join(base, f"rep{i}")
                    shutil.copytree(original, copy)
                    floor_s = floor_once(floor_dir)
                    times = resume_once(kind, copy)
                    shutil.rmtree(copy, ignore_errors=True)
                    if i:
                        phases.append(times)
                        floors.append(floor_s)
            totals = [p["resume_plus_step"] * 1e3 for p in phases]
            breakdown = {
                f"{k}_ms": median([p[k] for p in phases]) * 1e3
                for k in phases[0]
                if k != "resume_plus_step"
            }
            report(
                f"w4_{kind.name}",
                "resume_plus_step_ms",
                median(totals),
                "ms",
                floor=median(floors) * 1e3,
                floor_unit="ms",
                floor_name="decode every executor's msgpack state file, write + fsync the changed one",
                target_op="<=",
                target_value=1.5,
                target_on="ratio_vs_floor",
                samples=totals,
                quick=options.quick,
                floor_samples=[f * 1e3 for f in floors],
                **breakdown,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
