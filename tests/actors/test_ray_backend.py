"""The Ray backend: executors in worker processes, the same results as on threads."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode, decode_state
from actorflow.storage import CheckpointKind
from tests.support.effects import journaled_results
from tests.support.forks import in_child
from tests.support.pg import Durable

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
    def on_work(self, work: Work, ctx: af.Context[Any]) -> None:
        self.seen.append(work.n)
        ctx.send(Work(work.n * work.n))


class Emit(af.Executor):
    @af.handler
    async def on_work(self, work: Work, ctx: af.Context[Any]) -> None:
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


class Pids(af.Executor):
    @af.handler
    def on_work(self, work: Work, ctx: af.Context[Any]) -> None:
        ctx.output(os.getpid())
        if work.n:
            ctx.send(Work(work.n - 1))


def test_workers_started_ahead_serve_the_first_run_of_a_workflow(ray_cluster: Any) -> None:
    """``start(workers=2)`` starts two worker processes the first workflow built on the
    backend runs on: its first run (and the check of its classes) starts no process."""
    backend = af.RayBackend(spares=0)
    try:
        backend.start(workers=2)
        key = backend.placement("a")
        parked = []
        for _ in range(2):
            taken, _left = backend._reserve.take(key)
            assert taken is not None, "start(workers=2) parked two workers"
            parked.append(taken)
        ahead = {ray_cluster.get(handle.pid.remote(), timeout=60) for handle, _ in parked}
        for handle, known in parked:  # (looked at, and put back as they were)
            backend._reserve.park(handle, key, spare=True, known=known)
        start = Pids("a")
        builder = af.WorkflowBuilder("ahead", start=start).add_edge(start, Pids("b"))
        with builder.add_edge("b", "a").build(backend=backend) as wf:
            pids = set(wf.run(Work(5)).outputs)
        assert pids == ahead
    finally:
        backend.shutdown()


def test_every_socket_is_on_loopback(ray_cluster: Any) -> None:
    """With the loopback setting, every socket of this process and its Ray is on 127.0.0.0/8."""
    backend = af.RayBackend()
    with _workflow(backend) as wf:
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
    backend.shutdown()
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
    def on_work(self, work: Work, ctx: af.Context[Any]) -> None:
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
    ray_backend: af.RayBackend, durable: Durable
) -> None:
    """Paused on threads, continued on Ray, paused again and finished on threads (SQLite,
    PostgreSQL): the outputs and final state of one uninterrupted run."""
    with _tally() as wf:
        expected = wf.run(Work(1)).outputs
        assert len(expected) == 6
        with durable.open() as store:
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
    ray_backend: af.RayBackend, durable: Durable
) -> None:
    """A session run on Ray (SQLite, PostgreSQL) and stopped at its limit finishes on threads."""
    with _tally(ray_backend) as wf, durable.open() as store:
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
    # Imported from its file: only this process can import it, never from sys.path.
    spec = importlib.util.spec_from_file_location("driver_only", tmp_path / "driver_only.py")
    assert spec is not None and spec.loader is not None
    driver_only = importlib.util.module_from_spec(spec)
    sys.modules["driver_only"] = driver_only  # classes pickle by reference to their module
    spec.loader.exec_module(driver_only)
    with af.WorkflowBuilder("hidden", start=driver_only.Hidden("h")).build() as wf:
        with wf.session(backend=ray_backend) as s, pytest.raises(af.WorkerImportFailed) as err:
            s.run(1)
        assert wf.run(1).outputs == [1], "on threads the same workflow runs"
    message = str(err.value)
    assert "'h'" in message and "driver_only.Hidden" in message
    assert "runtime_env" in message and "register_pickle_by_value" in message
    del sys.modules["driver_only"]


# --- the rest of the API, the same on both backends ------------------------------------


@af.message
@dataclass
class Ask:
    amount: int


class Asker(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.answers: list[list[object]] = []

    @af.handler
    def on_int(self, amount: int, ctx: af.Context[Any]) -> None:
        ctx.request(Ask(amount), bool)

    @af.response_handler
    def on_answer(self, request: Ask, ok: bool, ctx: af.Context[Any]) -> None:
        self.answers.append([request.amount, ok])
        ctx.output(list(self.answers))


def test_requests_and_responses(backend: af.ActorBackend) -> None:
    """A request surfaces to the caller; its answer reaches the response handler."""
    wf = af.WorkflowBuilder("ask", start=Asker("a")).build()
    with wf, wf.session(backend=backend) as s:
        first = s.run(5)
        assert first.status is af.RunStatus.IDLE_WITH_PENDING_REQUESTS
        [pending] = first.pending_requests
        assert pending.value == Ask(5)
        assert s.respond({pending.request_id: True}).outputs == [[[5, True]]]


def charge(n: int) -> int:
    """An effect (by reference: workers import this module)."""
    return n * 100


class PaymentDeclined(Exception):
    """An exception whose ``__init__`` does not take its message (pickle's own way
    to rebuild it would fail)."""

    def __init__(self, order: int, reason: str) -> None:
        super().__init__(f"order {order} declined: {reason}")
        self.order = order


class Unportable(Exception):
    """Made by keyword only, and holding what no pickle takes."""

    def __new__(cls, *, order: int) -> Unportable:
        return super().__new__(cls)

    def __init__(self, *, order: int) -> None:
        super().__init__(f"order {order}: the lock was held")
        self.lock = threading.Lock()


class ChargeThenFail(af.Executor):
    @af.handler
    def on_work(self, work: Work, ctx: af.Context[None]) -> None:
        ctx.effect(charge, work.n, key="charge")
        if work.n == 3:
            raise RuntimeError("the connection dropped after the charge")
        if work.n == 4:
            raise PaymentDeclined(work.n, "card expired")
        raise Unportable(order=work.n)


@pytest.mark.parametrize(
    ("order", "error"), [(3, RuntimeError), (4, PaymentDeclined), (5, Unportable)]
)
def test_a_failed_superstep_records_its_effect_results_from_any_process(
    backend: af.ActorBackend, tmp_path: Path, order: int, error: type[Exception]
) -> None:
    """The results of a handler's effects travel back with its failure (pickled, from
    a worker process, whatever the exception's ``__init__`` takes), and the run's halt
    cut records them."""
    wf = af.WorkflowBuilder("charge", start=ChargeThenFail("c")).build(backend=backend)
    with af.SQLiteStore(tmp_path / "s.db") as store:
        with wf, wf.session("s", store=store) as s, pytest.raises(af.ExecutorFailed) as failed:
            s.run(Work(order))
        [halt] = [cp for cp in store.list(session="s") if cp.kind is CheckpointKind.HALT]
    assert type(failed.value.__cause__) is error, repr(failed.value.__cause__)
    [(executor, superstep, name, n, result)] = journaled_results(halt)
    assert (executor, superstep, name, n, decode(result)) == ("c", 1, "charge", 0, order * 100)


def _leaf(backend: af.ActorBackend | None = None) -> af.Workflow:
    return _tally(backend)


def _outer(inner: af.Workflow, backend: af.ActorBackend | None = None) -> af.Workflow:
    sub = af.WorkflowExecutor(inner, "sub", outputs="output")
    return af.WorkflowBuilder("outer", start=sub).build(backend=backend)


def test_sub_workflows_in_both_directions(ray_backend: af.RayBackend) -> None:
    """A sub-workflow hosted in a Ray worker (its inner run on that worker's threads), and
    an inner workflow on Ray under a parent on threads, give the all-threads outputs."""
    with _leaf() as inner, _outer(inner) as wf:
        expected = wf.run(Work(1)).outputs
        with wf.session(backend=ray_backend) as s:
            assert s.run(Work(1)).outputs == expected
    with _leaf(ray_backend) as inner, _outer(inner) as wf:
        assert wf.run(Work(1)).outputs == expected
    assert len(expected) == 6


class Slow(af.Executor):
    """Loops forever, one superstep at a time, outputting a counter."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.count = 0

    @af.handler
    def on_work(self, work: Work, ctx: af.Context[Any]) -> None:
        self.count += 1
        ctx.output(self.count)
        ctx.send(work)


@pytest.mark.timeout(60)
def test_async_stream_cancel_reset_and_close(backend: af.ActorBackend) -> None:
    """astream yields events; cancel stops at a barrier; a later run continues the state;
    reset starts over from the blueprint; close gives every worker back."""

    async def scenario(s: af.Session) -> list[Any]:
        seen: list[Any] = []
        async for event in s.astream(Work(0)):
            if isinstance(event, af.OutputEvent):
                seen.append(event.value)
                if event.value == 3:
                    s.cancel()
            if isinstance(event, af.RunCancelledEvent):
                seen.append("cancelled")
        return seen

    wf = af.WorkflowBuilder("slow", start=Slow("slow")).add_edge("slow", "slow").build()
    with wf, wf.session(backend=backend) as s:
        seen = asyncio.run(scenario(s))
        assert seen[:3] == [1, 2, 3] and seen[-1] == "cancelled"
        last = seen[-2]
        assert _outputs(s.stream(max_supersteps=2)) == [last + 1, last + 2]
        s.reset()
        assert _outputs(s.stream(Work(0), max_supersteps=2)) == [1, 2]


# --- placement -------------------------------------------------------------------------


class Placed(af.Executor):
    """Outputs the Ray resources its worker was given."""

    @af.handler
    def on_work(self, work: Work, ctx: af.Context[Any]) -> None:
        import ray

        runtime: Any = ray.get_runtime_context()  # ray's own API is untyped
        ctx.output(runtime.get_assigned_resources())
        ctx.send(work)


class Sink(af.Executor):
    @af.handler
    def on_work(self, work: Work, ctx: af.Context[Any]) -> None:
        import ray

        runtime: Any = ray.get_runtime_context()  # ray's own API is untyped
        ctx.output(runtime.get_assigned_resources())


def test_per_executor_options_place_each_worker(ray_cluster: Any) -> None:
    """Graph-wide defaults apply to every worker; an executor's own options override them."""
    backend = af.RayBackend(options={"num_cpus": 0}, executors={"heavy": {"num_cpus": 1}})
    wf = af.WorkflowBuilder("placed", start=Placed("heavy")).add_edge("heavy", Sink("light"))
    with wf.build(backend=backend) as built:
        heavy, light = built.run(Work(1)).outputs
    backend.shutdown()
    assert heavy == {"CPU": 1.0}
    assert light == {}


def test_restart_and_retry_options_are_refused() -> None:
    """Ray's own restarts would lose state: the backend refuses them, naming the option."""
    with pytest.raises(ValueError, match="max_restarts"):
        af.RayBackend(options={"max_restarts": 3})
    with pytest.raises(ValueError, match="max_task_retries"):
        af.RayBackend(executors={"x": {"max_task_retries": 1}})


def test_executors_on_the_driver_run_as_threads_beside_ray_workers(ray_cluster: Any) -> None:
    """``on_driver`` executors run in the driver process, the others in workers; a failure
    of either kind is recovered as on threads, and killing a driver-hosted one is refused."""
    from actorflow.testing import inject_fault

    backend = af.RayBackend(on_driver=("emit",))
    builder = af.WorkflowBuilder(
        "mixed", start=Squarer("square"), restart=af.RestartPolicy(max_restarts=5)
    )
    wf = builder.add_edge("square", Emit("emit")).build(backend=backend)
    with wf, wf.session() as s:
        [(value, pid)] = s.run(Work(3)).outputs
        assert (value, pid) == (9, os.getpid())
        with pytest.raises(ValueError, match="on_driver"):
            inject_fault(s, "emit", 4, "kill")
        inject_fault(s, "square", 3, "kill")
        inject_fault(s, "emit", 4, "exception")
        result = s.run(Work(4))
        assert result.outputs == [(16, os.getpid())]
        assert sum(isinstance(e, af.RunRestartedEvent) for e in result.events) == 2
    backend.shutdown()
    with pytest.raises(ValueError, match="on_driver"):
        af.RayBackend(on_driver=("x",), executors={"x": {"num_cpus": 1}})


def test_a_kill_fault_is_refused_on_threads() -> None:
    """Killing the host process of a thread-hosted executor would kill the caller."""
    from actorflow.testing import inject_fault

    with _tally() as wf, wf.session() as s, pytest.raises(ValueError, match="RayBackend"):
        inject_fault(s, "t", 1, "kill")


_SCRIPT = """
import sys
from dataclasses import dataclass

import actorflow as af


@af.message
@dataclass
class Point:
    x: int
    y: int


class Mirror(af.Executor):
    @af.handler
    def on_point(self, p: Point, ctx: af.Context) -> None:
        ctx.send(Point(p.y, p.x))


class Report(af.Executor):
    @af.handler
    def on_point(self, p: Point, ctx: af.Context) -> None:
        ctx.output([p.x, p.y, type(p).__module__])


backend = af.RayBackend(init={"address": sys.argv[1], "log_to_driver": False})
wf = af.WorkflowBuilder("script", start=Mirror("m")).add_edge("m", Report("r")).build()
with wf, wf.session(backend=backend) as s:
    print(s.run(Point(1, 2)).outputs)
"""


@pytest.mark.timeout(60)
def test_classes_defined_in_a_script_work_on_workers(ray_cluster: Any, tmp_path: Path) -> None:
    """Executor and message classes of ``__main__`` travel by value; the workers register
    the message types and decode them."""
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    address = ray_cluster.get_runtime_context().gcs_address
    done = subprocess.run(
        [sys.executable, str(script), address],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[[2, 1, '__main__']]"


def test_a_forked_child_refuses_ray_at_once_instead_of_hanging(
    ray_backend: af.RayBackend,
) -> None:
    """Ray's connections stay in the process that started it: in a child forked from it
    (a pre-forking server, ``multiprocessing`` with ``fork``), a workflow on a
    RayBackend (the parent's, or one made in the child) raises ``BackendError``
    naming the fix, where its first run used to wait forever; closing it returns."""
    with _workflow(ray_backend) as wf:
        assert wf.run(Work(2)).outputs[0][0] == 4  # Ray is up, and its workers warm

        def child() -> None:
            for backend in (ray_backend, af.RayBackend()):
                built = _workflow(backend)
                with pytest.raises(af.BackendError, match="forked") as raised:
                    built.run(Work(3))
                assert "spawn" in str(raised.value)
                built.close()
            with pytest.raises(af.BackendError, match="forked"):
                wf.run(Work(3))

        assert in_child(child) == 0
        assert wf.run(Work(5)).outputs[0][0] == 25  # the parent's Ray is untouched
