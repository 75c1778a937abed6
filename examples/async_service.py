"""An asyncio service running many workflows at once without blocking its loop.

A heartbeat coroutine keeps ticking while 50 runs (each with a handler that
blocks its own actor for 20 ms) are in flight. ``docs/running.md`` lists the
whole async API; ``docs/requests.md`` answers requests with ``arespond``.
"""

from __future__ import annotations

import asyncio
import time

import actorflow as af


class SlowLookup(af.Executor):
    @af.handler
    def on_key(self, key: str, ctx: af.Context[str]) -> None:
        time.sleep(0.02)  # a blocking client call: it stalls only this actor
        ctx.send(key.upper())


class Reply(af.Executor):
    @af.handler
    async def on_value(self, value: str, ctx: af.Context) -> None:
        await asyncio.sleep(0)
        ctx.output(f"reply:{value}")


def build() -> af.Workflow:
    return (
        af.WorkflowBuilder("lookup", start=SlowLookup("lookup"))
        .add_edge("lookup", Reply("reply"))
        .build()
    )


async def serve() -> None:
    ticks = 0
    stop = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.005)

    beat = asyncio.create_task(heartbeat())
    async with build() as wf:  # closed off the loop, like every actor start and stop
        results = await asyncio.gather(*(wf.arun(f"user-{i}") for i in range(50)))
        async for event in wf.astream("streamed"):
            if isinstance(event, af.OutputEvent):
                print("streamed output:", event.value)
        store = af.MemoryStore()
        # A stored session: its lease is taken and the store read off the loop.
        async with await wf.asession("user-42", store=store) as s:
            # A deadline on a run: when it passes, the run is cancelled (a handler
            # still running 0.25 s later is abandoned) and the session stays usable.
            async with asyncio.timeout(5):
                print("session output:", (await s.arun("again")).outputs)
        # Later (in this process or another): the session continues from its checkpoint.
        async with await wf.aresume(store, session="user-42") as s:
            print("resumed output:", (await s.arun("and again")).outputs)
    stop.set()
    await beat
    outputs = [r.outputs[0] for r in results]
    print(f"{len(outputs)} runs done; heartbeat ticked {ticks} times meanwhile")
    assert outputs[0] == "reply:USER-0"
    assert ticks > 5


if __name__ == "__main__":
    asyncio.run(serve())
