"""A superstep's finished parts survive a resume with the state they finished with.

With sync checkpoints, each executor's finished part of a superstep (its report and
its post-step snapshot) is stored as a ``partial`` record the moment it arrives. A
process that resumes after the superstep was cut short (a crash, or a failure the
restart policy did not absorb) re-runs only the executors without a part, and the
ones with a part must go on from the state their part stored: their next superstep
sees every change they made in the cut-short one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.storage import Checkpoint, Lease

PARTIAL_STORED = threading.Event()
"""Set once the fast worker's part of superstep 2 is in the store."""


class Source(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n)


class Fast(af.Executor):
    """Adds every value to its total; in the second round it outputs the total."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.total = 0
        self.rounds = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.total += n
        self.rounds += 1
        ctx.output([self.id, self.rounds, self.total])
        if self.rounds == 1:
            ctx.send(n + 1)


class Slow(af.Executor):
    """Fails its first call once the fast worker's part is stored (on the first attempt)."""

    fail = True

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.seen += 1
        if Slow.fail:
            assert PARTIAL_STORED.wait(10), "the fast worker's part was never stored"
            raise RuntimeError("the slow worker fails after the fast one finished")
        ctx.output([self.id, self.seen, n])


class Loop(af.Executor):
    """Sends the fast worker's value back to it once."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n)


def build() -> af.Workflow:
    builder = af.WorkflowBuilder("partial_resume", start=Source("src"))
    builder.add_fan_out("src", [Fast("fast"), Slow("slow")])
    builder.add_edge("fast", Loop("loop"))
    builder.add_edge("loop", "fast")
    return builder.build()


class NotingStore:
    """Delegates to a store; sets PARTIAL_STORED when a partial record is saved."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        self._inner.save(checkpoint, blobs, lease=lease)
        if checkpoint.kind == "partial":
            PARTIAL_STORED.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture(params=["memory", "file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    kind = request.param
    inner: Any
    if kind == "memory":
        inner = af.MemoryStore()
    elif kind == "file":
        inner = af.FileStore(tmp_path / "store")
    else:
        inner = af.SQLiteStore(tmp_path / "store.db")
    PARTIAL_STORED.clear()
    Slow.fail = True
    try:
        yield inner
    finally:
        Slow.fail = True
        inner.close()


def test_a_finished_part_keeps_its_state_after_a_resume(store: Any) -> None:
    """The fast worker's second round sees the total of its first, stored in its part."""
    with build() as wf:
        with wf.session("s", store=NotingStore(store)) as s, pytest.raises(af.ExecutorFailed):
            s.run(10)
        # The failed run ended with a halt cut; without it (a process that died before
        # writing it) the newest record is the finished part, which a resume reuses.
        halt = store.latest(session="s")
        assert halt.kind == "halt"
        store.delete(halt.id)
        assert store.latest(session="s").kind == "partial"
        Slow.fail = False
        with wf.resume(store, session="s") as resumed:
            outputs = resumed.run().outputs
    # Superstep 2 (fast and slow): fast's part came from the store, slow ran again;
    # superstep 4: fast's second round, which must add to the total of its first.
    assert ["fast", 1, 10] in outputs
    assert ["fast", 2, 21] in outputs
    assert ["slow", 1, 10] in outputs
