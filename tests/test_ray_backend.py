"""The Ray backend: executors in worker processes, the same results as on threads."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

import actorflow as af

pytestmark = pytest.mark.usefixtures("ray_cluster")


@af.message
@dataclass
class Work:
    n: int


class Squarer(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_work(self, work: Work, ctx: af.Context) -> None:
        self.seen.append(work.n)
        ctx.send(Work(work.n * work.n))


class Emit(af.Executor):
    @af.handler
    async def on_work(self, work: Work, ctx: af.Context) -> None:
        ctx.output((work.n, os.getpid()))


def _workflow(backend: af.ActorBackend) -> af.Workflow:
    return (
        af.WorkflowBuilder("ray-smoke", start=Squarer("square"))
        .add_edge("square", Emit("emit"))
        .build(backend=backend)
    )


def test_executors_run_in_worker_processes(backend: af.ActorBackend) -> None:
    """On Ray the handlers run in other processes; the outputs are those of threads."""
    with _workflow(backend) as wf:
        [(value, pid)] = wf.run(Work(7)).outputs
    assert value == 49
    assert (pid != os.getpid()) == isinstance(backend, af.RayBackend)


def test_every_socket_is_on_loopback(ray_cluster: Any) -> None:
    """With the loopback setting, every socket of this process and its Ray is on 127.0.0.0/8."""
    with _workflow(af.RayBackend()) as wf:
        assert wf.run(Work(2)).outputs[0][0] == 4
    listing = subprocess.run(
        ["ss", "-tanp"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    ray_pids = {os.getpid(), *_ray_pids()}
    offending = []
    for line in listing.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 6 or not any(f"pid={p}," in line for p in ray_pids):
            continue
        # A listener's peer column is a wildcard by definition; its own address is not.
        for address in fields[3:4] if fields[0] == "LISTEN" else fields[3:5]:
            host = address.rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
            if not host.startswith("127."):
                offending.append(line)
    assert ray_pids - {os.getpid()}, "found Ray's processes"
    assert offending == []


def _ray_pids() -> set[int]:
    """The pids of Ray processes started by this test session (children of this process)."""
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        children: set[int] = set()
        for pid in frontier:
            path = f"/proc/{pid}/task/{pid}/children"
            try:
                with open(path) as f:
                    children |= {int(c) for c in f.read().split()}
            except OSError:
                continue
        children -= found
        found |= children
        frontier = children
    return found
