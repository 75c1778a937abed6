"""The Ray backend: executors in worker processes, the same results as on threads."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode_state
from actorflow.storage import CheckpointKind

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


# --- checkpoints move between backends -----------------------------------------------


class Tally(af.Executor):
    """Keeps a running list; outputs its length and sum on every step, stops at 6 items."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.items: list[int] = []

    @af.handler
    def on_work(self, work: Work, ctx: af.Context) -> None:
        self.items.append(work.n)
        ctx.output([len(self.items), sum(self.items)])
        if len(self.items) < 6:
            ctx.send(Work(work.n + 1))


def _tally(backend: af.ActorBackend | None = None) -> af.Workflow:
    return af.WorkflowBuilder("tally", start=Tally("t")).add_edge("t", "t").build(backend=backend)


def _outputs(events: Iterator[af.Event]) -> list[Any]:
    """The outputs of a streamed run that stops at its superstep limit."""
    found: list[Any] = []
    try:
        for event in events:
            if isinstance(event, af.OutputEvent):
                found.append(event.value)
    except af.SuperstepLimitExceeded:
        return found
    raise AssertionError("the run did not stop at its superstep limit")


@pytest.mark.timeout(60)
def test_a_checkpoint_moves_from_threads_to_ray_and_back(
    ray_backend: af.RayBackend, tmp_path: Path
) -> None:
    """Paused on threads, continued on Ray, paused again and finished on threads (SQLite):
    the outputs and final state of one uninterrupted run."""
    with _tally() as wf:
        expected = wf.run(Work(1)).outputs
        assert len(expected) == 6
        with af.SQLiteStore(tmp_path / "runs.db") as store:
            with wf.session("moving", store=store) as s:
                got = _outputs(s.stream(Work(1), max_supersteps=2))
            with wf.resume(store, session="moving", backend=ray_backend) as s:
                assert s.backend is ray_backend
                got += _outputs(s.stream(max_supersteps=2))
            with wf.resume(store, session="moving") as s:
                got += s.run().outputs
            final = store.latest(session="moving")
            assert final is not None and final.kind is CheckpointKind.FINAL
            state = decode_state([store.load_blob(d) for d in final.executors["t"]])
    assert got == expected
    assert state == {"items": [1, 2, 3, 4, 5, 6]}


@pytest.mark.timeout(60)
def test_a_checkpoint_taken_on_ray_resumes_on_threads(
    ray_backend: af.RayBackend, tmp_path: Path
) -> None:
    """A session run on Ray (SQLite) and stopped at its limit finishes on threads."""
    with _tally(ray_backend) as wf, af.SQLiteStore(tmp_path / "runs.db") as store:
        with wf.session("from-ray", store=store) as s:
            got = _outputs(s.stream(Work(1), max_supersteps=3))
        with wf.resume(store, session="from-ray", backend=af.ThreadBackend()) as s:
            got += s.run().outputs
        expected = wf.run(Work(1)).outputs
    assert got == expected


# --- code the workers cannot import --------------------------------------------------


def test_a_class_workers_cannot_import_fails_at_session_start_naming_it(
    ray_backend: af.RayBackend, tmp_path: Path
) -> None:
    """An executor class from a module only the driver can import: WorkerImportFailed
    names the executor, the class and the fix, before any handler runs."""
    (tmp_path / "driver_only.py").write_text(
        "import actorflow as af\n\n"
        "class Hidden(af.Executor):\n"
        "    @af.handler\n"
        "    def on_int(self, n: int, ctx: af.Context) -> None:\n"
        "        ctx.output(n)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import driver_only  # type: ignore[import-not-found]  # written above
    finally:
        sys.path.remove(str(tmp_path))
    with af.WorkflowBuilder("hidden", start=driver_only.Hidden("h")).build() as wf:
        with wf.session(backend=ray_backend) as s, pytest.raises(af.WorkerImportFailed) as err:
            s.run(1)
        assert wf.run(1).outputs == [1], "on threads the same workflow runs"
    message = str(err.value)
    assert "'h'" in message and "driver_only.Hidden" in message
    assert "runtime_env" in message and "register_pickle_by_value" in message
    del sys.modules["driver_only"]
