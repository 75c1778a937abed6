"""The checkpoint path's caches: records and last good states follow every change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

import actorflow as af
from actorflow.runtime._policy import CheckpointPolicy
from actorflow.runtime._wire import pack
from actorflow.runtime.checkpoints._checkpointing import Checkpointer
from actorflow.runtime.checkpoints._state import PackedEntries, RunState
from actorflow.runtime.supervisor._last_good import LastGood
from actorflow.storage import Checkpoint, Lease, MemoryStore, blob_digest
from actorflow.storage._cut import EMPTY_METADATA


class Idle(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.output(n)


def writer() -> tuple[Checkpointer, MemoryStore]:
    store = MemoryStore()
    with af.WorkflowBuilder("w", start=Idle("a")).build() as wf:
        spec = wf._spec
    return Checkpointer(store, spec, "s", CheckpointPolicy()), store


def write(checkpointer: Checkpointer, snapshots: dict[str, list[str]], chunks: Any) -> str:
    return checkpointer.write(
        kind="step",
        superstep=1,
        state=RunState(),
        snapshots=snapshots,
        chunks=chunks,
        metadata=EMPTY_METADATA,
    )


def test_records_follow_snapshots_changed_in_place_or_replaced() -> None:
    """Each record names the digests given at its write, however the mapping changed."""
    one, two, three = b"one", b"two", b"three"
    d1, d2, d3 = blob_digest(one), blob_digest(two), blob_digest(three)
    checkpointer, store = writer()
    snapshots = {"a": [d1]}
    first = write(checkpointer, snapshots, {d1: one})
    same = write(checkpointer, snapshots, {d1: one})
    snapshots["a"][0] = d2  # the caller's own list, changed in place
    changed = write(checkpointer, snapshots, {d2: two})
    snapshots["b"] = [d3, d1]
    grown = write(checkpointer, snapshots, {d3: three, d1: one})
    replaced = write(checkpointer, {"a": [d1]}, {d1: one})
    executors = {i: dict(store.load(i).executors) for i in (first, same, changed, grown, replaced)}
    assert executors == {
        first: {"a": (d1,)},
        same: {"a": (d1,)},
        changed: {"a": (d2,)},
        grown: {"a": (d2,), "b": (d3, d1)},
        replaced: {"a": (d1,)},
    }
    assert [store.load_blob(d) for d in (d1, d2, d3)] == [one, two, three]
    assert store.verify() == []


class Keeping(MemoryStore):
    """Also keeps the record objects it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[Checkpoint] = []

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        self.given.append(checkpoint)
        super().save(checkpoint, blobs, lease=lease)


def test_records_of_one_lineage_share_no_container() -> None:
    """A record's executors are its own even when the digests did not change."""
    digest = blob_digest(b"x")
    store = Keeping()
    with af.WorkflowBuilder("w", start=Idle("a")).build() as wf:
        checkpointer = Checkpointer(store, wf._spec, "s", CheckpointPolicy())
    for _ in range(2):
        write(checkpointer, {"a": [digest]}, {digest: b"x"})
    first, second = store.given
    assert first.executors == second.executors
    assert first.executors is not second.executors


def test_runtime_record_is_one_msgpack_map_with_the_extra_entries() -> None:
    """The spliced runtime bytes are what msgpack writes for the whole map."""
    graph = {"nodes": ["a", "b"], "edges": [["a", "b"]]}
    extra = PackedEntries({"graph": pack(graph)})
    busy = RunState(
        superstep=7,
        inbox={"b": [["a", -1, b"\x05"]]},
        fan_in={0: {"a": [b"\x01"]}},
        pending={"r1": ["a", b"\x02", "int"]},
        answered={"r0", "q9"},
    )
    large = RunState(superstep=8, inbox={"b": [["a", -1, b"\x07" * 10_000]]})
    # Each of the entries packed once when empty, non-empty alone:
    waiting = RunState(superstep=9, fan_in={1: {"b": [b"\x03"]}})
    asking = RunState(superstep=10, pending={"r2": ["b", b"\x04", "str"]})
    answered = RunState(superstep=11, answered={"r2"})
    for state in (RunState(), busy, large, waiting, asking, answered):
        expected = msgpack.packb(
            {
                "superstep": state.superstep,
                "inbox": state.inbox,
                "fan_in": {str(g): s for g, s in state.fan_in.items()},
                "pending": state.pending,
                "answered": sorted(state.answered),
                "seq": state.superstep * 3,
                "graph": graph,
            },
            use_bin_type=True,
        )
        assert state.to_bytes(extra, state.superstep * 3) == expected


def test_last_good_holds_exactly_the_chunks_some_snapshot_uses() -> None:
    """Remembering a snapshot keeps the bytes it uses and forgets those nothing uses."""
    last = LastGood(None)
    last.remember("a", [("d1", b"1"), ("d2", b"2")])
    last.remember("b", [("d2", None)])
    last.remember("a", [("d1", None), ("d2", None)])  # unchanged: nothing to forget
    assert last.chunks == {"d1": b"1", "d2": b"2"}
    last.remember("a", [("d3", b"3")])
    assert last.chunks == {"d2": b"2", "d3": b"3"}  # d2 is still b's
    last.remember("b", [("d3", None)])
    assert last.chunks == {"d3": b"3"}
    assert last.snapshot_of("a") == [("d3", b"3")] and last.exact(["a", "b"])
