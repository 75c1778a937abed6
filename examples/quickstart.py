"""Quickstart: two executors, a typed message, a one-off run and a session.

Each executor is an isolated actor; the Order an executor sends is a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import actorflow as af


@af.message  # registers the type for the wire (the decoding allowlist)
@dataclass
class Order:
    id: int
    items: list[str]


class Validate(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []  # private state, snapshotted as msgpack

    @af.handler
    def on_order(self, order: Order, ctx: af.Context[Order]) -> None:
        self.seen.append(order.id)
        ctx.send(order)  # to every out-edge target that handles Order


class Ship(af.Executor):
    @af.handler
    async def on_order(self, order: Order, ctx: af.Context[None]) -> None:  # sends nothing
        ctx.output(len(order.items))


def build() -> af.Workflow:
    return (
        af.WorkflowBuilder("orders", start=Validate("validate"))
        .add_edge("validate", Ship("ship"))
        .build()
    )


def main() -> None:
    with build() as wf:
        result = wf.run(Order(1, ["a"]))
        print(
            "one-off run:", result.outputs, result.status.value, f"{result.supersteps} supersteps"
        )
        with wf.session("customer-42") as session:
            session.run(Order(2, []))
            kinds = [type(e).__name__ for e in session.stream(Order(3, ["x", "y"]))]
            print("streamed events:", kinds)
        assert result.outputs == [1]


if __name__ == "__main__":
    main()
