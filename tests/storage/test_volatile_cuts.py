"""A MemoryStore's step cut is written while the next superstep starts.

Its records end with the process, so the supervisor sends the next superstep
before storing the last barrier's cut, and reads none of its answers before the
cut is stored. These tests hold the store's write or a handler on events the test
controls (bounded waits, never a sleep) and check what the user can see: the event
order, the cuts in the store, and that cancel, the superstep limit and a failed
write leave the session where the non-overlapped order would.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode_state
from actorflow.storage import Checkpoint, CheckpointKind, Lease
from actorflow.storage._cut import Cut
from actorflow.testing import run_to_idle
from tests.support import graphs
from tests.support.held_runs import states_of, uninterrupted

WAIT = 10.0
"""Bound on every wait for another thread."""


class HeldStore(af.MemoryStore):
    """Calls ``on_cut(cut)`` before storing each step cut (it may block, or raise)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_cut: Any = None

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        super().save(checkpoint, blobs, lease=lease)

    def save_cut(self, cut: Cut, blobs: Mapping[str, bytes], lease: Lease | None = None) -> None:
        if self.on_cut is not None and cut.kind == "step":
            self.on_cut(cut)
        super().save_cut(cut, blobs, lease)


def assert_latest_is_step_cut(store: af.MemoryStore, superstep: int) -> None:
    """The run stopped at barrier ``superstep``: its step cut is stored, and the halt cut
    that ends the run (saying why) follows it with the same state."""
    halt = store.latest(session="s")
    assert halt is not None and halt.parent_id is not None
    assert (halt.superstep, halt.kind) == (superstep, CheckpointKind.HALT)
    step = store.load(halt.parent_id)
    assert (step.superstep, step.kind) == (superstep, CheckpointKind.STEP)
    assert step.executors == halt.executors


def assert_as_uninterrupted(outputs: list[Any], store: af.MemoryStore) -> None:
    """Outputs and final states of session "s" are those of an uninterrupted ring(3, 3)."""
    expected, states = uninterrupted("ring", 3, 3)
    assert outputs == expected
    assert states_of(store, "s") == states


@pytest.fixture
def hook() -> Iterator[None]:
    yield
    graphs.HOOK = None


@pytest.mark.timeout(30)
@pytest.mark.usefixtures("hook")
def test_the_cut_is_stored_while_the_next_superstep_runs() -> None:
    """The write of cut 2 waits until a handler of superstep 3 has started: it completes."""
    store = HeldStore()
    started_3 = threading.Event()

    def mark(executor: str, superstep: int) -> None:
        if superstep == 3:
            started_3.set()

    graphs.HOOK = mark

    def hold(cut: Cut) -> None:
        if cut.superstep == 2:
            assert started_3.wait(WAIT), "superstep 3 did not start before cut 2 was stored"

    store.on_cut = hold
    case = graphs.build("ring", 3, 3)
    with case.workflow as wf, wf.session("s", store=store) as session:
        outcome = run_to_idle(session, case.input)
    assert outcome.error is None
    assert_as_uninterrupted(outcome.outputs, store)


@pytest.mark.timeout(30)
def test_events_keep_their_order_and_every_barrier_has_its_cut() -> None:
    """Checkpointed(k) comes after SuperstepCompleted(k) and before SuperstepStarted(k + 1);
    the store holds one step cut per superstep, each the parent of the next."""
    store = af.MemoryStore()
    case = graphs.build("fan_cycle", 3, 3)
    with case.workflow as wf, wf.session("s", store=store) as session:
        outcome = run_to_idle(session, case.input)
    assert outcome.error is None
    marks = [
        (type(e).__name__, e.superstep)
        for e in outcome.events
        if isinstance(
            e, af.SuperstepStartedEvent | af.SuperstepCompletedEvent | af.CheckpointedEvent
        )
    ]
    last = max(superstep for _, superstep in marks)
    expected = [("CheckpointedEvent", 0)]
    for superstep in range(1, last + 1):
        expected += [
            ("SuperstepStartedEvent", superstep),
            ("SuperstepCompletedEvent", superstep),
            ("CheckpointedEvent", superstep),
        ]
    expected.append(("CheckpointedEvent", last))  # the final cut
    assert marks == expected
    cuts = [cp for cp in store.list(session="s") if cp.kind is not CheckpointKind.PARTIAL]
    assert [cp.superstep for cp in cuts] == [*range(last + 1), last]
    assert all(b.parent_id == a.id for a, b in itertools.pairwise(cuts))


@pytest.mark.timeout(30)
@pytest.mark.usefixtures("hook")
def test_cancel_at_a_barrier_still_stores_its_cut() -> None:
    """Cancelled at barrier 4: cut 4 is stored and a later run ends as an uninterrupted one."""
    store = af.MemoryStore()
    case = graphs.build("ring", 3, 3)
    holder: dict[str, af.Session] = {}

    def cancel_in_4(executor: str, superstep: int) -> None:
        if superstep == 4:
            holder["s"].cancel()

    graphs.HOOK = cancel_in_4
    with case.workflow as wf, wf.session("s", store=store) as session:
        holder["s"] = session
        first = session.run(case.input)
        assert first.status is af.RunStatus.CANCELLED
        assert_latest_is_step_cut(store, 4)
        graphs.HOOK = None
        rest = session.run()
    assert_as_uninterrupted(first.outputs + rest.outputs, store)


@pytest.mark.timeout(30)
def test_the_superstep_limit_still_stores_the_last_cut() -> None:
    """Stopped by max_supersteps=5: cut 5 is stored, and resuming from it finishes the run."""
    store = af.MemoryStore()
    case = graphs.build("ring", 3, 3)
    with case.workflow as wf:
        with wf.session("s", store=store) as session:
            first = run_to_idle(session, case.input, max_supersteps=5)
            assert isinstance(first.error, af.SuperstepLimitExceeded)
        assert_latest_is_step_cut(store, 5)
        with wf.resume(store, session="s") as resumed:
            rest = resumed.run()
    assert_as_uninterrupted(first.outputs + rest.outputs, store)


@pytest.mark.timeout(30)
def test_a_failed_write_fails_the_run_at_its_barrier_and_rolls_back_the_next_superstep() -> None:
    """Cut 3 cannot be stored: the run fails at barrier 3 with superstep 4 unstarted to the
    user and rolled back, and a later run of the session ends as an uninterrupted one."""
    store = HeldStore()

    def refuse(cut: Cut) -> None:
        if cut.superstep == 3:
            store.on_cut = None
            raise OSError("no room (simulated)")

    store.on_cut = refuse
    case = graphs.build("ring", 3, 3)
    with case.workflow as wf, wf.session("s", store=store) as session:
        failed = run_to_idle(session, case.input)
        assert isinstance(failed.error, af.CheckpointWriteFailed)
        assert "after superstep 3" in str(failed.error)
        assert max(e.superstep for e in failed.events) == 3
        assert not any(
            isinstance(e, af.SuperstepStartedEvent) and e.superstep == 4 for e in failed.events
        )
        assert any(isinstance(e, af.CheckpointFailedEvent) for e in failed.events)
        rest = session.run()
    assert_as_uninterrupted(failed.outputs + rest.outputs, store)


def cut_states(store: Any, session: str) -> dict[int, dict[str, Any]]:
    """Superstep -> executor states of every step cut of ``session``."""
    return {
        cp.superstep: {
            eid: decode_state([store.load_blob(d) for d in digests])
            for eid, digests in cp.executors.items()
        }
        for cp in store.list(session=session)
        if cp.kind is CheckpointKind.STEP
    }


@pytest.mark.timeout(30)
@pytest.mark.parametrize("every", [1, 2, 3])
def test_cuts_hold_the_state_of_their_barrier_whatever_the_policy(
    every: int, tmp_path: Path
) -> None:
    """Every step cut in a MemoryStore holds the same states as the same cut in a FileStore,
    which writes before the next superstep starts (with ``every`` > 1 some snapshots are
    taken only at the barrier, and must not be taken after the next superstep ran)."""
    policy = af.CheckpointPolicy(every=every)
    kept: dict[str, dict[int, dict[str, Any]]] = {}
    for name in ("memory", "file"):
        case = graphs.build("fan_cycle", 3, 10_000)
        store: Any = af.MemoryStore() if name == "memory" else af.FileStore(tmp_path / "files")
        with case.workflow as wf, wf.session("s", store=store, checkpoint=policy) as session:
            assert session.run(case.input).status is af.RunStatus.COMPLETED
        kept[name] = cut_states(store, "s")
        store.close()
    assert kept["memory"] == kept["file"]
    assert sorted(kept["memory"]) == [s for s in sorted(kept["file"]) if s % every == 0]
    assert len(kept["memory"]) >= 4
