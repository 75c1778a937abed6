"""Fan-out to eight workers, fan-in to one aggregator that gets a single list."""

from __future__ import annotations

import actorflow as af


class Source(af.Executor):
    @af.handler
    def on_start(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n)


class Worker(af.Executor):
    def __init__(self, id: str, index: int) -> None:
        super().__init__(id)
        self.index = index

    @af.handler
    def on_number(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(self.index * n)


class Aggregate(af.Executor):
    @af.handler
    def on_all(self, values: list[int], ctx: af.Context) -> None:
        # One invocation with every worker's value, in the order the sources were given.
        ctx.output({"values": values, "sum": sum(values)})


def build() -> af.Workflow:
    workers = [Worker(f"worker-{i}", i) for i in range(8)]
    builder = af.WorkflowBuilder("fan-in", start=Source("source"))
    builder.add_fan_out("source", workers)
    builder.add_fan_in([w.id for w in workers], Aggregate("aggregate"))
    return builder.build()


def main() -> None:
    with build() as wf:
        [result] = wf.run(2).outputs
    print(result)
    assert result["sum"] == 56


if __name__ == "__main__":
    main()
