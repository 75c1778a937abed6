"""Durable checkpoints: isolation from callers, replay, forks, graph checks, safe decoding,
incremental storage, and failures of the store itself.

Reproductions of Microsoft Agent Framework #7683 (a resumed run mutates the checkpoint
it came from; an in-memory store hands out its internals) run against every store.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import msgpack
import pytest

import actorflow as af
from actorflow.actors import decode_state, encode, encode_state
from actorflow.storage import (
    Checkpoint,
    CheckpointKind,
    Lease,
    blob_digest,
    encode_checkpoint,
    new_checkpoint_id,
)
from actorflow.testing import run_to_idle

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphs  # tests/ is on sys.path
import pg

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
    def on_num(self, n: int, ctx: af.Context) -> None:
        ctx.send(n)


class GOut(af.Executor):
    """Outputs numbers."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        ctx.output(n)


class SinkV1(af.Executor):
    """Version 1 of a sink: handles int."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        ctx.output(n)


class SinkV2(af.Executor):
    """Version 2 of the same sink (same qualified name): handles int or str."""

    @af.handler
    def on_num(self, n: int | str, ctx: af.Context) -> None:
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


# --- decoding never runs code ----------------------------------------------------------


class Detonator:
    """Pickles to a call that creates the sentinel file (pickle runs it on load)."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.sentinel),))


def _ext(code: int, body: Any) -> bytes:
    data: bytes = msgpack.packb(msgpack.ExtType(code, msgpack.packb(body)))
    return data


EXT_DATACLASS = 12  # actorflow.actors._codec.EXT_DATACLASS: a registered type by wire name


def _os_system(sentinel: Path) -> bytes:
    """A codec value claiming to be a registered type named ``os.system``."""
    return _ext(EXT_DATACLASS, ["os.system", {"command": f"mkdir {sentinel}"}])


def _pack(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


CRAFTS: dict[str, Callable[[Checkpoint, Path], tuple[dict[str, Any], dict[str, bytes]]]] = {}


def craft(name: str) -> Callable[[Any], Any]:
    def register(fn: Any) -> Any:
        CRAFTS[name] = fn
        return fn

    return register


def _runtime_of(entry: Checkpoint) -> dict[str, Any]:
    found: dict[str, Any] = msgpack.unpackb(entry.runtime, raw=False, strict_map_key=False)
    return found


@craft("runtime-is-a-pickle")
def _runtime_pickle(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    return {"runtime": pickle.dumps(Detonator(sentinel))}, {}


@craft("runtime-names-os.system")
def _runtime_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    runtime = _runtime_of(entry)
    runtime["superstep"] = msgpack.ExtType(
        EXT_DATACLASS, msgpack.packb(["os.system", {"command": f"mkdir {sentinel}"}])
    )
    return {"runtime": _pack(runtime)}, {}


@craft("fan-in-buffer-names-os.system")
def _fan_in_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    runtime = _runtime_of(entry)
    runtime["fan_in"] = {
        "0": msgpack.ExtType(EXT_DATACLASS, msgpack.packb(["os.system", {"command": "x"}]))
    }
    return {"runtime": _pack(runtime)}, {}


@craft("queued-message-is-a-pickle")
def _inbox_pickle(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    runtime = _runtime_of(entry)
    runtime["inbox"] = {"a0": [["__input__", -1, pickle.dumps(Detonator(sentinel))]]}
    return {"runtime": _pack(runtime)}, {}


@craft("queued-message-names-os.system")
def _inbox_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    runtime = _runtime_of(entry)
    runtime["inbox"] = {"a0": [["__input__", -1, _os_system(sentinel)]]}
    return {"runtime": _pack(runtime)}, {}


@craft("snapshot-is-a-pickle")
def _blob_pickle(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    evil = pickle.dumps(Detonator(sentinel))
    executors = dict(entry.executors)
    executors["a1"] = (blob_digest(evil),)
    return {"executors": executors}, {blob_digest(evil): evil}


@craft("snapshot-names-os.system")
def _blob_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    manifest = encode([1, [["cmd", 0, 0, 0]]])  # one inline attribute
    inline = b"\x91" + _os_system(sentinel)  # a msgpack array holding the crafted value
    executors = dict(entry.executors)
    executors["a1"] = (blob_digest(manifest), blob_digest(inline))
    return {"executors": executors}, {blob_digest(manifest): manifest, blob_digest(inline): inline}


@craft("snapshot-value-names-os.system")
def _blob_value_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    # Every attribute GRelay has, so the state passes the attribute check and only
    # decoding its values (which a resume does for bytes it did not write) refuses it.
    manifest, _ = encode_state({"mul": 1, "add": 0, "count": 0, "seen": [], "ballast": []})
    inline = b"\x95" + encode(1) + encode(0) + encode(0) + _os_system(sentinel) + encode([])
    executors = dict(entry.executors)
    executors["a1"] = (blob_digest(manifest), blob_digest(inline))
    return {"executors": executors}, {blob_digest(manifest): manifest, blob_digest(inline): inline}


def _chain(error: BaseException | None) -> list[BaseException]:
    found = []
    while error is not None and len(found) < 10:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


@pytest.mark.timeout(30)
@pytest.mark.parametrize("variant", sorted(CRAFTS))
def test_a_crafted_checkpoint_is_refused_and_runs_nothing(variant: str, tmp_path: Path) -> None:
    """A checkpoint carrying a pickle or naming os.system raises DecodeError/CheckpointCorrupt and runs nothing."""
    sentinel = tmp_path / "sentinel"
    calls: list[tuple[str, int]] = []
    case = graphs.build("chain", 3)
    store, crafted = _crafted_store(case, variant, sentinel)
    graphs.HOOK = lambda executor, superstep: calls.append((executor, superstep))
    error: BaseException | None = None
    try:
        with case.workflow as wf, wf.resume(store, checkpoint_id=crafted.id) as resumed:
            resumed.run()
    except Exception as exc:
        error = exc
    finally:
        graphs.HOOK = None
    assert not sentinel.exists(), "decoding ran code"
    assert calls == [], "a handler ran on crafted data"
    refused = [e for e in _chain(error) if isinstance(e, af.DecodeError | af.CheckpointCorrupt)]
    assert refused, f"expected DecodeError or CheckpointCorrupt, got {error!r}"


def _crafted_store(
    case: graphs.GraphCase, variant: str, sentinel: Path
) -> tuple[af.MemoryStore, Checkpoint]:
    """A store holding a real run of ``case`` and a crafted copy of its entry checkpoint."""
    store = af.MemoryStore()
    with case.workflow.session("s", store=store) as s:
        s.run(case.input)
    (entry,) = store.list(session="s", kind=CheckpointKind.ENTRY)
    changes, blobs = CRAFTS[variant](entry, sentinel)
    crafted = dataclasses.replace(
        entry, id=new_checkpoint_id(), parent_id=None, session="crafted", **changes
    )
    store.save(crafted, blobs)
    return store, crafted


@pytest.mark.timeout(30)
def test_close_after_a_resume_that_could_not_restore_leaves_no_actor_thread(
    tmp_path: Path,
) -> None:
    """A resume whose snapshot cannot be decoded fails before any actor starts; none is left."""
    before = set(threading.enumerate())
    case = graphs.build("chain", 3)
    store, crafted = _crafted_store(case, "snapshot-is-a-pickle", tmp_path / "sentinel")
    with pytest.raises(af.DecodeError, match="stored state cannot be decoded"):
        case.workflow.resume(store, checkpoint_id=crafted.id)
    assert store.current_lease(crafted.session) is None
    case.workflow.close()
    leftover = [t for t in threading.enumerate() if t not in before]
    deadline = time.monotonic() + 2
    for thread in leftover:
        thread.join(timeout=max(deadline - time.monotonic(), 0))
    assert [t.name for t in leftover if t.is_alive()] == []


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
    def on_num(self, n: int, ctx: af.Context) -> None:
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
    assert any(isinstance(e, OSError) for e in _chain(error))
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
    assert any(isinstance(e, OSError) for e in _chain(error))
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
