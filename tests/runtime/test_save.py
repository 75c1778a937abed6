"""``Session.save``: a session stored before its first run (a new one, or a fork), so
that another process finds it and resumes it, as it finds any session that has run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

import actorflow as af
from actorflow.runtime.checkpoints import SAVED_KEY, at_rest
from actorflow.storage import CheckpointKind

BOUND = 20.0
"""Seconds any wait of these tests may take."""


class Counter(af.Executor):
    """Adds each number to its total, sends the total on."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.total = 0

    @af.handler
    def on_n(self, n: int, ctx: af.Context[int]) -> None:
        self.total += n
        ctx.send(self.total)


class Show(af.Executor):
    """Outputs what it gets; waits for :data:`GATE` first when it is closed."""

    @af.handler
    def on_n(self, n: int, ctx: af.Context[None]) -> None:
        INSIDE.set()
        assert GATE.wait(BOUND)
        ctx.output(n)


GATE = threading.Event()
GATE.set()  # open, unless a test closes it
INSIDE = threading.Event()


@pytest.fixture
def wf() -> Iterator[af.Workflow]:
    GATE.set()
    builder = af.WorkflowBuilder("counting", start=Counter("count")).add_edge("count", Show("show"))
    with builder.build() as built:
        yield built
    GATE.set()


def test_a_new_session_saved_is_resumed_by_another_opener(wf: af.Workflow) -> None:
    """A session never run stores one ``final`` cut at superstep 0, with the metadata
    given and no history (nothing ran); another opener resumes it (its lease given
    back) and runs it."""
    store = af.MemoryStore()
    with wf.session("fresh", store=store) as session:
        assert store.latest(session="fresh") is None
        saved = session.save(metadata={"owner": "ann"})
        cut = store.latest(session="fresh")
        assert cut is not None and saved == cut.id == session.last_checkpoint_id
        assert cut.kind is CheckpointKind.FINAL and cut.superstep == 0 and cut.parent_id is None
        assert cut.metadata == {"owner": "ann"} and cut.history == ()
        assert session.history() == []
    with wf.resume(store, session="fresh") as again:
        assert again.run(2).outputs == [2]
        assert again.run(3).outputs == [5]
    kinds = [c.kind.value for c in store.list(session="fresh")]
    assert kinds[0] == "final" and kinds.count("entry") == 2


def test_an_idle_session_saved_again_gets_a_newer_cut_of_the_same_state(
    wf: af.Workflow,
) -> None:
    """A stored idle session's save writes a ``final`` cut of the same state after its
    newest one, with the new metadata and no history; its state and history go on."""
    store = af.MemoryStore()
    with wf.session("ran", store=store) as session:
        session.run(4)
        last = store.latest(session="ran")
        assert last is not None
        saved = session.save(metadata={"label": "blue"})
        cut = store.latest(session="ran")
        assert cut is not None and cut.id == saved and cut.parent_id == last.id
        assert cut.kind is CheckpointKind.FINAL and cut.superstep == last.superstep
        assert cut.metadata == {"label": "blue"} and cut.history == ()
        assert cut.executors == last.executors
        events = len(session.history())
        assert session.run(1).outputs == [5]
        assert len(session.history()) > events
    with wf.resume(store, session="ran") as again:
        assert again.run(1).outputs == [6]


def test_a_stored_session_whose_run_stopped_midway_is_not_saved(wf: af.Workflow) -> None:
    """A stored session whose last run stopped with messages in flight (its process
    died after a barrier) refuses a save, which would hide the cut that says why it
    stopped: SessionBusy says to run it on; nothing is written; the run goes on."""
    store = af.MemoryStore()
    with (
        wf.session("stopped", store=store) as session,
        pytest.raises(af.SuperstepLimitExceeded),
    ):
        session.run(3, max_supersteps=1)
    before = store.list(session="stopped")
    with wf.resume(store, session="stopped") as again:
        with pytest.raises(af.SessionBusy, match="run it on"):
            again.save(metadata={"label": "red"})
        assert store.list(session="stopped") == before
        assert again.run().outputs == [3]


def test_a_session_cancelled_at_a_barrier_is_saved_and_its_next_run_goes_on(
    wf: af.Workflow,
) -> None:
    """A run cancelled (its superstep rolled back, its messages in flight again) stops
    as asked, at a barrier: a newer cut hides nothing, so a save is taken (new
    metadata, say) and writes a ``step`` cut marked as saved (a run's step cut may be
    the last of a process that died); the next run, in another
    opener, delivers what was in flight."""
    store = af.MemoryStore()
    with wf.session("cancelled", store=store) as session:
        GATE.clear()
        INSIDE.clear()
        try:
            for event in session.stream(5):
                if isinstance(event, af.ExecutorInvokedEvent) and event.executor == "show":
                    assert INSIDE.wait(BOUND)
                    session.cancel()
        finally:
            GATE.set()  # the abandoned handler may finish now
        halted = store.latest(session="cancelled")
        assert halted is not None and halted.kind is CheckpointKind.HALT
        saved = session.save(metadata={"label": "red"})
    assert saved is not None
    cut = store.load(saved)
    assert cut.kind is CheckpointKind.STEP and cut.superstep == halted.superstep
    assert cut.metadata == {"label": "red", SAVED_KEY: True}
    assert at_rest(cut) and at_rest(halted)
    with wf.resume(store, session="cancelled") as again:
        again.save(metadata={"label": "blue"})  # a saved cut hides nothing either
        assert again.run().outputs == [5]


def test_a_fork_saved_before_its_first_run_holds_the_source_state(wf: af.Workflow) -> None:
    """A fork of an idle cut stores a ``final`` cut of the source's state under the new
    id, its parent that cut; the source lineage is untouched; the fork resumes."""
    store = af.MemoryStore()
    with wf.session("source", store=store) as source:
        source.run(10)
        idle = source.last_checkpoint_id
    before = store.list(session="source")
    with wf.resume(store, checkpoint_id=idle, as_session="fork") as fork:
        saved = fork.save(metadata={"forked_from": "source"})
    assert saved is not None
    cut = store.load(saved)
    assert cut.session == "fork" and cut.parent_id == idle and cut.kind is CheckpointKind.FINAL
    assert store.list(session="source") == before
    with wf.resume(store, session="fork") as again:
        assert again.run(1).outputs == [11]


def test_a_fork_of_a_cut_with_messages_in_flight_is_saved_as_a_step(wf: af.Workflow) -> None:
    """A fork of a barrier with messages in flight is stored as a ``step`` cut (not idle):
    its next run delivers them."""
    store = af.MemoryStore()
    with wf.session("source", store=store) as source:
        source.run(7)
    step = next(c for c in store.list(session="source") if c.kind is CheckpointKind.STEP)
    assert step.superstep == 1  # the count's total in flight to show
    with wf.resume(store, checkpoint_id=step.id, as_session="midway") as fork:
        saved = fork.save()
    assert saved is not None
    cut = store.load(saved)
    assert cut.kind is CheckpointKind.STEP and cut.superstep == step.superstep
    assert at_rest(cut) and not at_rest(step)  # the step a run wrote: it may have died
    with wf.resume(store, session="midway") as again:
        again.save(metadata={"label": "kept"})  # its new metadata, before its first run
        assert again.run().outputs == [7]


def test_a_save_during_a_run_is_refused_and_a_save_without_a_store_stores_nothing(
    wf: af.Workflow,
) -> None:
    """A save needs the session's turn, as a run does; without a store it is None."""
    store = af.MemoryStore()
    with wf.session("busy", store=store) as session:
        GATE.clear()
        INSIDE.clear()
        outputs: list[object] = []
        running = threading.Thread(target=lambda: outputs.extend(session.run(1).outputs))
        running.start()
        try:
            assert INSIDE.wait(BOUND)
            with pytest.raises(af.SessionBusy):
                session.save()
        finally:
            GATE.set()
            running.join(BOUND)
        assert outputs == [1]
    with wf.session("nowhere") as unstored:
        assert unstored.save() is None


def test_asave_stores_from_an_event_loop(wf: af.Workflow) -> None:
    """asave stores as save does, awaited on the loop."""
    store = af.MemoryStore()

    async def main() -> str | None:
        async with await wf.asession("loop", store=store) as session:
            return await session.asave(metadata={"via": "asave"})

    saved = asyncio.run(main())
    cut = store.latest(session="loop")
    assert cut is not None and cut.id == saved and cut.metadata == {"via": "asave"}


@pytest.mark.parametrize("restart", [None, af.RestartPolicy()])
@pytest.mark.parametrize("first", ["run", "save"])
def test_a_fork_whose_source_is_deleted_before_its_first_cut_is_stored_whole(
    first: str, restart: af.RestartPolicy | None
) -> None:
    """A fork holds its source's state from the resume on: its first cut stores every
    blob it references, so the source session deleted before that cut (its blobs with
    it) loses the fork nothing; the store verifies clean and the fork resumes."""
    builder = af.WorkflowBuilder("counting", start=Counter("count"), restart=restart).add_edge(
        "count", Show("show")
    )
    store = af.MemoryStore()
    with builder.build() as wf:
        with wf.session("source", store=store) as source:
            source.run(10)
            idle = source.last_checkpoint_id
        with wf.resume(store, checkpoint_id=idle, as_session="fork") as fork:
            af.delete_session(store, "source")
            assert store.list(session="source") == []
            if first == "save":
                assert fork.save() is not None
            assert fork.run(1).outputs == [11]
        assert store.verify() == []
        with wf.resume(store, session="fork") as again:
            assert again.run(2).outputs == [13]
