"""Service: SSE clients that drop and reconnect, and the first event's latency.

The service (``actorflow.serve``: uvicorn in a thread of this process, a
``SQLiteStore`` in a temp dir, 127.0.0.1) serves a ticker workflow: one executor
that outputs n and sends n + 1 to itself, one superstep a tick, each tick ~2 ms.

- ``sse_reconnect``: 100 concurrent httpx (async) clients follow one run of 200
  ticks (60 with ``--quick``) on one session
  (``GET /threads/{id}/runs/{run}/stream``); each drops its connection after a
  random number of events (1-40), up to three times, and reconnects with
  ``Last-Event-ID`` set to the last id it saw. Figures: events lost and events
  repeated over all clients (target: 0 each), against the run's history.
- ``first_event_ms``: from sending ``POST /threads/{id}/runs/stream`` to receiving
  the run's first history event (``run_started``, stream mode ``events``), p50 over
  40 runs (15 with ``--quick``); target <= 20 ms. The floor is a ``GET /ok`` round
  trip on the same client and server; the ``metadata`` event's latency is a detail.

Run: ``python -m bench.serve [--quick]``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

import actorflow as af
from actorflow.serve import Server, ServiceApp
from bench._common import parse_options, report

CLIENTS = 100
TICK_S = 0.002


class Ticker(af.Executor):
    """Outputs n, then sends n + 1 to itself until the limit in its input's sign."""

    @af.handler
    def on_tick(self, n: int, ctx: af.Context[int]) -> None:
        time.sleep(TICK_S)  # a handler's work: the run lasts while clients come and go
        ctx.output(abs(n))
        if n < 0:
            ctx.send(n + 1, to="ticker")


def build() -> af.Workflow:
    """Input -k ticks k times (outputs k..0); input 0 outputs once."""
    return af.WorkflowBuilder("ticks", start=Ticker("ticker")).add_edge("ticker", "ticker").build()


async def _follow(client: httpx.AsyncClient, path: str, rng: random.Random) -> list[int]:
    """One client: the ids it received, dropping and reconnecting up to three times."""
    seen: list[int] = []
    drops = rng.randint(1, 3)
    while True:
        headers = {"Last-Event-ID": str(seen[-1])} if seen else {}
        budget = rng.randint(1, 40) if drops > 0 else None
        got = 0
        ended = False
        async with client.stream("GET", path, headers=headers) as response:
            async for line in response.aiter_lines():
                if line.startswith("id:"):
                    seen.append(int(line[3:]))
                    got += 1
                    if budget is not None and got >= budget:
                        break
            else:
                ended = True
        if ended:
            return seen
        drops -= 1


async def _reconnects(url: str, ticks: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=CLIENTS * 2, max_keepalive_connections=CLIENTS * 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        await client.post("/threads", json={"thread_id": "many"})
        body = {"input": -ticks, "stream_mode": "events"}
        run = (await client.post("/threads/many/runs", json=body)).json()
        path = f"/threads/many/runs/{run['run_id']}/stream"
        rng = random.Random(7)
        seeds = [rng.randrange(1 << 30) for _ in range(CLIENTS)]
        started = time.perf_counter()
        results = await asyncio.gather(
            *(_follow(client, path, random.Random(seed)) for seed in seeds)
        )
        elapsed = time.perf_counter() - started
        history = (await client.get("/threads/many/events")).json()
    expected = [e["seq"] for e in history if e["run_id"] == run["run_id"]]
    lost = sum(len(set(expected) - set(ids)) for ids in results)
    repeated = sum(len(ids) - len(set(ids)) for ids in results)
    out_of_order = sum(ids != sorted(ids) for ids in results)
    return {
        "lost": lost,
        "repeated": repeated,
        "out_of_order_clients": out_of_order,
        "events_per_client": len(expected),
        "events_received": sum(len(ids) for ids in results),
        "wall_s": elapsed,
    }


async def _first_events(url: str, runs: int) -> dict[str, list[float]]:
    first: list[float] = []
    meta: list[float] = []
    floor: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await client.post("/threads", json={"thread_id": "latency"})
        body = {"input": 0, "stream_mode": "events"}
        for i in range(runs + 3):  # the first three warm up
            t0 = time.perf_counter()
            await client.get("/ok")
            ok = time.perf_counter() - t0
            t0 = time.perf_counter()
            got_meta = got_first = 0.0
            async with client.stream("POST", "/threads/latency/runs/stream", json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("event: metadata") and not got_meta:
                        got_meta = time.perf_counter() - t0
                    if line.startswith("id:") and not got_first:
                        got_first = time.perf_counter() - t0
            if i >= 3:
                first.append(got_first * 1000)
                meta.append(got_meta * 1000)
                floor.append(ok * 1000)
    return {"first": first, "meta": meta, "floor": floor}


def bench_serve(quick: bool) -> None:
    """Measure both figures and print them."""
    ticks = 60 if quick else 200
    runs = 15 if quick else 40
    with tempfile.TemporaryDirectory() as tmp:
        store = af.SQLiteStore(str(Path(tmp) / "serve.db"))
        workflow = build()
        try:
            with Server(ServiceApp(workflow, store)) as server:
                found = asyncio.run(_reconnects(server.url, ticks))
                latency = asyncio.run(_first_events(server.url, runs))
        finally:
            workflow.close()
            store.close()
    for metric in ("lost", "repeated"):
        report(
            "serve",
            f"sse_reconnect_{metric}",
            found[metric],
            "events",
            floor=None,
            floor_unit="",
            floor_name="none: exactly-once delivery is absolute",
            target_op="<=",
            target_value=0,
            target_on="value",
            quick=quick,
            clients=CLIENTS,
            ticks=ticks,
            **{k: v for k, v in found.items() if k not in ("lost", "repeated")},
        )
    p50 = statistics.median(latency["first"])
    report(
        "serve",
        "first_event_ms",
        p50,
        "ms",
        floor=statistics.median(latency["floor"]),
        floor_unit="ms",
        floor_name="GET /ok round trip, same client and server",
        target_op="<=",
        target_value=20,
        target_on="value",
        samples=latency["first"],
        quick=quick,
        p90_ms=sorted(latency["first"])[int(len(latency["first"]) * 0.9) - 1],
        metadata_event_p50_ms=statistics.median(latency["meta"]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the service benchmark."""
    options = parse_options(__doc__ or "", argv)
    # A dropped client's last writes fail in the transport, which logs each one.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    bench_serve(options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
