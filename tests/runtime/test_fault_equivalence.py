"""Supervision: a restarted run is indistinguishable from a run without the fault.

For every graph of the corpus (tests/support/graphs.py) and every (executor, superstep) at
which the fault-free run invokes an executor, a run with one injected fault there
(and a restart policy) ends with the fault-free run's outputs, in order, and the
fault-free run's final executor states (read from the final checkpoint's snapshots
in a MemoryStore). Exceptions are injected at every point; actor deaths at every
other point; timeouts at one point per graph (each costs the executor's time limit).
Past the restart intensity the run fails with the original error chained.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode_state
from actorflow.storage import CheckpointKind
from actorflow.testing import FaultKind, InjectedFault, RunOutcome, inject_fault, run_to_idle
from tests.support import graphs

CORPUS = graphs.corpus()

CORPUS_GRAPHS = 21
"""Graphs in the corpus."""
EXCEPTION_CASES = 181
"""(graph, executor, superstep) exception faults checked, with a store (states and outputs)."""
EXCEPTION_CASES_NO_STORE = EXCEPTION_CASES
"""The same faults without a store (outputs only: nothing else is observable)."""
DEATH_CASES = 94
"""Actor deaths checked (every other fault point of each graph)."""
TIMEOUT_CASES = CORPUS_GRAPHS
"""Timeouts checked (the middle fault point of each graph)."""
TOTAL_CASES = EXCEPTION_CASES + EXCEPTION_CASES_NO_STORE + DEATH_CASES + TIMEOUT_CASES

POLICY = af.RestartPolicy(max_restarts=5, within_seconds=60)
TIMEOUT = 0.2
"""Per-superstep limit for timeout faults: a step of these graphs takes ~1 ms."""

Point = tuple[str, int]
Fault = tuple[str, int, FaultKind]


@dataclass(frozen=True)
class Observed:
    """One run of a corpus graph: how it ended, and its final executor states."""

    outcome: RunOutcome
    states: dict[str, dict[str, Any]] | None


def observe(
    name: str,
    faults: tuple[Fault, ...] = (),
    *,
    store: bool = True,
    timeout: float | None = None,
    restart: af.RestartPolicy | None = POLICY,
    backend: af.ActorBackend | None = None,
) -> Observed:
    """Run corpus graph ``name`` in a fresh session (on ``backend``) with ``faults`` injected."""
    case = graphs.build_corpus_graph(name, restart=restart, timeout=timeout)
    memory = af.MemoryStore() if store else None
    with (
        case.workflow as wf,
        wf.session("equivalence", store=memory, backend=backend) as session,
    ):
        for executor, superstep, kind in faults:
            inject_fault(session, executor, superstep, kind)
        outcome = run_to_idle(session, case.input)
    states = None
    if memory is not None and outcome.error is None:
        final = memory.latest(session="equivalence")
        assert final is not None and final.kind is CheckpointKind.FINAL
        states = {
            eid: decode_state([memory.load_blob(d) for d in digests])
            for eid, digests in final.executors.items()
        }
    return Observed(outcome, states)


def fault_points(observed: Observed) -> list[Point]:
    """Every (executor, superstep) the run invoked, in superstep then id order."""
    points = {
        (e.executor, e.superstep)
        for e in observed.outcome.events
        if isinstance(e, af.ExecutorInvokedEvent)
    }
    return sorted(points, key=lambda p: (p[1], p[0]))


@pytest.fixture(scope="module")
def baselines() -> dict[str, tuple[Observed, list[Point]]]:
    """The fault-free run of every corpus graph and its fault points."""
    found = {}
    for name in CORPUS:
        observed = observe(name)
        assert observed.outcome.status is af.RunStatus.COMPLETED, observed.outcome.error
        assert observed.outcome.restarts == 0
        found[name] = (observed, fault_points(observed))
    return found


def _mismatches(
    name: str, base: Observed, runs: list[tuple[Point, str, Observed]], exact_restarts: bool
) -> list[str]:
    problems = []
    for (executor, superstep), kind, got in runs:
        where = f"{name}: {kind} in {executor!r} at superstep {superstep}"
        outcome = got.outcome
        if outcome.status is not base.outcome.status:
            problems.append(f"{where}: status {outcome.status} ({outcome.error!r})")
            continue
        if outcome.outputs != base.outcome.outputs:
            problems.append(f"{where}: outputs {outcome.outputs} != {base.outcome.outputs}")
        if got.states != base.states:
            problems.append(f"{where}: final states {got.states} != {base.states}")
        restarted = [e for e in outcome.events if isinstance(e, af.RunRestartedEvent)]
        if exact_restarts and len(restarted) != 1:
            problems.append(f"{where}: {len(restarted)} restarts, expected 1")
        if not any(e.executor == executor and e.superstep == superstep for e in restarted):
            problems.append(f"{where}: no RunRestartedEvent for the fault")
    return problems


def test_corpus_and_case_counts_are_what_this_module_claims(
    baselines: dict[str, tuple[Observed, list[Point]]],
) -> None:
    """The corpus has the graphs and fault points the module constants claim (no silent shrink)."""
    points = sum(len(p) for _, p in baselines.values())
    deaths = sum(len(p[::2]) for _, p in baselines.values())
    print(
        f"\nfault equivalence: {len(baselines)} graphs, {points} exception points "
        f"(x2: with and without a store), {deaths} deaths, {len(baselines)} timeouts; "
        f"{TOTAL_CASES} faulted runs"
    )
    assert len(baselines) >= CORPUS_GRAPHS
    assert points >= EXCEPTION_CASES
    assert deaths >= DEATH_CASES
    families = {graphs.CORPUS[name][0] for name in baselines}
    assert families == set(graphs.FAMILIES), "every family is in the corpus"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", CORPUS)
def test_an_exception_at_any_point_leaves_outputs_and_states_unchanged(
    name: str, baselines: dict[str, tuple[Observed, list[Point]]]
) -> None:
    """An exception (raised after the handlers changed state) at every point: same outputs, same states."""
    base, points = baselines[name]
    runs = [(p, "exception", observe(name, ((*p, "exception"),))) for p in points]
    assert _mismatches(name, base, runs, exact_restarts=True) == []
    for _, _, got in runs:
        failed = got.outcome.failures
        assert [f.error_type for f in failed] == ["actorflow.testing.InjectedFault"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", CORPUS)
def test_without_a_store_an_exception_at_any_point_leaves_outputs_unchanged(
    name: str, baselines: dict[str, tuple[Observed, list[Point]]]
) -> None:
    """Restarts without a store (state kept only for the restart policy) give the same outputs."""
    base, points = baselines[name]
    for executor, superstep in points:
        got = observe(name, ((executor, superstep, "exception"),), store=False)
        assert got.outcome.outputs == base.outcome.outputs, (executor, superstep)
        assert got.outcome.restarts == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", CORPUS)
def test_an_actor_death_leaves_outputs_and_states_unchanged(
    name: str, baselines: dict[str, tuple[Observed, list[Point]]]
) -> None:
    """The executor's actor stopped before its step (every other point): same outputs and states."""
    base, points = baselines[name]
    runs = [(p, "death", observe(name, ((*p, "death"),))) for p in points[::2]]
    assert _mismatches(name, base, runs, exact_restarts=True) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", CORPUS)
def test_a_timeout_leaves_outputs_and_states_unchanged(
    name: str, baselines: dict[str, tuple[Observed, list[Point]]]
) -> None:
    """A step that outlives the executor's timeout (the hung actor is abandoned): same results."""
    base, points = baselines[name]
    point = points[len(points) // 2]
    got = observe(name, ((*point, "timeout"),), timeout=TIMEOUT)
    # A step slowed by a loaded machine may time out too; it is restarted like the
    # injected one, so only the count of restarts may differ.
    assert _mismatches(name, base, [(point, "timeout", got)], exact_restarts=False) == []
    assert "TimedOut" in got.outcome.failures[0].error_type


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["fan4", "burst3x2", "diamond", "fancycle3x200"])
def test_every_executor_of_a_superstep_failing_at_once_is_equivalent(
    name: str, baselines: dict[str, tuple[Observed, list[Point]]]
) -> None:
    """All targets of one superstep fail together (mixed kinds): outputs and states unchanged."""
    base, points = baselines[name]
    by_step: dict[int, list[str]] = {}
    for executor, superstep in points:
        by_step.setdefault(superstep, []).append(executor)
    kinds: tuple[FaultKind, FaultKind] = ("exception", "death")
    for superstep, executors in by_step.items():
        faults = tuple((executor, superstep, kinds[i % 2]) for i, executor in enumerate(executors))
        got = observe(name, faults)
        assert got.outcome.outputs == base.outcome.outputs, superstep
        assert got.states == base.states, superstep
        assert got.outcome.restarts == len(executors)


@pytest.mark.timeout(60)
def test_a_restarted_event_is_emitted_for_each_restart() -> None:
    """Three faults, three RunRestartedEvents naming executor, superstep, attempt and error."""
    base = observe("ring3x2")
    faults: tuple[Fault, ...] = (("r1", 2, "exception"), ("r2", 3, "death"), ("r1", 5, "exception"))
    got = observe("ring3x2", faults)
    assert got.outcome.outputs == base.outcome.outputs
    assert got.states == base.states
    restarted = [e for e in got.outcome.events if isinstance(e, af.RunRestartedEvent)]
    assert [(e.executor, e.superstep, e.attempt) for e in restarted] == [
        ("r1", 2, 1),
        ("r2", 3, 1),
        ("r1", 5, 2),
    ]
    assert restarted[0].error_type.endswith("InjectedFault")
    assert restarted[1].error_type.endswith("ActorDeadError")
    failed = [e for e in got.outcome.events if isinstance(e, af.ExecutorFailedEvent)]
    assert [(e.executor, e.superstep) for e in failed] == [("r1", 2), ("r2", 3), ("r1", 5)]


class AlwaysFails(af.Executor):
    """Raises ValueError on every message, after counting it."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.tries = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.tries += 1
        raise ValueError(f"cannot handle {n}")


def _failing_workflow(policy: af.RestartPolicy) -> af.Workflow:
    builder = af.WorkflowBuilder("always-fails", start=graphs.GSplit("src"), restart=policy)
    builder.add_edge("src", AlwaysFails("bad"))
    return builder.build()


@pytest.mark.timeout(30)
def test_past_the_intensity_limit_the_run_fails_with_the_original_error_chained() -> None:
    """max_restarts=2: two restarts, then ExecutorFailed whose __cause__ is the handler's ValueError."""
    with (
        _failing_workflow(af.RestartPolicy(max_restarts=2, within_seconds=60)) as wf,
        wf.session() as s,
    ):
        outcome = run_to_idle(s, 7)
    assert outcome.status is af.RunStatus.FAILED
    error = outcome.error
    assert isinstance(error, af.ExecutorFailed)
    assert error.executor == "bad" and error.superstep == 2
    assert isinstance(error.__cause__, ValueError) and "cannot handle 7" in str(error.__cause__)
    assert "restarted 2 time(s)" in str(error)
    assert outcome.restarts == 2
    assert len(outcome.failures) == 3
    assert isinstance(outcome.events[-1], af.RunFailedEvent)


@pytest.mark.timeout(30)
def test_injected_faults_past_the_limit_fail_with_the_injected_error_chained() -> None:
    """Three faults in one executor with max_restarts=2: the third fails the run, InjectedFault chained."""
    policy = af.RestartPolicy(max_restarts=2, within_seconds=60)
    faults: tuple[Fault, ...] = (
        ("r0", 1, "exception"),
        ("r1", 2, "exception"),
        ("r0", 3, "death"),
        ("r0", 5, "exception"),
    )
    got = observe("ring2x3", faults, restart=policy)
    error = got.outcome.error
    assert isinstance(error, af.ExecutorFailed)
    assert (error.executor, error.superstep) == ("r0", 5)
    assert isinstance(error.__cause__, InjectedFault)
    assert got.outcome.restarts == 3  # r0 twice, r1 once: the limit counts per executor


@pytest.mark.timeout(30)
def test_an_error_retry_on_does_not_match_fails_at_once() -> None:
    """retry_on=(KeyError,) and a ValueError: no restart at all, the ValueError chained."""
    policy = af.RestartPolicy(max_restarts=5, retry_on=(KeyError,))
    with _failing_workflow(policy) as wf, wf.session() as s:
        outcome = run_to_idle(s, 1)
    assert isinstance(outcome.error, af.ExecutorFailed)
    assert isinstance(outcome.error.__cause__, ValueError)
    assert outcome.restarts == 0
    assert len(outcome.failures) == 1
    assert [type(e) for e in outcome.events[-3:]] == [
        af.ExecutorFailedEvent,
        af.SuperstepRolledBackEvent,
        af.RunFailedEvent,
    ]


@pytest.mark.timeout(30)
def test_the_error_for_a_retry_on_mismatch_does_not_claim_restarts() -> None:
    """The ExecutorFailed message for an error outside retry_on says no policy covers it."""
    policy = af.RestartPolicy(max_restarts=5, retry_on=(KeyError,))
    with _failing_workflow(policy) as wf, wf.session() as s:
        outcome = run_to_idle(s, 1)
    assert isinstance(outcome.error, af.ExecutorFailed)
    assert "restarted" not in str(outcome.error)
    assert "no restart policy covers" in str(outcome.error)


@pytest.mark.timeout(30)
def test_without_a_restart_policy_a_fault_fails_fast() -> None:
    """No policy: the first injected fault fails the run with ExecutorFailed, fault chained."""
    got = observe("diamond", (("mid", 3, "exception"),), restart=None)
    assert isinstance(got.outcome.error, af.ExecutorFailed)
    assert isinstance(got.outcome.error.__cause__, InjectedFault)
    assert got.outcome.restarts == 0


RAY_SAMPLE = ("chain3", "fan4", "diamond", "ring3x2", "fancycle2x40")
"""The corpus graphs re-run on Ray: one of each shape (a chain, fan-in, a diamond, cycles)."""
RAY_TIMEOUT = 2.0
"""A step on Ray takes ~1-5 ms, but a worker started under load may take a second."""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", RAY_SAMPLE)
def test_on_ray_faults_leave_outputs_and_states_as_on_threads(
    name: str, baselines: dict[str, tuple[Observed, list[Point]]], ray_backend: af.RayBackend
) -> None:
    """On Ray: no fault, an exception, a stopped worker, a worker SIGKILLed mid-step and a
    hung worker killed at its deadline all give the thread backend's outputs and states."""
    backend = ray_backend
    base, points = baselines[name]
    clean = observe(name, backend=backend)
    assert (clean.outcome.outputs, clean.states) == (base.outcome.outputs, base.states)
    first, middle, last = points[0], points[len(points) // 2], points[-1]
    runs = [
        (first, "exception", observe(name, ((*first, "exception"),), backend=backend)),
        (middle, "kill", observe(name, ((*middle, "kill"),), backend=backend)),
        (last, "death", observe(name, ((*last, "death"),), backend=backend)),
    ]
    assert _mismatches(name, base, runs, exact_restarts=True) == []
    killed = runs[1][2].outcome.failures
    assert [f.error_type for f in killed] == ["actorflow.errors.HostLost"]
    hung = observe(name, ((*middle, "timeout"),), timeout=RAY_TIMEOUT, backend=backend)
    assert _mismatches(name, base, [(middle, "timeout", hung)], exact_restarts=False) == []
