"""A process killed with SIGKILL anywhere resumes from its latest checkpoint and finishes
with exactly the outputs and executor states of an uninterrupted run.

A child process (``tests.support.crash_child``) runs a corpus workflow on a durable store
(SQLiteStore, FileStore, PostgresStore) and is killed: inside a handler, between supersteps (the
step checkpoint durable, the next superstep not started), inside a checkpoint write
(blobs written, record not committed), and at random moments of checkpoint-heavy
runs. Then a new process (or this one) resumes the session's latest checkpoint.

The output guarantee tested (exactly once along the checkpoint lineage): let ``c``
be the superstep of the checkpoint the resume starts from. The outputs the killed
process emitted in supersteps <= ``c``, followed by every output of the resumed run,
equal the uninterrupted run's outputs, in order: none lost, none doubled. Outputs
the killed process emitted after ``c`` (a superstep whose checkpoint was never
written) are emitted again by the resumed run, identically (at-least-once for the
uncommitted tail, so a consumer keys them by superstep). The child logs every
output before the checkpoint that covers it is written (see crash_child.py), as a
consumer with side effects must.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode_state
from actorflow.runtime import event_of
from actorflow.runtime.session._ownership import acquire
from actorflow.storage import Checkpoint, CheckpointKind, CheckpointStore
from actorflow.storage.file._segment import scan_segment
from tests.support import graphs, pg
from tests.support.crash_driver import (
    SCHEMAS,
    SESSION,
    Child,
    Output,
    child_config,
    open_store,
    open_transactions,
)

STORES = ["sqlite", "file", "postgres"]

GRAPHS: dict[str, tuple[str, list[int], dict[str, Any]]] = {
    "ring": ("ring", [3, 8], {"ballast": 300}),
    "burst": ("fan_burst", [3, 4], {}),
}
"""Graphs killed at chosen points: a W3-like ring with growing logs, and a fan-in
whose buffers hold a backlog across several barriers (MAF #7371)."""

KILLS: list[tuple[str, dict[str, Any], int]] = [
    ("ring", {"at": "handler", "executor": "r0", "superstep": 1}, 0),
    ("ring", {"at": "handler", "executor": "r2", "superstep": 12}, 11),
    ("ring", {"at": "after_save", "superstep": 7}, 7),
    ("ring", {"at": "in_save", "superstep": 13}, 12),
    ("burst", {"at": "handler", "executor": "w1", "superstep": 2}, 1),
    ("burst", {"at": "handler", "executor": "gather", "superstep": 4}, 3),
    ("burst", {"at": "after_save", "superstep": 3}, 3),
    ("burst", {"at": "in_save", "superstep": 5}, 4),
]
"""(graph, where the child stops, superstep of the latest checkpoint after the kill)."""

RANDOM_GRAPH: tuple[str, list[int], dict[str, Any]] = ("ring", [3, 40], {"ballast": 3000})
"""Checkpoint-heavy: most of its run time is spent inside store writes."""
RANDOM_KILLS = 6
"""Random kill moments per store."""
RANDOM_KILLS_POSTGRES = 4
"""Fewer on PostgreSQL: its run and each resume take ~1.5x as long (the server competes
for the same cores), and the test keeps its 60 s bound."""


@dataclass(frozen=True)
class Reference:
    """What an uninterrupted run produces."""

    outputs: list[Output]
    states: dict[str, dict[str, Any]]
    invoked: set[tuple[str, int]]


def _normal(value: Any) -> Any:
    """The value as it reads back from the child's JSON log."""
    return json.loads(json.dumps(value))


def _states(store: CheckpointStore, checkpoint: Checkpoint) -> dict[str, dict[str, Any]]:
    return {
        eid: decode_state([store.load_blob(d) for d in digests])
        for eid, digests in checkpoint.executors.items()
    }


_REFERENCES: dict[str, Reference] = {}


def reference(graph: tuple[str, list[int], dict[str, Any]]) -> Reference:
    """Run the graph uninterrupted in this process (MemoryStore) once and remember it."""
    key = json.dumps(graph)
    if key not in _REFERENCES:
        family, params, kwargs = graph
        case = graphs.build(family, *params, **kwargs)
        store = af.MemoryStore()
        with case.workflow as wf, wf.session(SESSION, store=store) as session:
            events = list(session.stream(case.input))
        outputs = [
            (e.superstep, e.executor, _normal(e.value))
            for e in events
            if isinstance(e, af.OutputEvent)
        ]
        invoked = {
            (e.executor, e.superstep) for e in events if isinstance(e, af.ExecutorInvokedEvent)
        }
        final = store.latest(session=SESSION)
        assert final is not None and final.kind is CheckpointKind.FINAL
        _REFERENCES[key] = Reference(outputs, _states(store, final), invoked)
    return _REFERENCES[key]


@pytest.fixture(autouse=True)
def _drop_schemas() -> Iterator[None]:
    yield
    while SCHEMAS:
        pg.drop_schema(pg.dsn(), SCHEMAS.pop())


# --- checking a recovery -------------------------------------------------------------


def settle(store: CheckpointStore) -> None:
    """Wait until the killed child's lease has expired, by taking it once (then letting go).

    A lease change waits for any save still in flight under the old lease (a database
    server may finish a commit its client sent just before dying), so what the store
    holds afterwards is final.
    """
    acquire(store, SESSION, ttl=30, wait=30, owner="crash test").release()


def check_after_kill(store: CheckpointStore, killed: Child) -> Checkpoint | None:
    """The store is intact, and every checkpoint the killed child reported is in it."""
    settle(store)
    assert store.verify() == []
    _, reported, _ = killed.facts()
    stored = {cp.id for cp in store.list(session=SESSION)}
    assert {cid for cid, _, _ in reported} <= stored, "a checkpoint reported written was lost"
    latest = store.latest(session=SESSION)
    if reported:
        assert latest is not None and latest.superstep >= reported[-1][1]
    if latest is not None and latest.kind is CheckpointKind.PARTIAL:
        # Executors that finished the interrupted superstep were persisted on their own;
        # the resume starts from the cut they hang off.
        assert latest.parent_id is not None
        return store.load(latest.parent_id)
    return latest


def check_recovered(
    store: CheckpointStore,
    ref: Reference,
    killed_outputs: list[Output],
    resumed_from: Checkpoint | None,
    resumed_outputs: list[Output],
) -> None:
    """Outputs exactly once along the lineage; final states and history as uninterrupted."""
    cut = resumed_from.superstep if resumed_from is not None else 0
    committed = [o for o in killed_outputs if o[0] <= cut]
    assert committed + resumed_outputs == ref.outputs, "outputs lost or doubled"
    tail = [o for o in killed_outputs if o[0] > cut]
    assert tail == ref.outputs[len(committed) : len(committed) + len(tail)], (
        "an uncommitted output was not re-emitted identically"
    )
    final = store.latest(session=SESSION)
    assert final is not None and final.kind is CheckpointKind.FINAL
    assert _states(store, final) == ref.states
    chain = store.history(final.id)
    assert [cp.id for cp in chain[1:]] == [cp.parent_id for cp in chain[:-1]]
    assert chain[-1].kind is CheckpointKind.ENTRY and chain[-1].superstep == 0
    assert chain[-1].parent_id is None
    steps = [cp.superstep for cp in chain]
    assert steps == sorted(steps, reverse=True)
    if resumed_from is not None:
        assert resumed_from.id in {cp.id for cp in chain}, "the resume did not continue the lineage"
    check_history(store, ref)


def check_history(store: CheckpointStore, ref: Reference) -> None:
    """The session's history agrees with its lineage after the crash: numbers without a
    gap or a repeat (the killed process's unstored tail numbered again by the resume),
    every output of the uninterrupted run exactly once, and the run's end recorded."""
    history = [event_of(e) for e in store.session_history(SESSION)]
    assert [e.seq for e in history] == list(range(len(history))), "history numbers repeat or skip"
    outputs = [
        (e.superstep, e.executor, _normal(e.value))
        for e in history
        if isinstance(e, af.OutputEvent)
    ]
    assert outputs == ref.outputs, "the history lost or doubled an output"
    assert isinstance(history[0], af.RunStartedEvent) and history[0].input is not None
    assert isinstance(history[-1], af.RunCompletedEvent)
    # Every run recorded (the killed one, if its entry cut was stored, and the resumed
    # one) has its start; the last one its end.
    starts = sum(isinstance(e, af.RunStartedEvent) for e in history)
    ends = sum(isinstance(e, af.RunCompletedEvent) for e in history)
    assert 1 <= ends <= starts


def resume_here(
    store: CheckpointStore, graph: tuple[str, list[int], dict[str, Any]]
) -> list[Output]:
    """Resume the session's latest checkpoint in this process (or start it if none)."""
    family, params, kwargs = graph
    case = graphs.build(family, *params, **kwargs)
    with case.workflow as wf:
        if store.latest(session=SESSION) is None:
            session = wf.session(SESSION, store=store, wait=30)
            events = list(session.stream(case.input))
        else:
            # The killed process's lease expires within its TTL (see crash_child).
            session = wf.resume(store, session=SESSION, wait=30)
            events = list(session.stream())
        session.close()
    assert isinstance(events[-1], af.RunCompletedEvent)
    return [
        (e.superstep, e.executor, _normal(e.value)) for e in events if isinstance(e, af.OutputEvent)
    ]


# --- tests ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("store_kind", STORES)
def test_uninterrupted_child_matches_the_in_process_reference(
    store_kind: str, tmp_path: Path
) -> None:
    """A child run to completion logs the reference outputs and stores the reference states."""
    graph = GRAPHS["burst"]
    child = Child(child_config(store_kind, tmp_path, graph, "run"), tmp_path)
    child.finish()
    outputs, reported, end = child.facts()
    ref = reference(graph)
    assert end == "completed"
    assert outputs == ref.outputs
    with open_store(store_kind, tmp_path) as store:
        final = store.latest(session=SESSION)
        assert final is not None and final.kind is CheckpointKind.FINAL
        assert final.id == reported[-1][0]
        assert _states(store, final) == ref.states


@pytest.mark.timeout(60)
@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize(
    ("graph_name", "block", "latest_superstep"),
    KILLS,
    ids=[f"{g}-{b['at']}-{b.get('executor', 'step')}@{b['superstep']}" for g, b, _ in KILLS],
)
def test_kill_at_a_chosen_point_then_resume_in_a_new_process(
    store_kind: str,
    graph_name: str,
    block: dict[str, Any],
    latest_superstep: int,
    tmp_path: Path,
) -> None:
    """SIGKILL in a handler, between supersteps or mid-write; a new process resumes: outputs exactly once, states as uninterrupted."""
    graph = GRAPHS[graph_name]
    ref = reference(graph)
    if block["at"] == "handler":
        assert (block["executor"], block["superstep"]) in ref.invoked
    killed = Child(child_config(store_kind, tmp_path, graph, "run", block), tmp_path)
    killed.expect("BLOCKED")
    open_saves = 1
    try:
        if block["at"] == "in_save" and store_kind == "postgres":
            open_saves = open_transactions(tmp_path)
    finally:
        killed.kill()
    # Postgres: the kill landed where claimed, its save transaction open on the
    # server (blob and record rows written, COMMIT not sent).
    assert open_saves == 1
    if block["at"] == "in_save" and store_kind == "file":
        # The kill landed where claimed: a frame cut short at the end of the segment.
        assert _torn_segments(tmp_path / "store" / "packs") == 1
    with open_store(store_kind, tmp_path) as store:
        latest = check_after_kill(store, killed)
        assert latest is not None and latest.superstep == latest_superstep
        expected_kind = CheckpointKind.ENTRY if latest_superstep == 0 else CheckpointKind.STEP
        assert latest.kind is expected_kind
    resumed = Child(child_config(store_kind, tmp_path, graph, "resume"), tmp_path)
    resumed.finish()
    resumed_outputs, _, end = resumed.facts()
    assert end == "completed"
    killed_outputs, _, _ = killed.facts()
    with open_store(store_kind, tmp_path) as store:
        assert store.verify() == []
        check_recovered(store, ref, killed_outputs, latest, resumed_outputs)


def _torn_segments(packs: Path) -> int:
    """How many segments end in a frame cut short."""
    torn = 0
    for path in packs.glob("*.seg"):
        with open(path, "rb") as f:
            torn += scan_segment(f.fileno(), path.name, 0, os.fstat(f.fileno()).st_size).torn
    return torn


@pytest.mark.timeout(60)
@pytest.mark.parametrize("store_kind", STORES)
def test_kill_at_random_moments_of_a_checkpoint_heavy_run(store_kind: str, tmp_path: Path) -> None:
    """SIGKILL at random moments (mostly mid-write): the store stays intact and a resume ends as an uninterrupted run."""
    ref = reference(RANDOM_GRAPH)
    timing = tmp_path / "timing"
    timing.mkdir()
    started = time.monotonic()
    durations = []
    for probe_run in range(2):  # the faster of two: kill moments must fall inside a fast run
        folder = timing / f"probe{probe_run}"
        folder.mkdir()
        probe = Child(child_config(store_kind, folder, RANDOM_GRAPH, "run"), folder)
        probe.expect("READY")
        ready = time.monotonic()
        probe.finish()
        durations.append(time.monotonic() - ready)
        assert probe.facts()[0] == ref.outputs
    duration = min(durations)
    rng = random.Random(f"actorflow-crash-{store_kind}")
    mid_run = 0
    kills = RANDOM_KILLS_POSTGRES if store_kind == "postgres" else RANDOM_KILLS
    for attempt in range(kills):
        workdir = tmp_path / f"kill{attempt}"
        workdir.mkdir()
        child = Child(child_config(store_kind, workdir, RANDOM_GRAPH, "run"), workdir)
        child.expect("READY")
        delay = rng.uniform(0.0, 0.8 * duration)
        try:
            child.proc.wait(timeout=delay)  # a random kill moment, not a synchronisation
        except subprocess.TimeoutExpired:
            pass
        child.kill()
        killed_outputs, _, end = child.facts()
        mid_run += end is None
        with open_store(store_kind, workdir) as store:
            latest = check_after_kill(store, child)
            resumed_outputs = resume_here(store, RANDOM_GRAPH)
            assert store.verify() == []
            check_recovered(store, ref, killed_outputs, latest, resumed_outputs)
    assert mid_run >= kills // 2, (
        f"only {mid_run} of {kills} kills landed mid-run (run took {duration:.3f} s, "
        f"startup {ready - started:.3f} s)"
    )


def _ray_workers() -> set[int]:
    """Pids of the processes hosting a RayBackend worker (any driver's) on this machine."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                title = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if title.startswith(b"ray::Worker"):
                found.add(int(entry.name))
    return found


@pytest.mark.timeout(180)
def test_driver_killed_mid_run_resumes_on_ray_in_a_new_process(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """The driver of a Ray-hosted session SIGKILLed between supersteps: a new driver
    resumes on Ray with the uninterrupted outputs, and Ray reaps the dead driver's workers."""
    graph = GRAPHS["burst"]
    ref = reference(graph)
    address = ray_cluster.get_runtime_context().gcs_address
    block = {"at": "after_save", "superstep": 3}
    config = child_config("sqlite", tmp_path, graph, "run", block, ray=address)
    killed = Child(config, tmp_path)
    try:
        killed.expect("BLOCKED", timeout=60)
        # The pids the child noted as it started its workers (see crash_child): other
        # workers may start meanwhile, for this process's own backends.
        orphans = {int(pid) for pid in Path(config["log"] + ".pids").read_text().split()}
        assert orphans and orphans <= _ray_workers(), "the executors run in Ray workers"
    finally:
        killed.kill()
    with open_store("sqlite", tmp_path) as store:
        latest = check_after_kill(store, killed)
        assert latest is not None and latest.superstep == 3
    # Ray kills the actors of a driver that died (their owner); wait for it, bounded.
    deadline = time.monotonic() + 30
    while orphans & _ray_workers() and time.monotonic() < deadline:
        threading.Event().wait(0.1)
    assert not orphans & _ray_workers(), "a worker of the dead driver survived"
    resumed = Child(child_config("sqlite", tmp_path, graph, "resume", ray=address), tmp_path)
    resumed.expect("DONE", timeout=120)  # a new driver connects and starts its workers
    resumed.finish()
    resumed_outputs, _, end = resumed.facts()
    assert end == "completed"
    killed_outputs, _, _ = killed.facts()
    with open_store("sqlite", tmp_path) as store:
        assert store.verify() == []
        check_recovered(store, ref, killed_outputs, latest, resumed_outputs)
