"""When the store fails: a checkpoint write that fails fails the run with an event (sync
and async durability), the lineage stays consistent, and without a store nothing is
snapshotted at all.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

import actorflow as af
from actorflow.actors import encode, encode_state
from actorflow.storage import (
    Checkpoint,
    CheckpointKind,
    Lease,
    blob_digest,
    new_checkpoint_id,
)
from actorflow.testing import run_to_idle
from tests.support import causes, graphs


def ring_case() -> graphs.GraphCase:
    """3 stations, 4 laps (12 supersteps); each station appends to its ``log`` list in place."""
    return graphs.build("ring", 3, 4, ballast=3)


# --- failure mode 13: no store, no snapshot ----------------------------------------------


_SNAPSHOTS_ALLOWED = threading.Event()


class NoSnapshot(af.Executor):
    """Counts numbers; its snapshot() raises unless the test allows it (build time)."""

    calls: ClassVar[list[str]] = []

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.count = 0

    def snapshot(self) -> dict[str, Any]:
        if not _SNAPSHOTS_ALLOWED.is_set():
            NoSnapshot.calls.append(self.id)
            raise RuntimeError("snapshot() was called although no store was given")
        return super().snapshot()

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.count += 1
        if n > 0:
            ctx.send(n - 1)
        ctx.output(self.count)


def _no_snapshot_workflow() -> af.Workflow:
    _SNAPSHOTS_ALLOWED.set()  # the builder encodes the blueprint once
    try:
        builder = af.WorkflowBuilder("nosnap", start=NoSnapshot("a"))
        builder.add_edge("a", NoSnapshot("b")).add_edge("b", "a")
        return builder.build()
    finally:
        _SNAPSHOTS_ALLOWED.clear()


@pytest.mark.timeout(30)
def test_without_a_store_snapshot_is_never_called() -> None:
    """Runs, sessions, streams and cancelled runs without a store never call snapshot()."""
    NoSnapshot.calls.clear()
    with _no_snapshot_workflow() as wf:
        assert wf.run(3).outputs == [1, 1, 2, 2]
        assert wf.run(1).outputs == [1, 1]
        with wf.session() as s:
            assert s.run(2).outputs == [1, 1, 2]
            assert s.run(0).outputs == [3]
            assert [e for e in s.stream(1) if isinstance(e, af.OutputEvent)]
            with pytest.raises(af.SuperstepLimitExceeded):
                s.run(50, max_supersteps=3)
            s.reset()
            assert s.run(0).outputs == [1]
    assert NoSnapshot.calls == []


@pytest.mark.timeout(30)
def test_with_a_store_the_same_executor_does_snapshot() -> None:
    """Control for the test above: with a store, snapshot() is called and its failure fails the run."""
    NoSnapshot.calls.clear()
    with _no_snapshot_workflow() as wf, wf.session(store=af.MemoryStore()) as s:
        outcome = run_to_idle(s, 3)
    assert isinstance(outcome.error, af.ActorflowError)
    assert NoSnapshot.calls


# --- a failing store -----------------------------------------------------------------------


class FailingStore:
    """Delegates to a MemoryStore; ``save`` raises OSError for checkpoints ``fails`` picks."""

    def __init__(self, fails: Callable[[Checkpoint], bool]) -> None:
        self.inner = af.MemoryStore()
        self.fails = fails
        self.failed = threading.Event()

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        if self.fails(checkpoint):
            self.failed.set()
            raise OSError(f"disk full (simulated) at superstep {checkpoint.superstep}")
        self.inner.save(checkpoint, blobs, lease=lease)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _stream_until_failure(
    session: af.Session, value: Any = None
) -> tuple[list[af.Event], BaseException]:
    """Every event the run yielded before it raised, and what it raised (it must raise)."""
    outcome = run_to_idle(session, value) if value is not None else run_to_idle(session)
    assert isinstance(outcome.error, af.ActorflowError), outcome.error
    return outcome.events, outcome.error


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("kind", "superstep"), [("entry", 0), ("step", 1), ("step", 5), ("final", 12)]
)
def test_a_failed_checkpoint_write_fails_the_run_with_an_event(kind: str, superstep: int) -> None:
    """A failing save emits CheckpointFailedEvent, fails the run with the cause chained, and starts no further superstep."""
    store = FailingStore(lambda cp: cp.kind == kind and cp.superstep == superstep)
    case = ring_case()
    with case.workflow as wf, wf.session("s", store=store) as s:
        events, error = _stream_until_failure(s, case.input)
    failed = [e for e in events if isinstance(e, af.CheckpointFailedEvent)]
    assert len(failed) == 1 and failed[0].superstep == superstep
    assert "disk full" in failed[0].error
    assert any(isinstance(e, OSError) for e in causes.chain(error))
    assert isinstance(error, af.CheckpointWriteFailed)
    assert isinstance(error, af.RunFailed) and isinstance(error, af.CheckpointError)
    after = events[events.index(failed[0]) :]
    assert not [e for e in after if isinstance(e, af.SuperstepStartedEvent)]
    assert not [e for e in events if isinstance(e, af.RunCompletedEvent)]
    started = [e.superstep for e in events if isinstance(e, af.SuperstepStartedEvent)]
    assert started == list(range(1, superstep + 1))


@pytest.mark.timeout(30)
def test_with_async_durability_a_failed_write_fails_the_run_at_the_next_barrier() -> None:
    """With ASYNC durability a failed background write fails the run at the next barrier (one barrier of slack), never completing."""
    store = FailingStore(lambda cp: cp.kind == "step" and cp.superstep == 3)

    def hold_step_4(executor: str, superstep: int) -> None:
        if superstep == 4:  # the background write of step 3 has been attempted first
            assert store.failed.wait(10)

    graphs.HOOK = hold_step_4
    try:
        case = graphs.build("ring", 3, 10)
        policy = af.CheckpointPolicy(durability=af.Durability.ASYNC)
        with case.workflow as wf, wf.session("s", store=store, checkpoint=policy) as s:
            events, error = _stream_until_failure(s, case.input)
    finally:
        graphs.HOOK = None
    failed = [e for e in events if isinstance(e, af.CheckpointFailedEvent)]
    assert len(failed) == 1 and failed[0].superstep in (4, 5)
    assert any(isinstance(e, OSError) for e in causes.chain(error))
    assert isinstance(events[-1], af.RunFailedEvent)
    assert not [e for e in events if isinstance(e, af.RunCompletedEvent)]
    completed = [e.superstep for e in events if isinstance(e, af.SuperstepCompletedEvent)]
    assert max(completed) == failed[0].superstep


@pytest.mark.timeout(30)
@pytest.mark.parametrize("durability", [af.Durability.SYNC, af.Durability.ASYNC])
def test_a_checkpointed_event_not_marked_queued_names_a_stored_record(
    durability: af.Durability,
) -> None:
    """CheckpointedEvent means written unless ``queued``; with ASYNC a step cut is only queued,
    and the ids of queued cuts whose write failed never appear in the store."""
    store = FailingStore(lambda cp: cp.kind == "step" and cp.superstep >= 3)

    def hold_step_4(executor: str, superstep: int) -> None:
        if superstep == 4:  # the write of step 3 has been attempted first
            assert store.failed.wait(10)

    graphs.HOOK = hold_step_4
    try:
        case = graphs.build("ring", 3, 10)
        policy = af.CheckpointPolicy(durability=durability)
        with case.workflow as wf, wf.session("s", store=store, checkpoint=policy) as s:
            events, _ = _stream_until_failure(s, case.input)
    finally:
        graphs.HOOK = None
    checkpointed = [e for e in events if isinstance(e, af.CheckpointedEvent)]
    stored = {cp.id for cp in store.inner.list()}
    assert checkpointed
    for event in checkpointed:
        if not event.queued:
            assert event.checkpoint_id in stored, event
    queued = [e for e in checkpointed if e.queued]
    if durability is af.Durability.SYNC:
        assert not queued
    else:
        assert queued and all(e.kind in ("step", "response") for e in queued)
        assert [e for e in queued if e.checkpoint_id not in stored]  # a queued id never written


@pytest.mark.timeout(30)
def test_with_async_durability_a_failed_final_write_is_an_error_event() -> None:
    """ASYNC and the final checkpoint's write fails: CheckpointFailedEvent, and no 'completed'."""
    store = FailingStore(lambda cp: cp.kind == "final")
    case = ring_case()
    policy = af.CheckpointPolicy(durability=af.Durability.ASYNC)
    with case.workflow as wf, wf.session("s", store=store, checkpoint=policy) as s:
        events, _ = _stream_until_failure(s, case.input)
    assert [e for e in events if isinstance(e, af.CheckpointFailedEvent)]
    assert not [e for e in events if isinstance(e, af.RunCompletedEvent)]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("durability", [af.Durability.SYNC, af.Durability.ASYNC])
def test_after_a_failed_write_the_session_checkpoints_a_consistent_lineage(
    durability: af.Durability,
) -> None:
    """After a failed write the session's next run checkpoints a consistent, resumable lineage (every parent stored)."""
    store = FailingStore(lambda cp: cp.kind == "step" and cp.superstep == 3)
    case = ring_case()
    policy = af.CheckpointPolicy(durability=durability)
    with case.workflow as wf:
        with wf.session("s", store=store, checkpoint=policy) as s:
            _stream_until_failure(s, case.input)
            store.fails = lambda cp: False
            result = s.run()
            assert result.status is af.RunStatus.COMPLETED
            assert result.checkpoint_id == store.latest(session="s").id
        assert store.verify() == []
        ids = {cp.id for cp in store.list(session="s")}
        assert all(cp.parent_id in ids for cp in store.list(session="s") if cp.parent_id)
        with wf.resume(store, session="s") as resumed:
            assert resumed.run().status is af.RunStatus.COMPLETED


class Tally(af.Executor):
    """Keeps every number it was given; outputs them all."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        self.seen.append(n)
        ctx.output(list(self.seen))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("durability", [af.Durability.SYNC, af.Durability.ASYNC])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_records_deleted_beneath_an_open_session_are_written_anew(
    durability: af.Durability, kind: str, tmp_path: Path
) -> None:
    """A tool deleting the records of a session still open (``prune`` takes no lease):
    its next write is refused (the store never saves a record naming blobs it lost)
    and fails that run; the write after resends every blob its cut names, so the
    session goes on, resumable, with nothing of its state lost."""
    store = af.MemoryStore() if kind == "memory" else af.SQLiteStore(tmp_path / "s.db")
    policy = af.CheckpointPolicy(durability=durability)
    with af.WorkflowBuilder("tally", start=Tally("tally")).build() as wf:
        with wf.session("s", store=store, checkpoint=policy) as s:
            assert s.run(1).outputs == [[1]]
            assert store.prune("s", 0) > 0
            with pytest.raises(af.CheckpointWriteFailed, match="neither given nor stored"):
                s.run(2)  # refused at its entry cut: it never ran
            assert s.run(3).outputs == [[1, 3]]
        assert store.verify() == []
        with wf.resume(store, session="s") as resumed:
            assert resumed.run(4).outputs == [[1, 3, 4]]
    store.close()


@pytest.mark.timeout(30)
def test_a_run_whose_entry_checkpoint_failed_leaves_nothing_queued() -> None:
    """The entry write fails, the run raises; the session's next run sees only its own input."""
    store = FailingStore(lambda cp: cp.kind == "entry" and cp.superstep == 0)
    case = graphs.build("chain", 2)
    with case.workflow as wf, wf.session("s", store=store) as s:
        with pytest.raises(af.RunFailed):
            s.run(3)
        store.fails = lambda cp: False
        second = s.run(100)
    with graphs.build("chain", 2).workflow as fresh:
        assert second.outputs == fresh.run(100).outputs


@pytest.mark.timeout(30)
def test_a_failed_entry_write_ends_the_event_stream_with_run_failed() -> None:
    """The entry checkpoint cannot be written: the stream's last event is RunFailedEvent."""
    store = FailingStore(lambda cp: cp.kind == "entry")
    case = graphs.build("chain", 2)
    with case.workflow as wf, wf.session("s", store=store) as s:
        events, _ = _stream_until_failure(s, case.input)
    assert [type(e) for e in events[-2:]] == [af.CheckpointFailedEvent, af.RunFailedEvent]


@pytest.mark.timeout(30)
def test_a_state_that_fails_its_restore_fails_the_run_before_its_executor_runs() -> None:
    """What only assembling a state checks (a list's item count) fails when its host
    restores it, as the executor's first superstep after the resume begins: the run
    fails naming the executor, with the DecodeError chained, and its handler never runs."""
    case = graphs.build("chain", 3)
    store = af.MemoryStore()
    with case.workflow.session("s", store=store) as s:
        s.run(case.input)
    (entry,) = store.list(session="s", kind=CheckpointKind.ENTRY)
    seen = list(range(300))  # two groups of a list attribute, 256 + 44 items
    chunks = encode_state({"mul": 1, "add": 0, "count": 0, "seen": seen, "ballast": []})
    manifest = encode(
        [
            1,
            [
                ["mul", 0, 0, 0],
                ["add", 0, 0, 0],
                ["count", 0, 0, 0],
                ["seen", 2, 2, 999],
                ["ballast", 0, 0, 0],
            ],
        ]
    )  # 999: a lie
    forged = [manifest, *chunks[1:]]
    crafted = dataclasses.replace(
        entry,
        id=new_checkpoint_id(),
        parent_id=None,
        session="crafted",
        executors={**entry.executors, "a1": tuple(blob_digest(c) for c in forged)},
    )
    store.save(crafted, {blob_digest(c): c for c in forged})
    calls: list[tuple[str, int]] = []
    graphs.HOOK = lambda executor, superstep: calls.append((executor, superstep))
    try:
        with (
            case.workflow as wf,
            wf.resume(store, checkpoint_id=crafted.id) as resumed,
            pytest.raises(af.ExecutorFailed, match="'a1' could not restore") as failed,
        ):
            resumed.run()
    finally:
        graphs.HOOK = None
    assert failed.value.executor == "a1"
    assert isinstance(failed.value.__cause__, af.DecodeError)
    assert "has 300 items, expected 999" in str(failed.value)
    assert [executor for executor, _ in calls] == ["a0"]  # a1 never ran
