"""Soak: one in-process service holding 100 sessions, 1,200 runs each of a 3-step workflow.

Workflow: start -> enrich -> count. ``start`` turns the run number into a
``Request``, ``enrich`` adds a word count, ``count`` keeps a per-session counter
(its private state, carried from run to run by the session) and outputs it. One
run is 3 supersteps; run k of a session must output exactly ``[k]``.

Driving: a fixed pool of 8 worker threads, each owning a slice of the sessions
(sticky routing: a session does one thing at a time) and interleaving their runs:
run k of every session in its slice, then run k + 1, ... This is what an
in-process service does: a bounded request pool (gunicorn ``gthread``, a
``ThreadPoolExecutor`` behind an async server) serving many long-lived sessions,
not one thread per session. The 1,200 runs are cut into 12 chunks; the first 4
are the warm-up, each of the other 8 is a sample. The warm-up is long enough for
every session to hold as much history as it keeps in memory (its last
``RECENT`` = 1,000 events, three a run: see ``runtime/supervisor/_history``), so
what is measured after it is growth that has no bound.

Figures:

- ``runs_per_s``: runs/s over all sessions (median of the chunks after the
  warm-up), against the **relay floor**: the same sessions, workers and
  interleaving on bare pykka actors, per session one relay actor that asks 3 echo
  actors in turn (4 threads per session, like a session's supervisor + 3 hosts).
  Floor and workload chunks alternate. Target: >= 0.5x (the suite's multi-actor
  target; no target was set for it).
- ``rss_end_mb``: RSS at the end against RSS after the warm-up (both after
  ``gc.collect()``). Target: <= 1.05x (growth under 5 %).
- ``threads_max``: the process's thread count, sampled every 0.25 s after the
  warm-up: max against min. Target: <= 1.0x (flat).
- ``correct_outputs``: runs whose outputs were exactly ``[k]``, against the runs
  made. Target: >= 1.0x (nothing lost, doubled or wrong; breakdown in details).

No checkpoint store: a ``MemoryStore`` keeps every checkpoint by design, which
would be retention, not a leak. ``--quick``: 20 sessions x 50 runs (5 chunks).

Run: ``python -m bench.soak [--quick]``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Never

import msgpack
import pykka

import actorflow as af
from actorflow.runtime.supervisor import RECENT
from bench._common import (
    Echo,
    alternate,
    median,
    parse_options,
    peak_rss_mb,
    report,
    rss_mb,
)
from bench._soak_watch import (
    Sampler,
    Tally,
    coarse,
    thread_count,
    threads_by_kind,
    wait_for_threads,
)

WORKERS = 8
"""Request threads of the simulated service (each owns a slice of the sessions)."""
HISTORY_PER_RUN = 3
"""History events a run of the workflow makes: its start, its output, its end."""


@dataclass(frozen=True, slots=True)
class Shape:
    """How big a soak is."""

    sessions: int
    runs: int
    """Runs per session."""
    chunks: int
    """The runs are made in this many chunks (floor and workload alternate per chunk)."""
    warmup: int
    """Chunks (of floor and workload each) before RSS and threads are taken as the baseline."""

    @property
    def per_chunk(self) -> int:
        """Runs per session in one chunk."""
        return self.runs // self.chunks


FULL = Shape(sessions=100, runs=1200, chunks=12, warmup=4)
QUICK = Shape(sessions=20, runs=50, chunks=5, warmup=2)
assert FULL.warmup * FULL.per_chunk * HISTORY_PER_RUN >= RECENT, "the warm-up fills the history"


# --- the workflow -------------------------------------------------------------------


@af.message
@dataclass
class Request:
    """What one run carries from start to count."""

    run: int
    text: str
    words: int = 0


class Start(af.Executor):
    """Turns the run number into a request."""

    @af.handler
    def on_run(self, n: int, ctx: af.Context[Request]) -> None:
        ctx.send(Request(n, f"request number {n} of this session"))


class Enrich(af.Executor):
    """Adds the word count."""

    @af.handler
    def on_request(self, request: Request, ctx: af.Context[Request]) -> None:
        request.words = len(request.text.split())
        ctx.send(request)


class Count(af.Executor):
    """Per-session state: counts the runs (and words) seen, outputs the run counter."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.count = 0
        self.words = 0

    @af.handler
    def on_request(self, request: Request, ctx: af.Context[Never]) -> None:
        self.count += 1
        self.words += request.words
        ctx.output(self.count)


def build() -> af.Workflow:
    """start -> enrich -> count."""
    builder = af.WorkflowBuilder("soak", start=Start("start"))
    builder.add_edge("start", Enrich("enrich")).add_edge("enrich", Count("count"))
    return builder.build()


# --- the floor ----------------------------------------------------------------------


class Relay(pykka.ThreadingActor):
    """The floor's session: asked with a payload, asks each stage in turn and returns the last answer."""

    def __init__(self, stages: list[pykka.ActorRef[Echo]]) -> None:
        super().__init__()
        self.stages = stages

    def on_receive(self, message: Any) -> Any:
        for stage in self.stages:
            message = stage.ask(message)
        return message


class FloorSession:
    """One relay actor and 3 echo actors: the bare-actor shape of a session's 4 threads."""

    def __init__(self) -> None:
        self.stages: list[pykka.ActorRef[Echo]] = [Echo.start() for _ in range(3)]
        self.relay = Relay.start(self.stages)

    def run(self, n: int) -> int:
        """One "run": a small msgpack frame through the 3 stages; returns what came back."""
        answer: int = msgpack.unpackb(self.relay.ask(msgpack.packb([n, "request"])))[0]
        return answer

    def stop(self) -> None:
        """Stop the 4 actors."""
        self.relay.stop()
        for stage in self.stages:
            stage.stop()


# --- bookkeeping --------------------------------------------------------------------


def bench_soak(quick: bool) -> None:
    """Soak the sessions (alternating with the relay floor) and print four records."""
    shape = QUICK if quick else FULL
    began = time.perf_counter()
    threads_start = thread_count()
    rss_start = rss_mb()
    wf = build()
    sessions = [wf.session(f"soak-{i:03d}") for i in range(shape.sessions)]
    tallies = [Tally() for _ in sessions]
    floor_sessions = [FloorSession() for _ in range(shape.sessions)]
    floor_bad: list[int] = []
    order = list(range(shape.sessions))
    slices = [order[w::WORKERS] for w in range(WORKERS)]
    pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="soak-worker")
    sampler = Sampler()
    chunk_index = {"work": 0, "floor": 0}
    seconds = {"work": 0.0, "floor": 0.0}
    baseline: dict[str, Any] = {}

    def work_slice(indices: list[int], first: int, last: int) -> None:
        for run in range(first, last + 1):
            for i in indices:
                try:
                    result = sessions[i].run(run)
                except Exception as exc:  # noqa: BLE001 - a failed run is a lost output, counted
                    tallies[i].failure(run, exc)
                else:
                    tallies[i].check(run, result)

    def floor_slice(indices: list[int], first: int, last: int) -> None:
        for run in range(first, last + 1):
            for i in indices:
                if floor_sessions[i].run(run) != run:
                    floor_bad.append(run)

    def chunk(kind: str) -> float:
        """One chunk of ``kind`` over every session, on the worker pool; returns runs/s."""
        index = chunk_index[kind]
        chunk_index[kind] += 1
        first = index * shape.per_chunk + 1
        last = first + shape.per_chunk - 1
        target = work_slice if kind == "work" else floor_slice
        gc.collect()
        started = time.perf_counter()
        for done in [pool.submit(target, s, first, last) for s in slices]:
            done.result()
        elapsed = time.perf_counter() - started
        seconds[kind] += elapsed
        if kind == "work" and chunk_index["work"] == shape.warmup:
            gc.collect()
            baseline.update(
                rss=rss_mb(),
                threads=thread_count(),
                objects=len(gc.get_objects()),
                kinds=threads_by_kind(),
                at_s=time.perf_counter() - began,
            )
            sampler.phase = "measure"
            sampler.sample()
        return shape.sessions * shape.per_chunk / elapsed

    sampler.start()
    try:
        floors, rates = alternate(
            lambda: chunk("floor"),
            lambda: chunk("work"),
            repeats=shape.chunks - shape.warmup,
            warmup=shape.warmup,
            warmup_s=0.0,
        )
        gc.collect()
        rss_end = rss_mb()
        threads_end = thread_count()
        objects_end = len(gc.get_objects())
        kinds_end = threads_by_kind()
        sampler.stop()
    finally:
        pool.shutdown()
        for session in sessions:
            session.close()
        wf.close()
        for floor_session in floor_sessions:
            floor_session.stop()
    peak = peak_rss_mb()
    threads_after_close = wait_for_threads(threads_start)
    wall_s = time.perf_counter() - began
    if floor_bad:
        raise AssertionError(f"the relay floor answered wrongly for runs {floor_bad[:5]}")

    measured = sampler.measured()
    thread_series = [n for _, _, n, _ in measured]
    rss_series = [r for _, _, _, r in measured]
    total_runs = shape.sessions * shape.runs
    common: dict[str, Any] = {
        "quick": quick,
        "sessions": shape.sessions,
        "runs_per_session": shape.runs,
        "workers": WORKERS,
        "chunks": shape.chunks,
        "warmup_chunks": shape.warmup,
        "wall_s": wall_s,
    }

    rate, floor_rate = median(rates), median(floors)
    report(
        "soak",
        "runs_per_s",
        rate,
        "runs/s",
        floor=floor_rate,
        floor_unit="runs/s",
        floor_name=(
            f"bare pykka: per session a relay actor asking 3 echo actors in turn, "
            f"same {WORKERS} workers and interleaving"
        ),
        target_op=">=",
        target_value=0.5,
        samples=rates,
        floor_samples=floors,
        overall_runs_per_s=total_runs / seconds["work"],
        work_s=seconds["work"],
        floor_s=seconds["floor"],
        ms_per_run=1e3 / rate,
        floor_ms_per_run=1e3 / floor_rate,
        runs_per_sample=shape.sessions * shape.per_chunk,
        **common,
    )
    rss_warm = float(baseline["rss"])
    report(
        "soak",
        "rss_end_mb",
        rss_end,
        "MB",
        floor=rss_warm,
        floor_unit="MB",
        floor_name=f"RSS after the warm-up ({shape.warmup} chunks), both after gc.collect()",
        target_op="<=",
        target_value=1.05,
        growth_pct=(rss_end - rss_warm) / rss_warm * 100,
        growth_mb=rss_end - rss_warm,
        rss_before_sessions_mb=rss_start,
        rss_max_after_warmup_mb=max(rss_series),
        peak_rss_mb=peak,
        gc_objects_after_warmup=baseline["objects"],
        gc_objects_end=objects_end,
        series_s_threads_rss=coarse(measured),
        **common,
    )
    report(
        "soak",
        "threads_max",
        float(max(thread_series)),
        "threads",
        floor=float(min(thread_series)),
        floor_unit="threads",
        floor_name="min thread count sampled after the warm-up (every 0.25 s)",
        target_op="<=",
        target_value=1.0,
        threads_before_sessions=threads_start,
        threads_after_warmup=baseline["threads"],
        threads_end=threads_end,
        threads_after_close=threads_after_close,
        sample_count=len(thread_series),
        by_kind_after_warmup=baseline["kinds"],
        by_kind_end=kinds_end,
        actor_threads_expected=f"{4 * shape.sessions} (sessions) + {4 * shape.sessions} (floor)",
        series_s_threads_rss=coarse(measured),
        **common,
    )
    totals = Tally()
    for tally in tallies:
        for name in (
            "runs",
            "ok",
            "received",
            "lost",
            "extra",
            "wrong",
            "odd_supersteps",
            "failed",
        ):
            setattr(totals, name, getattr(totals, name) + getattr(tally, name))
        if totals.first_error is None:
            totals.first_error = tally.first_error
    report(
        "soak",
        "correct_outputs",
        float(totals.ok),
        "outputs",
        floor=float(total_runs),
        floor_unit="outputs",
        floor_name="expected: one output per run, equal to the session's run number",
        target_op=">=",
        target_value=1.0,
        expected_outputs=total_runs,
        received_outputs=totals.received,
        lost_outputs=totals.lost + (total_runs - totals.runs),
        runs_without_output=totals.lost,
        extra_outputs=totals.extra,
        wrong_values=totals.wrong,
        runs_not_3_supersteps=totals.odd_supersteps,
        failed_runs=totals.failed,
        runs_made=totals.runs,
        first_error=totals.first_error,
        **common,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak."""
    options = parse_options(__doc__ or "", argv)
    bench_soak(options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
