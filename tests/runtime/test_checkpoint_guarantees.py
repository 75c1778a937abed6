"""Durable checkpoints: isolation from callers, replay, forks, graph checks and
incremental storage (safe decoding: ``test_checkpoint_decoding``; failures of the store
itself: ``test_checkpoint_store_failures``).

Reproductions of Microsoft Agent Framework #7683 (a resumed run mutates the checkpoint
it came from; an in-memory store hands out its internals) run against every store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode_state
from actorflow.storage import (
    Checkpoint,
    CheckpointKind,
    encode_checkpoint,
    new_checkpoint_id,
)
from tests.support import graphs, pg

Opener = Callable[[Path], Any]
STORES: dict[str, Opener] = {
    "memory": lambda _: af.MemoryStore(),
    "file": lambda tmp: af.FileStore(tmp / "store"),
    "sqlite": lambda tmp: af.SQLiteStore(tmp / "store.db"),
}


@pytest.fixture(params=[*sorted(STORES), "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each store kind, fresh (Postgres: a schema of its own, dropped after), closed afterwards."""
    if request.param == "postgres":
        with pg.schema() as (dsn, schema):
            opened = af.PostgresStore(dsn, schema=schema)
            yield opened
            opened.close()
        return
    opened = STORES[request.param](tmp_path)
    yield opened
    opened.close()


def states_of(store: Any, checkpoint: Checkpoint) -> dict[str, dict[str, Any]]:
    """Every executor's snapshot in ``checkpoint``, decoded."""
    return {
        eid: decode_state([store.load_blob(d) for d in digests])
        for eid, digests in checkpoint.executors.items()
    }


def ring_case() -> graphs.GraphCase:
    """3 stations, 4 laps (12 supersteps); each station appends to its ``log`` list in place."""
    return graphs.build("ring", 3, 4, ballast=3)


# --- MAF #7683: nothing a run or a caller does reaches a stored checkpoint ------------------


@pytest.mark.timeout(30)
def test_a_resumed_run_never_mutates_the_checkpoint_it_came_from(
    store: Any, backend: af.ActorBackend
) -> None:
    """A resumed run appending to its restored lists in place leaves the checkpoint it came from unchanged (MAF #7683)."""
    case = ring_case()
    with case.workflow as wf:
        with (
            wf.session("s", store=store, backend=backend) as s,
            pytest.raises(af.SuperstepLimitExceeded),
        ):
            s.run(case.input, max_supersteps=5)
        origin = store.latest(session="s")
        assert origin is not None and origin.superstep == 5
        record = encode_checkpoint(origin)
        before = states_of(store, origin)
        assert len(before["r1"]["log"]) == 3 + 2  # ballast + two visits
        with wf.resume(store, session="s", checkpoint_id=origin.id, backend=backend) as resumed:
            result = resumed.run()
        assert result.status is af.RunStatus.COMPLETED
        final = store.latest(session="s")
        assert final is not None and final.kind is CheckpointKind.FINAL
        assert len(states_of(store, final)["r1"]["log"]) == 3 + 4, "the resumed run did append"
        again = store.load(origin.id)
    assert encode_checkpoint(again) == record
    assert states_of(store, again) == before
    assert store.verify() == []


def vandalize(value: Any, seen: set[int] | None = None) -> None:
    """Mutate everything reachable from ``value``: containers, and fields of (frozen) records."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, dict):
        for item in list(value.values()):
            vandalize(item, seen)
        value.clear()
        value["vandal"] = ["was here"]
    elif isinstance(value, list):
        for item in list(value):
            vandalize(item, seen)
        value[:] = ["vandal"]
    elif isinstance(value, bytearray):
        value[:] = b"vandal"
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            vandalize(getattr(value, f.name), seen)
            object.__setattr__(value, f.name, "vandal")  # even a frozen record


def _checkpointed_run(store: Any) -> list[str]:
    case = ring_case()
    metadata = {"tags": ["a", "b"], "nested": {"k": [1, 2, {"deep": [3]}]}, "raw": b"xy"}
    with case.workflow as wf, wf.session("s", store=store) as s:
        s.run(case.input, metadata=metadata)
    return [cp.id for cp in store.list(session="s")]


@pytest.mark.timeout(30)
def test_what_a_store_returns_is_the_callers_own(store: Any) -> None:
    """load, list, latest and load_blob: mutating everything they return changes nothing stored."""
    ids = _checkpointed_run(store)
    records = {i: encode_checkpoint(store.load(i)) for i in ids}
    blobs = {d: store.load_blob(d) for i in ids for d in store.load(i).blob_digests()}
    metadata = store.load(ids[-1]).metadata
    assert metadata["nested"] == {"k": [1, 2, {"deep": [3]}]}
    for i in ids:
        vandalize(store.load(i))
    for cp in store.list(session="s"):
        vandalize(cp)
    vandalize(store.list())
    vandalize(store.latest(session="s"))
    vandalize(store.history(ids[-1]))
    for d in blobs:
        vandalize(store.load_blob(d))
    assert {i: encode_checkpoint(store.load(i)) for i in ids} == records
    assert [encode_checkpoint(cp) for cp in store.list(session="s")] == list(records.values())
    latest = store.latest(session="s")
    assert latest is not None and encode_checkpoint(latest) == records[ids[-1]]
    assert {d: store.load_blob(d) for d in blobs} == blobs
    assert store.verify() == []


@pytest.mark.timeout(30)
def test_a_saved_checkpoint_is_not_the_object_the_caller_passed(store: Any) -> None:
    """Mutating the record and blob map after save() changes nothing stored."""
    ids = _checkpointed_run(store)
    original = store.load(ids[-1])
    copy = dataclasses.replace(original, id=new_checkpoint_id(), parent_id=original.id)
    blobs = {d: store.load_blob(d) for d in copy.blob_digests()}
    store.save(copy, blobs)
    copy_id, expected = copy.id, encode_checkpoint(copy)
    vandalize(copy)
    vandalize(blobs)
    assert encode_checkpoint(store.load(copy_id)) == expected
    assert store.verify() == []


# --- replay and forks ------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_restoring_the_entry_checkpoint_replays_the_whole_run(
    store: Any, backend: af.ActorBackend
) -> None:
    """Resuming the entry checkpoint replays the run from its input, start executor included: same outputs and states."""
    case = graphs.build("fan_burst", 3, 2)
    with case.workflow as wf:
        with wf.session("s", store=store, backend=backend) as s:
            original = s.run(case.input)
        first_final = store.latest(session="s")
        assert first_final is not None
        (entry,) = store.list(session="s", kind=CheckpointKind.ENTRY)
        assert entry.superstep == 0 and entry.parent_id is None
        assert states_of(store, entry)["src"]["forwarded"] == 0, "nothing ran before entry"
        with wf.resume(store, checkpoint_id=entry.id, backend=backend) as replay:
            again = replay.run()
    assert again.outputs == original.outputs
    invoked = [
        (e.superstep, e.executor) for e in again.events if isinstance(e, af.ExecutorInvokedEvent)
    ]
    assert invoked[0] == (1, "src"), "the start executor ran on the replayed input"
    final = store.latest(session="s")
    assert final is not None and final.id != first_final.id
    assert states_of(store, final) == states_of(store, first_final)
    assert states_of(store, final)["src"]["forwarded"] == 2


@pytest.mark.timeout(30)
def test_resuming_an_older_checkpoint_forks_without_overwriting_history(
    store: Any, backend: af.ActorBackend
) -> None:
    """Resuming an older checkpoint forks a branch: the old one intact, both listed, each history() a consistent chain."""
    case = ring_case()
    with case.workflow as wf:
        with wf.session("s", store=store, backend=backend) as s:
            s.run(case.input)
        old = store.list(session="s")
        old_records = {cp.id: encode_checkpoint(cp) for cp in old}
        old_final = old[-1]
        fork_point = next(cp for cp in old if cp.superstep == 4 and cp.kind is CheckpointKind.STEP)
        with wf.resume(store, session="s", checkpoint_id=fork_point.id, backend=backend) as branch:
            result = branch.run()
    assert result.status is af.RunStatus.COMPLETED
    listed = store.list(session="s")
    assert {cp.id: encode_checkpoint(cp) for cp in listed if cp.id in old_records} == old_records
    new = [cp for cp in listed if cp.id not in old_records]
    assert [cp.superstep for cp in new] == [*range(5, 13), 12]
    new_final = store.latest(session="s")
    assert new_final is not None and new_final.id == new[-1].id
    old_chain = store.history(old_final.id)
    new_chain = store.history(new_final.id)
    for chain in (old_chain, new_chain):
        assert [cp.id for cp in chain[1:]] == [cp.parent_id for cp in chain[:-1]]
        assert chain[-1].kind is CheckpointKind.ENTRY and chain[-1].parent_id is None
    assert [cp.id for cp in old_chain] == [cp.id for cp in reversed(old)]
    shared = [cp.id for cp in new_chain if cp.id in old_records]
    assert shared == [cp.id for cp in old_chain if cp.superstep <= 4]
    assert new[0].parent_id == fork_point.id
    assert states_of(store, new_final) == states_of(store, old_final)
    assert store.verify() == []


# --- graph signature -------------------------------------------------------------------


class GStart(af.Executor):
    """Forwards numbers."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n)


class GOut(af.Executor):
    """Outputs numbers."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.output(n)


class SinkV1(af.Executor):
    """Version 1 of a sink: handles int."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.output(n)


class SinkV2(af.Executor):
    """Version 2 of the same sink (same qualified name): handles int or str."""

    @af.handler
    def on_num(self, n: int | str, ctx: af.Context[Any]) -> None:
        ctx.output(n)


SinkV2.__qualname__ = SinkV1.__qualname__ = "VersionedSink"


def _graph(variant: str) -> af.Workflow:
    """``src -> mid -> sink``, and variants that differ in one respect."""
    sink: af.Executor = SinkV2("sink") if variant == "handler" else SinkV1("sink")
    builder = af.WorkflowBuilder("versioned", start=GStart("src"))
    builder.add_edge("src", GStart("mid")).add_edge("mid", sink)
    if variant == "extra":
        builder.add_edge("mid", GOut("audit"))
    if variant == "edge":
        builder.add_edge("src", "sink")
    return builder.build()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("variant", "says"),
    [
        ("extra", "executor 'audit' is in this graph but not in the checkpoint"),
        ("handler", "executor 'sink' handled ['int'], now ['int|str']"),
        (
            "edge",
            'edge ["edge", "src", ["sink"], false] is in this graph but not in the checkpoint',
        ),
    ],
)
def test_resuming_into_a_changed_graph_raises_graph_mismatch_naming_the_change(
    variant: str, says: str
) -> None:
    """An extra executor, a changed handler type, a changed edge: GraphMismatch says which."""
    store = af.MemoryStore()
    with _graph("base") as wf, wf.session("s", store=store) as s:
        assert s.run(1).outputs == [1]
    with _graph(variant) as changed:
        assert changed.signature != _graph_signature("base")
        with pytest.raises(af.GraphMismatch) as info:
            changed.resume(store, session="s")
    assert says in str(info.value)


def _graph_signature(variant: str) -> str:
    with _graph(variant) as wf:
        return wf.signature


# --- incremental storage ---------------------------------------------------------------


@pytest.mark.timeout(60)
def test_storage_grows_with_what_changed_not_with_the_state(store: Any) -> None:
    """Checkpoints of a 100-step ring store only changed chunks: far less than 100 full states (LangGraph #7586)."""
    case = graphs.build("ring", 4, 25, ballast=2000)
    with case.workflow as wf, wf.session("s", store=store) as s:
        result = s.run(case.input)
    assert result.supersteps == 100
    checkpoints = store.list(session="s")
    assert len(checkpoints) == 102  # entry, 100 steps, final
    size: dict[str, int] = {}
    new_bytes = []
    for cp in checkpoints:
        fresh = cp.blob_digests() - size.keys()
        for digest in fresh:
            size[digest] = len(store.load_blob(digest))
        new_bytes.append(sum(size[d] for d in fresh))
    full_state = sum(size[d] for digests in checkpoints[-1].executors.values() for d in digests)
    stored = sum(size.values())
    print(f"\n100-step ring: full state {full_state} B, stored {stored} B in total")
    assert full_state > 100_000
    assert stored < 100 * full_state / 20, (stored, full_state)
    step_costs = new_bytes[1:]
    assert max(step_costs) < full_state / 10, "a checkpoint rewrote unchanged state"
    assert new_bytes[-1] == 0, "the final checkpoint (nothing changed) stores no blob"
