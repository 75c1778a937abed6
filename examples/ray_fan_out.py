"""A CPU-bound fan-out on Ray, checkpointed to SQLite, with a worker killed mid-run.

Two workers each burn ~20 ms of pure-Python CPU per round; on threads the GIL runs
them one at a time, on Ray each is a process of its own and they run in parallel.
In round 3 one worker's process is killed with SIGKILL in the middle of its step:
the supervisor restores that executor from its last good state on a fresh Ray
worker and re-runs only it, and the run ends with the outputs of a run without the
kill. The light executors (source, gather, again) only route and count: they run
on threads of this process (``on_driver``), which spares each of their supersteps
a Ray round trip. Needs ``pip install 'actorflow[ray]'``; starts a local Ray on
127.0.0.1 only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import actorflow as af
from actorflow.testing import inject_fault

ROUNDS = 6
WORKERS = 2


def burn(seed: int) -> int:
    """~20 ms of pure-Python work (the GIL is held the whole time)."""
    total = seed
    for i in range(300_000):
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
        self.done = 0

    @af.handler
    def on_round(self, round: int, ctx: af.Context) -> None:
        self.done += 1
        ctx.send(burn(round * 1000 + self.offset))


class Gather(af.Executor):
    @af.handler
    def on_results(self, results: list[int], ctx: af.Context) -> None:
        total = sum(results) % 1_000_003
        ctx.output(total)
        ctx.send(total)


class Again(af.Executor):
    """Starts the next round until ROUNDS are done."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.round = 0

    @af.handler
    def on_total(self, total: int, ctx: af.Context) -> None:
        self.round += 1
        if self.round < ROUNDS:
            ctx.send(self.round)


def build(backend: af.ActorBackend | None = None) -> af.Workflow:
    workers = [Cruncher(f"cruncher-{i}", i) for i in range(WORKERS)]
    builder = af.WorkflowBuilder(
        "ray-fan-out", start=Source("source"), restart=af.RestartPolicy(max_restarts=3)
    )
    builder.add_fan_out("source", workers)
    builder.add_fan_in([w.id for w in workers], Gather("gather"))
    builder.add_edge("gather", Again("again"))
    builder.add_edge("again", "source")
    return builder.build(backend=backend)


CRUNCH_STEP = 2 + 4 * 2
"""Supersteps cycle source, crunchers, gather, again: the crunchers' step of round 3."""


def main() -> None:
    with build() as wf:
        expected = wf.run(0).outputs

    backend = af.RayBackend(
        init={"num_cpus": 2, "object_store_memory": 256 * 2**20, "log_to_driver": False},
        on_driver=["source", "gather", "again"],
    )
    backend.start()  # on the main thread, so Ray installs its signal handlers
    with tempfile.TemporaryDirectory() as tmp, af.SQLiteStore(Path(tmp) / "runs.db") as store:
        with build(backend) as wf, wf.session("fan-out", store=store) as session:
            # cruncher-1's worker process SIGKILLs itself in round 3, after its handler ran.
            inject_fault(session, "cruncher-1", CRUNCH_STEP, "kill")
            result = session.run(0)
        latest = store.latest(session="fan-out")
    backend.shutdown()
    restarted = [e for e in result.events if isinstance(e, af.RunRestartedEvent)]
    print(f"outputs on threads: {expected}")
    print(f"outputs on Ray:     {result.outputs}")
    print(f"restarted: {[(e.executor, e.superstep, e.error_type) for e in restarted]}")
    assert result.outputs == expected
    assert [(e.executor, e.error_type) for e in restarted] == [
        ("cruncher-1", "actorflow.errors.HostLost")
    ]
    assert latest is not None and latest.kind.value == "final"


if __name__ == "__main__":
    main()
