"""A probe, not a figure: what checkpointing an inner run at every barrier costs a
sub-workflow delivery.

The inner run of a ``WorkflowExecutor`` writes a cut at each of its barriers (into the
delivery's private ``MemoryStore``), so an inner run that fails leaves a halt cut with
the results of every inner superstep's effects, and the parent's restart calls none
of them again. This measures that against the inner run checkpointed only when idle
(what it did before): one delivery of a sub-workflow whose single executor loops 11
inner supersteps, median of rounds alternating the two policies.

Run: ``python -m bench.subworkflow_cuts``. Measured on 2 cores: 3.3-3.4 ms idle only against
4.0-4.3 ms at every barrier a delivery (about +0.07 ms an inner superstep).
"""

from __future__ import annotations

import statistics
import time

import actorflow as af
from actorflow.runtime import _subworkflow

ROUNDS = 5
DELIVERIES = 100


class Loop(af.Executor):
    """Sends n + 1 to itself until 10, then outputs it: 11 inner supersteps."""

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        if n < 10:
            ctx.send(n + 1)
        else:
            ctx.output(n)


def _ms_per_delivery(policy: af.CheckpointPolicy) -> float:
    _subworkflow._INNER_POLICY = policy
    inner = af.WorkflowBuilder("inner", start=Loop("loop")).add_edge("loop", "loop").build()
    sub = af.WorkflowExecutor(inner, "sub", outputs="output")
    outer = af.WorkflowBuilder("outer", start=sub).build()
    with inner, outer, outer.session("s") as session:
        session.run(0)  # warm-up
        started = time.perf_counter()
        for _ in range(DELIVERIES):
            session.run(0)
        return (time.perf_counter() - started) / DELIVERIES * 1000


def main() -> None:
    every = _subworkflow._INNER_POLICY
    lanes = {"every barrier": every, "idle only": af.CheckpointPolicy(on_idle_only=True)}
    samples: dict[str, list[float]] = {name: [] for name in lanes}
    try:
        for _ in range(ROUNDS):
            for name, policy in lanes.items():
                samples[name].append(_ms_per_delivery(policy))
    finally:
        _subworkflow._INNER_POLICY = every
    for name, values in samples.items():
        print(f"{name:>13}: {statistics.median(values):.2f} ms a delivery (11 inner supersteps)")


if __name__ == "__main__":
    main()
