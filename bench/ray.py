"""The Ray backend: W1, W2, W5 and restart cost with executors in Ray worker processes.

Starts one local Ray (2 CPUs, 256 MB object store, loopback only) and measures,
each against a floor taken in the same run, alternated with it:

- **w1_ray**: the W1 cycle (two executors, one message in flight, 2001 supersteps
  per run) on Ray. Floor: bare Ray actor calls with the same pattern: two Ray
  actors that decode and re-encode a small msgpack payload, called in turn, each
  call waiting for the previous one (one call per superstep). Target: >= 0.7x.
- **w2_ray**: W2 (source -> 8 workers -> fan-in aggregator, three supersteps) on
  Ray. Floor: one call to a Ray actor, then 8 calls to 8 actors at once, gathered,
  then one call: W2's pattern with bare calls. Target: >= 0.7x.
- **w5**: a fan-out of pure-Python CPU handlers (~20 ms each, 2 at a time) in
  rounds (source -> 2 crunchers -> fan-in gather -> source ...). Metric: handlers/s
  on Ray, the crunchers in workers and the light source and gather on the driver
  (``RayBackend(on_driver=...)``: a Ray round trip each would cost more than their
  work); floor: the same workflow on the thread backend, where the GIL runs one
  handler at a time. Target: >= 1.6x. ``details`` holds the ceiling: two bare Ray
  actors running the same handler body in parallel, round by round (what the
  machine gives two processes at that moment), and the same workflow with every
  executor in a worker.
- **ray_payload_<size>**: where Ray's object store pays. One call carrying a
  payload of <size> bytes to a bare Ray actor, passed inline as actorflow's hosts
  pass it (Ray itself moves arguments and results over 100 KiB through its object
  store), against ``ray.put`` first and the reference passed. A ratio below 1
  means inline is faster.
- **ray_first_run**: the first run (21 supersteps of the W1 cycle) of the first
  workflow built on a Ray that is already running: its classes checked on a worker
  and its workers started. Floor: its second run. Target: <= 1 s. ``details``: the
  same on another backend started with ``start(workers=2)`` (which returns once
  they run), and ``ray.init``'s own time.
- **restart_cost_ray**: a 401-superstep cycle checkpointed to a MemoryStore, with
  the worker of the executor in step 100, 200, 300 and 400 SIGKILLed mid-step
  (a new worker is started and restored each time). Floor: the same run without
  kills. Reported: the time of a run, and the cost per kill in ``details``.

Run: ``python -m bench.ray [--quick]``. Needs ``pip install 'actorflow[ray]'``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence
from typing import Any

import msgpack

import actorflow as af
from actorflow.testing import inject_fault
from bench._common import alternate, alternate_all, median, parse_options
from bench._common import report as _report
from bench.w1 import build_w1
from bench.w2 import EXPECTED, build

ROUNDS = 10
"""W5: rounds per run, each two ~20 ms handlers."""
BURN = 250_000
"""W5: loop iterations of one handler (~20 ms of pure Python here)."""
RESTART_LIMIT = 200
"""restart_cost_ray: the cycle stops at n = 200 (401 supersteps)."""


_STDOUT = sys.stdout


def report(*args: Any, **kwargs: Any) -> None:
    """``bench._common.report`` onto the real stdout: Ray prints its own warnings
    (a worker killed on purpose, ...) on stdout, which ``main`` sends to stderr."""
    with contextlib.redirect_stdout(_STDOUT):
        _report(*args, **kwargs)


# --- floors ---------------------------------------------------------------------------


class _Echo:
    """A bare Ray actor: decode a msgpack payload and encode it again."""

    def echo(self, payload: bytes) -> bytes:
        return bytes(msgpack.packb(msgpack.unpackb(payload)))


def _echo_actors(ray: Any, count: int) -> list[Any]:
    cls = ray.remote(max_restarts=0)(_Echo)
    actors = [cls.remote() for _ in range(count)]
    ray.get([a.echo.remote(b"\x00") for a in actors])
    return actors


def _cycle_floor(ray: Any, pair: list[Any], calls: int) -> float:
    """Calls/s: ``calls`` serial calls alternating between two actors."""
    payload = msgpack.packb(0)
    started = time.perf_counter()
    for i in range(calls):
        payload = ray.get(pair[i % 2].echo.remote(payload))
    return calls / (time.perf_counter() - started)


def _gather_floor(ray: Any, actors: list[Any], runs: int) -> float:
    """Runs/s of W2's pattern: one call, eight at once, one call."""
    payload = msgpack.packb(1)
    started = time.perf_counter()
    for _ in range(runs):
        ray.get(actors[0].echo.remote(payload))
        ray.get([a.echo.remote(payload) for a in actors[1:9]])
        ray.get(actors[9].echo.remote(payload))
    return runs / (time.perf_counter() - started)


# --- W5 -------------------------------------------------------------------------------


def burn(seed: int) -> int:
    """~20 ms of pure-Python CPU work (holds the GIL throughout)."""
    total = seed
    for i in range(BURN):
        total = (total * 31 + i) % 1_000_003
    return total


class Source(af.Executor):
    @af.handler
    def on_round(self, round: int, ctx: af.Context) -> None:
        ctx.send(round)


class Cruncher(af.Executor):
    def __init__(self, id: str, offset: int) -> None:
        super().__init__(id)
        self.offset = offset

    @af.handler
    def on_round(self, round: int, ctx: af.Context) -> None:
        ctx.send(burn(round * 10 + self.offset))


class Gather(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.rounds = 0

    @af.handler
    def on_results(self, results: list[int], ctx: af.Context) -> None:
        self.rounds += 1
        if self.rounds < ROUNDS:
            ctx.send(self.rounds)
        else:
            ctx.output(sum(results))


def build_w5(backend: af.ActorBackend | None = None) -> af.Workflow:
    crunchers = [Cruncher(f"c{i}", i) for i in range(2)]
    builder = af.WorkflowBuilder("w5", start=Source("source"))
    builder.add_fan_out("source", crunchers)
    builder.add_fan_in([c.id for c in crunchers], Gather("gather"))
    builder.add_edge("gather", "source")
    return builder.build(backend=backend)


class _Crunch:
    """A bare Ray actor running W5's handler body: the ceiling of parallel CPU work here."""

    def crunch(self, seed: int) -> int:
        return burn(seed)


def _cruncher_actors(ray: Any) -> list[Any]:
    cls = ray.remote(max_restarts=0)(_Crunch)
    actors = [cls.remote() for _ in range(2)]
    ray.get([a.crunch.remote(0) for a in actors])
    return actors


# --- restart cost ---------------------------------------------------------------------


class RA(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        if n >= RESTART_LIMIT:
            ctx.output(n)
        else:
            ctx.send(n)


class RB(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n + 1)


def build_restart(backend: af.ActorBackend) -> af.Workflow:
    policy = af.RestartPolicy(max_restarts=10_000, within_seconds=60)
    builder = af.WorkflowBuilder("restart", start=RA("a"), restart=policy, max_supersteps=5000)
    return builder.add_edge("a", RB("b")).add_edge("b", "a").build(backend=backend)


def _restart_run(session: af.Session, kills: bool) -> float:
    base = session._runs.driver.state.superstep
    if kills:
        for step in range(base + 100, base + 2 * RESTART_LIMIT + 2, 100):
            inject_fault(session, "a" if (step - base) % 2 else "b", step, "kill")
    started = time.perf_counter()
    result = session.run(0)
    elapsed = time.perf_counter() - started
    restarts = sum(isinstance(e, af.RunRestartedEvent) for e in result.events)
    assert result.outputs == [RESTART_LIMIT], result.outputs
    assert restarts == (4 if kills else 0), restarts
    return elapsed


class _Sink:
    def inline(self, payload: bytes) -> int:
        return len(payload)

    def by_ref(self, refs: list[Any]) -> int:
        import ray

        return len(ray.get(refs[0]))


def _payloads(ray: Any, quick: bool) -> None:
    """Inline arguments against ``ray.put`` + reference, by payload size."""
    sink = ray.remote(max_restarts=0)(_Sink).remote()
    ray.get(sink.inline.remote(b""))
    for size in (10_000, 100_000, 1_000_000, 8_000_000):
        data = b"\x01" * size
        calls = 5 if quick else 20

        def inline(data: bytes = data, calls: int = calls) -> float:
            started = time.perf_counter()
            for _ in range(calls):
                ray.get(sink.inline.remote(data))
            return (time.perf_counter() - started) / calls * 1000

        def put(data: bytes = data, calls: int = calls) -> float:
            started = time.perf_counter()
            for _ in range(calls):
                ray.get(sink.by_ref.remote([ray.put(data)]))
            return (time.perf_counter() - started) / calls * 1000

        floors, works = alternate(put, inline, 2 if quick else 5, warmup=1, warmup_s=0.0)
        report(
            f"ray_payload_{size}",
            "call_ms",
            median(works),
            "ms",
            floor=median(floors),
            floor_unit="ms",
            floor_name="ray.put, then the reference passed",
            target_op="<=",
            target_value=1.2,
            samples=works,
            quick=quick,
        )
    ray.kill(sink)


# --- main -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(__doc__ or "", argv)
    quick = options.quick
    repeats = 2 if quick else 5
    backend = af.RayBackend(
        init={
            "num_cpus": 2,
            "object_store_memory": 256 * 2**20,
            "log_to_driver": False,
            "include_dashboard": False,
        }
    )
    sys.stdout = sys.stderr  # the figures go to _STDOUT; whatever Ray prints, here
    started = time.perf_counter()
    backend.start()
    init_s = time.perf_counter() - started
    import ray

    # The first run of the first workflow built on the running cluster (its classes not
    # yet checked, no worker started): against its second run.
    with build_w1(backend) as wf:
        started = time.perf_counter()
        assert wf.run(990).outputs == [1000]
        first_s = time.perf_counter() - started
        started = time.perf_counter()
        assert wf.run(990).outputs == [1000]
        second_s = time.perf_counter() - started
    ahead = af.RayBackend()  # another backend on the same cluster, as a service starts one
    ahead.start(workers=2)
    with build_w1(ahead) as wf:
        started = time.perf_counter()
        assert wf.run(990).outputs == [1000]
        ahead_s = time.perf_counter() - started
    ahead.shutdown()
    report(
        "ray_first_run",
        "seconds",
        first_s,
        "s",
        floor=second_s,
        floor_unit="s",
        floor_name="the same workflow's second run",
        target_op="<=",
        target_value=1.0,
        target_on="value",
        quick=quick,
        ray_init_s=round(init_s, 2),
        started_ahead_s=round(ahead_s, 3),
        started_ahead="RayBackend.start(workers=2) (returns with them running), then built",
    )

    # W1 on Ray against serial bare calls.
    pair = _echo_actors(ray, 2)
    with build_w1(backend) as wf:
        steps = 2001

        def w1_sample() -> float:
            started = time.perf_counter()
            assert wf.run(0).outputs == [1000]
            return steps / (time.perf_counter() - started)

        floors, works = alternate(lambda: _cycle_floor(ray, pair, steps), w1_sample, repeats)
    report(
        "w1_ray",
        "supersteps_per_s",
        median(works),
        "supersteps/s",
        floor=median(floors),
        floor_unit="calls/s",
        floor_name="serial bare Ray actor calls, alternating between two actors",
        target_op=">=",
        target_value=0.7,
        samples=works,
        quick=quick,
        ray_init_s=round(init_s, 2),
    )

    # W2 on Ray against its pattern of bare calls.
    actors = _echo_actors(ray, 10)
    runs = 20 if quick else 100
    with build(backend=backend) as wf:

        def w2_sample() -> float:
            started = time.perf_counter()
            for _ in range(runs):
                assert wf.run(1).outputs == [EXPECTED]
            return runs / (time.perf_counter() - started)

        floors, works = alternate(lambda: _gather_floor(ray, actors, runs), w2_sample, repeats)
    report(
        "w2_ray",
        "runs_per_s",
        median(works),
        "runs/s",
        floor=median(floors),
        floor_unit="runs/s",
        floor_name="1 call, 8 calls at once, 1 call to bare Ray actors",
        target_op=">=",
        target_value=0.7,
        samples=works,
        quick=quick,
    )
    for actor in [*pair, *actors]:
        ray.kill(actor)

    # W5: CPU-bound handlers, 2 at a time, Ray against threads.
    handlers = 2 * ROUNDS
    mixed = af.RayBackend(on_driver=("source", "gather"))
    with build_w5() as on_threads, build_w5(mixed) as on_ray, build_w5(backend) as all_on_ray:

        def rate(wf: af.Workflow) -> float:
            started = time.perf_counter()
            wf.run(0)
            return handlers / (time.perf_counter() - started)

        crunchers = _cruncher_actors(ray)

        def bare() -> float:
            started = time.perf_counter()
            for r in range(ROUNDS):
                ray.get([c.crunch.remote(r * 10 + i) for i, c in enumerate(crunchers)])
            return handlers / (time.perf_counter() - started)

        floors, works, ceilings, workers_only = alternate_all(
            [lambda: rate(on_threads), lambda: rate(on_ray), bare, lambda: rate(all_on_ray)],
            repeats,
        )
        for actor in crunchers:
            ray.kill(actor)
    report(
        "w5",
        "handlers_per_s",
        median(works),
        "handlers/s",
        floor=median(floors),
        floor_unit="handlers/s",
        floor_name="the same workflow on the thread backend",
        target_op=">=",
        target_value=1.6,
        samples=works,
        quick=quick,
        handler_ms=round(1000 / median(floors), 1),
        bare_ray_handlers_per_s=round(median(ceilings), 2),
        bare_ray_vs_threads=round(median(ceilings) / median(floors), 3),
        on_driver=["source", "gather"],
        all_in_workers_handlers_per_s=round(median(workers_only), 2),
        all_in_workers_vs_threads=round(median(workers_only) / median(floors), 3),
    )
    mixed.shutdown()

    _payloads(ray, quick)

    # Restart cost: a worker SIGKILLed every 100 supersteps against no kills.
    store = af.MemoryStore()
    with (
        build_restart(backend) as wf,
        wf.session("clean", store=store) as clean,
        wf.session("killed", store=store) as killed,
    ):
        floors, works = alternate(
            lambda: _restart_run(clean, False),
            lambda: _restart_run(killed, True),
            repeats,
            warmup=1,
            warmup_s=0.0,
        )
    per_kill_ms = (median(works) - median(floors)) / 4 * 1000
    report(
        "restart_cost_ray",
        "run_ms",
        median(works) * 1000,
        "ms",
        floor=median(floors) * 1000,
        floor_unit="ms",
        floor_name="the same 401-superstep run without kills",
        target_op="<=",
        target_value=10.0,
        samples=[w * 1000 for w in works],
        quick=quick,
        kills_per_run=4,
        ms_per_kill=round(per_kill_ms, 1),
    )
    backend.shutdown()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
