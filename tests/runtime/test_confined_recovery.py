"""A crash mid-superstep costs only the executors that had not finished it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.storage import CheckpointKind, Lease

INVOKED: list[str] = []
GATE = threading.Event()
SLOW: set[str] = set()


class Source(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n)


class Worker(af.Executor):
    """Records each invocation (a side effect outside the runtime); `SLOW` ones hang."""

    def __init__(self, id: str, factor: int) -> None:
        super().__init__(id)
        self.factor = factor
        self.handled = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        INVOKED.append(self.id)
        if self.id in SLOW:
            GATE.wait(10)  # the "crashed" process never gets past this
            raise RuntimeError("this process is considered dead")
        self.handled += 1
        ctx.send(n * self.factor)


class Gather(af.Executor):
    @af.handler
    def on_all(self, values: list[int], ctx: af.Context[Any]) -> None:
        ctx.output(values)


def build() -> af.Workflow:
    workers = [Worker(f"w{i}", i + 1) for i in range(4)]
    builder = af.WorkflowBuilder("confined", start=Source("src"))
    builder.add_fan_out("src", workers)
    builder.add_fan_in([w.id for w in workers], Gather("gather"))
    return builder.build()


@pytest.mark.timeout(30)
def test_only_unfinished_executors_run_again_after_a_crash(tmp_path: Path) -> None:
    """w2 hangs (the process 'dies'); w0, w1, w3 finished and were persisted on their own;
    a new process resumes and runs only w2 of that superstep; outputs equal the fault-free run."""
    with build() as wf:
        expected = wf.run(5).outputs
    db = tmp_path / "c.db"
    INVOKED.clear()
    SLOW.add("w2")
    crashed_wf = build()
    crashed = crashed_wf.session("s", store=CountingStore(db, partials_wanted=3))
    failures: list[BaseException] = []

    def doomed_run() -> None:
        try:
            crashed.run(5)
        except af.ExecutorFailed as exc:
            failures.append(exc)

    runner = threading.Thread(target=doomed_run)
    runner.start()
    store = af.SQLiteStore(db)
    try:
        assert PARTIALS_SAVED.wait(10), "the finished workers were not persisted"
        partials = store.list(session="s", kind=CheckpointKind.PARTIAL)
        assert sorted(p_id for cp in partials for p_id in cp.executors) == ["w0", "w1", "w3"]
        assert all(cp.parent_id == store.load(partials[0].parent_id or "").id for cp in partials)
        SLOW.clear()
        INVOKED.clear()
        _die(store, crashed)
        with build() as fresh, fresh.resume(store, session="s") as resumed:
            result = resumed.run()
        assert INVOKED == ["w2"], "a worker that had finished ran again"
        assert result.outputs == expected
        store.prune("s", keep=1)
        assert [cp.kind for cp in store.list(session="s")] == [CheckpointKind.FINAL]
        final = store.latest(session="s")
        assert final is not None and final.kind is CheckpointKind.FINAL
    finally:
        GATE.set()
        runner.join(timeout=10)
        assert len(failures) == 1, "the 'crashed' run should fail once its worker gives up"
        crashed.close()
        crashed_wf.close()
        GATE.clear()
        store.close()


PARTIALS_SAVED = threading.Event()


class CountingStore(af.SQLiteStore):
    """A SQLiteStore that signals once the wanted number of partial records is saved."""

    def __init__(self, path: Path, *, partials_wanted: int) -> None:
        super().__init__(path)
        self._wanted = partials_wanted
        PARTIALS_SAVED.clear()

    def save(
        self,
        checkpoint: af.storage.Checkpoint,
        blobs: Mapping[str, bytes],
        *,
        lease: Lease | None = None,
    ) -> None:
        super().save(checkpoint, blobs, lease=lease)
        if checkpoint.kind is CheckpointKind.PARTIAL:
            self._wanted -= 1
            if self._wanted == 0:
                PARTIALS_SAVED.set()


def _die(store: af.CheckpointStore, crashed: af.Session) -> None:
    """End the "crashed" session's ownership as its death would (its lease ends)."""
    assert crashed.lease is not None
    store.release_lease(crashed.lease)


@pytest.mark.timeout(30)
def test_partial_records_whose_cut_was_deleted_give_a_clear_error(tmp_path: Path) -> None:
    """If deleting cuts left only partial records, resuming says so instead of failing
    obscurely (prune never does this: partial records follow their parent cut)."""
    db = tmp_path / "p.db"
    SLOW.add("w2")
    crashed_wf = build()
    crashed = crashed_wf.session("s", store=CountingStore(db, partials_wanted=3))
    runner = threading.Thread(target=lambda: _swallow(crashed.run, 5))
    runner.start()
    store = af.SQLiteStore(db)
    try:
        assert PARTIALS_SAVED.wait(10)
        for cp in store.list(session="s"):
            if cp.kind is not CheckpointKind.PARTIAL:
                store.delete(cp.id)
        assert {cp.kind for cp in store.list(session="s")} == {CheckpointKind.PARTIAL}
        _die(store, crashed)
        with build() as fresh, pytest.raises(af.CheckpointNotFound, match="no longer stored"):
            fresh.resume(store, session="s")
    finally:
        SLOW.clear()
        GATE.set()
        runner.join(timeout=10)
        crashed.close()
        crashed_wf.close()
        GATE.clear()
        store.close()


def _swallow(run: Callable[[int], object], value: int) -> None:
    try:
        run(value)
    except af.ActorflowError:
        pass  # the "crashed" run fails once its worker gives up; that is expected here
