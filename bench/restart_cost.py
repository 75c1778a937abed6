"""Restart cost: W1 with a fault injected every 100 supersteps, checkpointed to a MemoryStore.

Workload: the W1 cycle (A gets 0; A outputs n once n >= 1000, else sends n to B;
B sends n + 1 to A; 2001 supersteps per run), built with
``RestartPolicy(max_restarts=10_000, within_seconds=60)``, in a session on a
``MemoryStore`` (checkpoint after every superstep, the default policy). Before
each run, ``inject_fault(..., kind="exception")`` is called for every superstep
number that is a multiple of 100 within the run, on the executor that runs in it
(A at the run's odd supersteps, B at its even ones). Superstep numbers count
across the session's lineage, and a run is 2001 supersteps, so the faulted
executor alternates from one run to the next (all B in one run, all A in the
next): 20 faults per run. Every run must output ``[1000]``, the fault-free output,
and report exactly one ``RunRestartedEvent`` per injected fault, at its superstep
and executor.

Metric: wall time of one run (median of 15, after a warm-up) against the
**baseline**: the same workflow (same restart policy) in a session without a
store and without faults. Target: <= 1.5x. Sampled in turn with the baseline
and two intermediates, each in its own long-lived session, reported in
``details``: the same workflow on a ``MemoryStore`` without faults (the cost of
checkpointing alone), and W1 without a restart policy (``bench.w1``'s build: the
restart policy alone makes every executor snapshot its state each superstep).
Fifteen samples per lane: on a small VM a run's time swings by 2x from one moment
to the next (how long an idle vCPU takes to wake), and the median of five moved
the ratio by +-0.2 between identical runs.

Run: ``python -m bench.restart_cost [--quick]``.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import actorflow as af
from actorflow.testing import inject_fault
from bench._common import alternate_all, median, parse_options, report
from bench.w1 import LIMIT, A, B, build_w1

FAULT_EVERY = 100
"""A fault at every superstep whose (lineage) number is a multiple of this."""
POLICY = af.RestartPolicy(max_restarts=10_000, within_seconds=60)


def build() -> af.Workflow:
    """The W1 cycle with a restart policy that allows every injected fault."""
    builder = af.WorkflowBuilder("w1-restart", start=A("a"), max_supersteps=5000, restart=POLICY)
    builder.add_edge("a", B("b")).add_edge("b", "a")
    return builder.build()


class Lane:
    """One long-lived session and the runs sampled on it; ``faults`` injects before each run."""

    def __init__(self, name: str, session: af.Session, *, faults: bool = False) -> None:
        self.name = name
        self.session = session
        self.faults = faults
        self.superstep = 0
        """The session's lineage superstep after its last run."""
        self.restarts: list[int] = []
        self.injected: list[int] = []
        self.executors: Counter[str] = Counter()
        self.steps: list[int] = []

    def sample(self) -> float:
        """Inject this run's faults (untimed), time one run, check it; returns seconds."""
        planned = self._inject() if self.faults else {}
        gc.collect()
        started = time.perf_counter()
        result = self.session.run(0)
        elapsed = time.perf_counter() - started
        if result.outputs != [LIMIT]:
            raise AssertionError(
                f"{self.name}: the run produced {result.outputs}, expected [{LIMIT}]"
            )
        restarted = {
            (e.superstep, e.executor) for e in result.events if isinstance(e, af.RunRestartedEvent)
        }
        count = sum(1 for e in result.events if isinstance(e, af.RunRestartedEvent))
        if restarted != set(planned.items()) or count != len(planned):
            raise AssertionError(
                f"{self.name}: injected {len(planned)} faults {sorted(planned.items())[:3]}..., "
                f"saw {count} restarts {sorted(restarted)[:3]}..."
            )
        self.restarts.append(count)
        self.injected.append(len(planned))
        self.executors.update(executor for _, executor in restarted)
        self.steps.append(result.supersteps)
        self.superstep = result.events[-1].superstep
        return elapsed

    def _inject(self) -> dict[int, str]:
        """Faults for every multiple of ``FAULT_EVERY`` among the next run's supersteps."""
        first, last = self.superstep + 1, self.superstep + 2 * LIMIT + 1
        planned: dict[int, str] = {}
        for superstep in range(-(-first // FAULT_EVERY) * FAULT_EVERY, last + 1, FAULT_EVERY):
            # The run's own superstep 1, 3, 5, ... is A's; 2, 4, ... is B's.
            executor = "a" if (superstep - self.superstep) % 2 else "b"
            inject_fault(self.session, executor, superstep)
            planned[superstep] = executor
        return planned


def bench_restart_cost(quick: bool) -> None:
    """Measure the faulted, checkpointed W1 against the same workflow without store or faults."""
    repeats = 3 if quick else 15
    with build() as wf, build_w1() as plain_wf:
        sessions = [
            wf.session("baseline"),
            plain_wf.session("plain"),
            wf.session("store", store=af.MemoryStore()),
            wf.session("faulted", store=af.MemoryStore()),
        ]
        try:
            baseline, plain, store, faulted = (
                Lane("baseline (no store, no faults)", sessions[0]),
                Lane("W1 without a restart policy", sessions[1]),
                Lane("store, no faults", sessions[2]),
                Lane("store and faults", sessions[3], faults=True),
            )
            lanes = (baseline, plain, store, faulted)
            samplers: list[Callable[[], float]] = [lane.sample for lane in lanes]
            floors, plains, stores, faults = (
                [s * 1e3 for s in taken] for taken in alternate_all(samplers, repeats)
            )
        finally:
            for session in sessions:
                session.close()
    floor_ms, work_ms = median(floors), median(faults)
    store_ms, plain_ms = median(stores), median(plains)
    per_run = faulted.restarts[-repeats:]
    steps = faulted.steps[-1]
    details: dict[str, Any] = {
        "floor_samples": floors,
        "store_no_faults_ms": store_ms,
        "store_no_faults_ratio": store_ms / floor_ms,
        "store_no_faults_samples": stores,
        "no_restart_policy_ms": plain_ms,
        "no_restart_policy_ratio": plain_ms / floor_ms,
        "no_restart_policy_samples": plains,
        "faulted_vs_store_ratio": work_ms / store_ms,
        "faulted_vs_no_restart_policy_ratio": work_ms / plain_ms,
        "restarts_per_run": per_run,
        "faults_injected_per_run": faulted.injected[-repeats:],
        "restarts_by_executor": dict(sorted(faulted.executors.items())),
        "supersteps_per_run": steps,
        "checkpoint_us_per_superstep": (store_ms - floor_ms) * 1e3 / steps,
        "ms_per_restart": (work_ms - store_ms) / median(per_run),
        "output": LIMIT,
    }
    report(
        "restart_cost",
        "run_ms",
        work_ms,
        "ms",
        floor=floor_ms,
        floor_unit="ms",
        floor_name="the same workflow (same restart policy), session without store or faults",
        target_op="<=",
        target_value=1.5,
        samples=faults,
        quick=quick,
        **details,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the restart-cost benchmark."""
    options = parse_options(__doc__ or "", argv)
    bench_restart_cost(options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
