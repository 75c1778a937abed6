"""Service races: two workers of the service on one store, many clients on a few threads.

A real deployment runs several workers behind one address, so any request may reach
any worker while others change the same thread. This starts two workers (uvicorn on
127.0.0.1, one SQLite file) and clients that keep sending, to either worker, a mix of
requests on four thread ids: creates (both ``if_exists``, with and without an id),
runs (waited for, or in the background, each ``if_not_exists``), cancels, metadata
updates, reads of a thread, its state and its history, searches, forks and deletes.

A finding is an answer the API does not give by design (anything but 200, 201, 202,
204, 404, 409 and 422: a 5xx, say), a request that fails, a cancel (sent to either
worker, and waited for) that answers while its run still goes on, or a thread still
leased once every client stopped and every run ended.

Run: ``python -m torture.service_race --seconds 30 --seed 3``; ``tests/test_torture.py``
runs a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import actorflow as af
from actorflow.serve import Server, ServiceApp

__all__ = ["race"]

THREADS = ("t1", "t2", "t3", "t4")
CLIENTS = 12
EXPECTED = frozenset({200, 201, 202, 204, 404, 409, 422})
"""Answers the API gives by design when requests race (not found, conflict, refused)."""
ANSWERS: dict[int, int] = {}
"""Every answer's status, counted (what ``main`` prints: a race of only 404s races little)."""
SETTLE_S = 30.0
"""How long every run may take to end once the clients stopped."""


class Tally(af.Executor):
    """Counts what it got and outputs the count; a positive number also starts ticks."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen = 0

    @af.handler
    def on_number(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        ctx.output(self.seen)
        if n > 0:
            ctx.send(n)


class Tick(af.Executor):
    """Counts down to zero, one superstep a tick, so a run lasts long enough to race."""

    @af.handler
    def on_tick(self, n: int, ctx: af.Context[int]) -> None:
        time.sleep(0.002)
        if n > 1:
            ctx.send(n - 1, to="tick")


def build() -> af.Workflow:
    """The workflow both workers serve."""
    builder = af.WorkflowBuilder("service-race", start=Tally("tally"))
    builder.add_edge("tally", Tick("tick")).add_edge("tick", "tick")
    return builder.build()


async def _client(n: int, urls: list[str], stop: asyncio.Event, seed: int) -> list[str]:
    rng = random.Random(f"{seed}:{n}")
    found: list[str] = []
    async with httpx.AsyncClient(timeout=60) as client:
        while not stop.is_set():
            base, tid, op = rng.choice(urls), rng.choice(THREADS), rng.randrange(12)
            run: dict[str, Any] = {"input": rng.randrange(0, 30)}
            request: tuple[str, str, dict[str, Any] | None]
            if op == 0:
                body = {"thread_id": tid, "metadata": {"client": n}}
                body["if_exists"] = rng.choice(["raise", "do_nothing"])
                request = ("POST", "/threads", body)
            elif op == 1:
                request = ("POST", "/threads", {"metadata": {"client": n}})
            elif op == 2:
                run["if_not_exists"] = rng.choice(["create", "reject"])
                request = ("POST", f"/threads/{tid}/runs/wait", run)
            elif op == 3:
                request = ("POST", f"/threads/{tid}/runs", {**run, "if_not_exists": "create"})
            elif op == 4:
                request = ("PATCH", f"/threads/{tid}", {"metadata": {"patched": n}})
            elif op == 5:
                request = ("GET", f"/threads/{tid}", None)
            elif op == 6:
                request = ("GET", f"/threads/{tid}/state", None)
            elif op == 7:
                request = ("GET", f"/threads/{tid}/history", None)
            elif op == 8:
                request = ("POST", "/threads/search", {"metadata": {"client": n}})
            elif op == 9:
                request = ("POST", f"/threads/{tid}/fork", {"thread_id": rng.choice(THREADS)})
            elif op == 10:
                request = ("DELETE", f"/threads/{tid}", None)
            else:
                request = ("GET", f"/threads/{tid}/runs", None)
            method, path, json = request
            try:
                answer = await client.request(method, base + path, json=json)
            except httpx.HTTPError as exc:
                found.append(f"{method} {path}: {exc!r}")
                continue
            ANSWERS[answer.status_code] = ANSWERS.get(answer.status_code, 0) + 1
            if answer.status_code not in EXPECTED:
                found.append(f"{method} {path}: {answer.status_code} {answer.text[:300]}")
            elif op == 3 and answer.status_code == 200 and rng.random() < 0.5:
                run_id = answer.json()["run_id"]
                cancel = f"/threads/{tid}/runs/{run_id}/cancel"
                cancelled = await client.post(rng.choice(urls) + cancel)  # waits for the end
                if cancelled.status_code not in EXPECTED:
                    found.append(f"POST {cancel}: {cancelled.status_code} {cancelled.text[:300]}")
                elif cancelled.status_code == 200 and cancelled.json()["status"] == "running":
                    found.append(f"POST {cancel}: answered while the run still goes on")
    return found


async def _race(seconds: float, seed: int, folder: Path) -> list[str]:
    path = folder / "service.db"
    with (
        build() as wf_a,
        build() as wf_b,
        af.SQLiteStore(path) as store_a,
        af.SQLiteStore(path) as store_b,
        Server(ServiceApp(wf_a, store_a)) as a,
        Server(ServiceApp(wf_b, store_b)) as b,
    ):
        stop = asyncio.Event()
        clients = [
            asyncio.create_task(_client(n, [a.url, b.url], stop, seed)) for n in range(CLIENTS)
        ]
        await asyncio.sleep(seconds)
        stop.set()
        findings = [f for found in await asyncio.gather(*clients) for f in found]
        deadline = time.monotonic() + SETTLE_S
        while True:  # background runs end on their own; then nothing may stay leased
            held = [t for t in THREADS if store_a.current_lease(t) is not None]
            if not held or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        findings += [f"thread {t} is still leased {SETTLE_S:.0f} s after the end" for t in held]
    return findings


def race(seconds: float, seed: int) -> list[str]:
    """Race clients against two workers for ``seconds``; the findings ([] if none)."""
    folder = Path(tempfile.mkdtemp(prefix="service-race-"))
    try:
        return asyncio.run(_race(seconds, seed, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); 0 when nothing was found."""
    parser = argparse.ArgumentParser(prog="python -m torture.service_race", description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    findings = race(args.seconds, args.seed)
    answers = ", ".join(f"{status}: {count}" for status, count in sorted(ANSWERS.items()))
    print(f"{'ok  ' if not findings else 'FAIL'} service:{args.seed}: {len(findings)} findings")
    print(f"     answers {answers}")
    for finding in findings[:20]:
        print(f"     {finding}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
