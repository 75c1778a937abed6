"""Sessions: reset (reproducing Microsoft Agent Framework #7347 review findings) and
failed supersteps (MAF #7859): nothing of an abandoned or failed run reaches the next.

Runs are held open at a chosen superstep by ``graphs.HOOK`` blocking on a
threading.Event the test controls (bounded waits everywhere, never a sleep).
"""

from __future__ import annotations

from typing import Any

import pytest

import actorflow as af
from actorflow.testing import inject_fault, run_to_idle
from tests.support import graphs
from tests.support.held_runs import Gate, in_thread, joined, states_of, uninterrupted

# --- reset (MAF #7347 review) -----------------------------------------------------------------


class Forward(af.Executor):
    """Forwards numbers."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n)


class Scale(af.Executor):
    """Sends n * 10."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n * 10)


class Pair(af.Executor):
    """Fan-in target: outputs each pair it gets."""

    @af.handler
    def on_pair(self, values: list[int], ctx: af.Context[Any]) -> None:
        ctx.output(values)


def _half_fan_in() -> af.Workflow:
    """A positive input fills only the ``pos`` half of the fan-in; a negative one the other."""
    builder = af.WorkflowBuilder("half", start=Forward("src"))
    builder.add_switch("src", [af.Case(_positive, Scale("pos")), af.Default(Scale("neg"))])
    builder.add_fan_in(["pos", "neg"], Pair("pair"))
    return builder.build()


def _positive(n: int) -> bool:
    return n > 0


@pytest.mark.timeout(30)
def test_a_half_filled_fan_in_never_combines_with_values_after_reset() -> None:
    """pos delivers, the run goes idle half-filled; after reset() neg's value is not paired with it."""
    with _half_fan_in() as wf:
        with wf.session() as control:
            assert control.run(1).outputs == []
            assert control.run(-1).outputs == [[10, -10]], "the fan-in was half-filled"
        with wf.session() as s:
            assert s.run(1).outputs == []
            s.reset()
            assert s.run(-1).outputs == []
            assert s.run(2).outputs == [[20, -10]], "only values of runs after the reset pair"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("reset", [False, True], ids=["continue", "reset"])
def test_events_of_an_abandoned_stream_never_appear_in_the_next_run(reset: bool) -> None:
    """Break out of a stream mid-run; the next run (after reset() or not) yields only its own events."""
    case = graphs.build("ring", 3, 30)
    with case.workflow as wf, wf.session() as s:
        stream = s.stream(case.input)
        seen = []
        for event in stream:
            seen.append(event)
            if isinstance(event, af.SuperstepCompletedEvent) and event.superstep == 3:
                break
        stream.close()  # type: ignore[attr-defined]  # a generator: close() abandons the run
        abandoned = seen[0].run_id
        if reset:
            s.reset()
        events = list(s.stream(case.input) if reset else s.stream())
    assert events[0].run_id != abandoned
    assert {e.run_id for e in events} == {events[0].run_id}
    assert isinstance(events[0], af.RunStartedEvent) and isinstance(
        events[-1], af.RunCompletedEvent
    )
    if reset:
        assert events[0].superstep == 0
        fresh_outputs, _ = uninterrupted("ring", 3, 30)
        assert [e.value for e in events if isinstance(e, af.OutputEvent)] == fresh_outputs
    else:
        assert events[0].superstep >= 3


@pytest.mark.timeout(30)
def test_reset_during_a_run_raises_session_busy(gate: Gate) -> None:
    """reset() while a run is active raises SessionBusy and changes nothing of the run."""
    case = graphs.build("ring", 3, 2)
    expected, _ = uninterrupted("ring", 3, 2)
    gate.superstep = 3
    with case.workflow as wf, wf.session() as s:
        thread, box = in_thread(s.run, case.input)
        gate.wait_entered()
        with pytest.raises(af.SessionBusy, match="reset"):
            s.reset()
        gate.release.set()
        assert joined(thread, box).outputs == expected


_UNLOADING = Gate()


class _SlowToRelease:
    """A resource whose release (when its actor's executor is dropped) blocks on a gate."""

    def __del__(self) -> None:
        _UNLOADING("resource", 0)


class HoldsResource(af.Executor):
    """Outputs numbers; its resource holds reset() open while it is released."""

    conn = af.resource(_SlowToRelease)

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.output(n)


@pytest.mark.timeout(30)
def test_a_run_during_reset_raises_session_busy() -> None:
    """While reset() is rebuilding (held open in a resource release), run() and reset() raise SessionBusy."""
    global _UNLOADING  # noqa: PLW0603  # one gate per test, read by the resource's __del__
    _UNLOADING = Gate(superstep=0)
    try:
        workflow = af.WorkflowBuilder("held", start=HoldsResource("h")).build()
        with workflow as wf, wf.session() as s:
            assert s.run(1).outputs == [1]
            thread, box = in_thread(s.reset)
            _UNLOADING.wait_entered()
            with pytest.raises(af.SessionBusy, match="start a run"):
                s.run(2)
            with pytest.raises(af.SessionBusy):
                s.reset()
            _UNLOADING.release.set()
            joined(thread, box)
            assert s.run(3).outputs == [3]
    finally:
        _UNLOADING.release.set()


@pytest.mark.timeout(30)
def test_reset_starts_a_new_lineage_from_blueprint_state() -> None:
    """After reset() the next run starts at superstep 0 from blueprint state, under a new lineage."""
    case = graphs.build("chain", 1)
    store = af.MemoryStore()
    with case.workflow as wf, wf.session("s", store=store) as s:
        s.run(3)
        before = {cp.id for cp in store.list(session="s")}
        s.reset()
        result = s.run(4)
    assert result.outputs == [["sink", 2, 8, 8]]
    after = [cp for cp in store.list(session="s") if cp.id not in before]
    assert after[0].kind is af.storage.CheckpointKind.ENTRY and after[0].parent_id is None
    assert states_of(store, "s")["a0"]["seen"] == [4]


# --- failed supersteps (MAF #7859) -----------------------------------------------------------


class Last(af.Executor):
    """Remembers every number and outputs what it has seen."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.seen.append(n)
        ctx.output([self.id, list(self.seen)])


class Keep(Last):
    """Like :class:`Last`, and forwards the number."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        super().on_num(n, ctx)
        ctx.send(n)


def _two_branches(restart: af.RestartPolicy | None = None) -> af.Workflow:
    """``src`` fans out to ``a`` and ``c`` (superstep 2), both feed ``z`` (superstep 3)."""
    builder = af.WorkflowBuilder("branches", start=Keep("src"), restart=restart)
    builder.add_fan_out("src", [Keep("a"), Keep("c")])
    builder.add_edge("a", Last("z")).add_edge("c", "z")
    return builder.build()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("policy", ["store", "restart"])
def test_nothing_of_a_failed_superstep_leaks_into_the_next_run(policy: str) -> None:
    """After a fail-fast superstep the next run sees none of its sends or state changes (MAF #7859)."""
    with _two_branches() as wf, wf.session("ref") as reference:
        with pytest.raises(af.SuperstepLimitExceeded):
            reference.run(1, max_supersteps=1)
        expected = reference.run(5).outputs
    # Fail-fast either way: a store, or a policy that allows no restart (both keep the
    # last good state the supervisor rolls back to).
    restart = af.RestartPolicy(max_restarts=0) if policy == "restart" else None
    with _two_branches(restart) as wf:
        store = af.MemoryStore() if policy == "store" else None
        with wf.session("s", store=store) as s:
            inject_fault(s, "c", 2)
            with pytest.raises(af.ExecutorFailed):
                s.run(1)
            got = s.run(5).outputs
    assert got == expected


@pytest.mark.timeout(30)
def test_without_snapshots_a_failed_superstep_breaks_the_session_until_reset() -> None:
    """Without store or restart policy a failed superstep makes the session refuse runs (SessionBroken) until reset()."""
    with _two_branches() as wf:
        fresh = wf.run(5).outputs
        with wf.session("s") as s:
            inject_fault(s, "c", 2)
            with pytest.raises(af.ExecutorFailed):
                s.run(1)
            with pytest.raises(af.SessionBroken, match="reset"):
                s.run(5)
            s.reset()
            assert s.run(5).outputs == fresh


@pytest.mark.timeout(30)
def test_a_failed_superstep_routes_none_of_its_sends() -> None:
    """The superstep that failed delivered nothing: ``z`` never saw a value in the failed run."""
    with _two_branches() as wf, wf.session() as s:
        inject_fault(s, "c", 2)
        outcome = run_to_idle(s, 1)
    assert isinstance(outcome.error, af.ExecutorFailed)
    events = outcome.events
    invoked = {e.executor for e in events if isinstance(e, af.ExecutorInvokedEvent)}
    assert invoked == {"src", "a", "c"}
    assert [e.value for e in events if isinstance(e, af.OutputEvent)] == [["src", [1]]]
