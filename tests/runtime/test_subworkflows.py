"""Sub-workflows: outputs, requests, nested checkpoints, lineage, signatures, supervision."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode_state, wire_name
from actorflow.storage import Checkpoint, decode_checkpoint
from actorflow.testing import inject_fault
from tests.support import ROOT
from tests.support.pg import Durable


@af.message
@dataclass
class Verdict:
    ok: bool


class Tally(af.Executor):
    """Adds what it gets; reports "done" only once the total reaches ``goal``."""

    def __init__(self, id: str, goal: int = 3) -> None:
        super().__init__(id)
        self.goal = goal
        self.total = 0
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.total += n
        self.seen.append(n)
        if self.total >= self.goal:
            ctx.output(f"done {self.total} after {self.seen}")


class Double(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n * 2)


class Collect(af.Executor):
    @af.handler
    def on_any(self, value: object, ctx: af.Context[Any]) -> None:
        ctx.output(["parent", value])


class Asker(af.Executor):
    """Asks the same question twice per input; outputs each answer with its request."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.request(n, bool)
        ctx.request(n, Verdict)

    @af.response_handler
    def on_bool(self, request: int, answer: bool, ctx: af.Context[Any]) -> None:
        ctx.output(["bool", request, answer])

    @af.response_handler
    def on_verdict(self, request: int, answer: Verdict, ctx: af.Context[Any]) -> None:
        ctx.output(["verdict", request, answer.ok])


ARMED: set[int] = set()
"""Values Flaky fails on, once each (then disarmed): deterministic fault injection."""


class Flaky(af.Executor):
    """Keeps a running total; fails after changing it when it sees an armed value."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.total = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.total += n
        if n in ARMED:
            ARMED.discard(n)
            raise RuntimeError(f"flaky on {n}")
        ctx.output(self.total)


# --- graphs (module level: a fresh process rebuilds them by name) -------------------


def leaf(extra: bool = False) -> af.Workflow:
    builder = af.WorkflowBuilder("leaf", start=Tally("tally"))
    if extra:
        builder.add_edge("tally", Collect("extra"))
    return builder.build()


def nest(inner: af.Workflow, name: str, id: str) -> af.Workflow:
    """A workflow whose only executor is ``inner`` as sub-workflow ``id``."""
    return af.WorkflowBuilder(name, start=af.WorkflowExecutor(inner, id, outputs="output")).build()


def chain(depth: int, extra: bool = False) -> list[af.Workflow]:
    """``depth`` workflows, each the sub-workflow of the next; innermost first."""
    workflows = [leaf(extra)]
    for level in range(1, depth):
        workflows.append(nest(workflows[-1], f"level{level}", f"sub{level}"))
    return workflows


def asking(depth: int) -> list[af.Workflow]:
    workflows = [af.WorkflowBuilder("ask", start=Asker("ap")).build()]
    for level in range(1, depth):
        workflows.append(nest(workflows[-1], f"ask{level}", f"sub{level}"))
    return workflows


def close_all(workflows: list[af.Workflow]) -> None:
    for wf in reversed(workflows):
        wf.close()


def in_fresh_process(code: str) -> list[str]:
    """Run ``code`` (with this module imported as ``t``) in a new interpreter; its stdout lines."""
    prelude = "import tests.runtime.test_subworkflows as t\n"
    out = subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=ROOT,  # `-c` code imports the tests package from its working folder
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def nested_records(
    checkpoint: Checkpoint, load_blob: Callable[[str], bytes]
) -> Iterator[Checkpoint]:
    """Every nested checkpoint record inside ``checkpoint``, at any depth."""
    for digests in checkpoint.executors.values():
        state = decode_state([load_blob(d) for d in digests])
        record = state.get("checkpoint")
        if isinstance(record, bytes):
            nested = decode_checkpoint(record)
            yield nested
            yield from nested_records(nested, state.__getitem__)


# --- behaviour ---------------------------------------------------------------------


def test_outputs_are_sent_along_out_edges_or_emitted() -> None:
    """outputs="send" routes inner outputs to the parent's out-edges; "output" emits them."""
    inner = af.WorkflowBuilder("double", start=Double("d")).add_edge("d", Collect("c")).build()
    sending = af.WorkflowBuilder("p1", start=af.WorkflowExecutor(inner, "sub"))
    sending.add_edge("sub", Collect("c"))
    with inner, sending.build() as wf1, nest(inner, "p2", "sub") as wf2:
        assert wf1.run(4).outputs == [["parent", ["parent", 8]]]
        assert wf2.run(4).outputs == [["parent", 8]]
    with pytest.raises(ValueError, match="'send' or 'output'"):
        af.WorkflowExecutor(inner, "bad", outputs="emit")  # type: ignore[arg-type]


def test_child_state_carries_across_parent_messages() -> None:
    """A child that needs three messages to finish finishes on the third, not before."""
    workflows = chain(2)
    try:
        with workflows[-1].session() as s:
            assert s.run(1).outputs == []
            assert s.run(1).outputs == []
            assert s.run(1).outputs == ["done 3 after [1, 1, 1]"]
        assert workflows[-1].run(5).outputs == ["done 5 after [5]"], "a new run starts fresh"
    finally:
        close_all(workflows)


def test_requests_surface_with_a_path_and_answers_route_down_by_id() -> None:
    """Inner requests surface as '<sub>/<id>' three levels up; each answer reaches its own request."""
    workflows = asking(3)
    try:
        with workflows[-1].session() as s:
            result = s.run(7)
            assert result.status is af.RunStatus.IDLE_WITH_PENDING_REQUESTS
            pending = [
                (p.request_id, p.executor, p.value, p.response_type)
                for p in result.pending_requests
            ]
            assert pending == [
                ("sub2/sub1/ap:1:0", "sub2", 7, "bool"),
                ("sub2/sub1/ap:1:1", "sub2", 7, wire_name(Verdict)),
            ]
            with pytest.raises(af.RequestError, match="expects a bool"):
                s.respond({"sub2/sub1/ap:1:0": Verdict(True)})
            second = s.respond({"sub2/sub1/ap:1:1": Verdict(False)})
            assert second.outputs == [["verdict", 7, False]]
            assert [p.request_id for p in second.pending_requests] == ["sub2/sub1/ap:1:0"]
            first = s.respond({"sub2/sub1/ap:1:0": True})
            assert first.outputs == [["bool", 7, True]]
            assert first.status is af.RunStatus.COMPLETED
    finally:
        close_all(workflows)


RESUME_COUNTER = """
store = {store}
workflows = t.chain({depth})
with workflows[-1].resume(store, session="s") as s:
    print(s.run(1).outputs)
t.close_all(workflows)
store.close()
"""


@pytest.mark.parametrize("depth", [2, 3])
def test_child_mid_progress_resumes_in_a_fresh_process(durable: Durable, depth: int) -> None:
    """MAF #7097: a parent checkpoint taken while the child is mid-way resumes the child, not restarts it."""
    store = durable.open()
    workflows = chain(depth)
    try:
        with workflows[-1].session("s", store=store) as s:
            assert s.run(1).outputs == []
            assert s.run(1).outputs == []
    finally:
        close_all(workflows)
        store.close()
    lines = in_fresh_process(RESUME_COUNTER.format(store=durable.source("t.af"), depth=depth))
    assert lines == ["['done 3 after [1, 1, 1]']"]


ANSWER_NESTED = """
store = {store}
workflows = t.asking(3)
with workflows[-1].resume(store, session="q") as s:
    print([p.request_id for p in s.pending_requests])
    print(s.respond({{"sub2/sub1/ap:1:0": False}}).outputs)
t.close_all(workflows)
store.close()
"""


def test_child_waiting_on_a_request_is_answered_in_a_fresh_process(durable: Durable) -> None:
    """A child idle with pending requests at the parent's checkpoint is answered after a restart."""
    store = durable.open()
    workflows = asking(3)
    try:
        with workflows[-1].session("q", store=store) as s:
            s.run(3)
            s.respond({"sub2/sub1/ap:1:1": Verdict(True)})
    finally:
        close_all(workflows)
        store.close()
    lines = in_fresh_process(ANSWER_NESTED.format(store=durable.source("t.af")))
    assert lines == ["['sub2/sub1/ap:1:0']", "[['bool', 3, False]]"]


# --- signatures --------------------------------------------------------------------


def test_changed_child_makes_restore_fail_naming_the_nested_path() -> None:
    """A structural change two levels down changes the signature; resume and restore name the path."""
    store = af.MemoryStore()
    before, after = chain(3), chain(3, extra=True)
    try:
        assert before[-1].signature != after[-1].signature
        with before[-1].session("s", store=store) as s:
            s.run(1)
        with pytest.raises(af.GraphMismatch) as info:
            after[-1].resume(store, session="s")
        assert (
            "in sub-workflow 'sub2': in sub-workflow 'sub1': executor 'extra' is in this graph"
            in str(info.value)
        )
        latest = store.latest(session="s")
        assert latest is not None
        state = decode_state([store.load_blob(d) for d in latest.executors["sub2"]])
        changed = af.WorkflowExecutor(after[-2], "sub2", outputs="output")
        with pytest.raises(af.GraphMismatch, match=r"sub-workflow 'sub2'.*sub-workflow 'sub1'"):
            changed.restore(state)
    finally:
        close_all(before)
        close_all(after)


def test_damaged_nested_state_is_refused() -> None:
    """A nested record or blob that does not check out raises CheckpointCorrupt on restore."""
    workflows = chain(2)
    store = af.MemoryStore()
    try:
        with workflows[-1].session("s", store=store) as s:
            s.run(1)
        latest = store.latest(session="s")
        assert latest is not None
        state = decode_state([store.load_blob(d) for d in latest.executors["sub1"]])
        fresh = af.WorkflowExecutor(workflows[0], "sub1", outputs="output")
        digest = next(k for k in state if k != "checkpoint")
        with pytest.raises(af.CheckpointCorrupt, match="corrupt blob"):
            fresh.restore({**state, digest: state[digest] + b"!"})
        with pytest.raises(af.CheckpointCorrupt, match="lacks blobs"):
            fresh.restore({"checkpoint": state["checkpoint"]})
        with pytest.raises(af.CheckpointCorrupt):
            fresh.restore({**state, "checkpoint": state["checkpoint"][:-1]})
        fresh.restore(state)
    finally:
        close_all(workflows)


def test_parent_sessions_sharing_one_inner_workflow_stay_independent() -> None:
    """Concurrent parent sessions on one inner workflow each keep their own nested state."""
    workflows = chain(2)
    outcomes: dict[int, list[object]] = {}

    def go(k: int) -> None:
        with workflows[-1].session() as s:
            outcomes[k] = [o for n in (k, k, k) for o in s.run(n).outputs]

    threads = [threading.Thread(target=go, args=(k,)) for k in (1, 2, 3, 4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        close_all(workflows)
    assert outcomes == {
        1: ["done 3 after [1, 1, 1]"],
        2: ["done 4 after [2, 2]", "done 6 after [2, 2, 2]"],
        3: ["done 3 after [3]", "done 6 after [3, 3]", "done 9 after [3, 3, 3]"],
        4: ["done 4 after [4]", "done 8 after [4, 4]", "done 12 after [4, 4, 4]"],
    }


# --- lineage -----------------------------------------------------------------------


def test_no_checkpoint_at_any_depth_names_a_parent_the_store_lacks() -> None:
    """After runs, a reset and a fork, every parent id (top level or nested) is stored or absent."""
    store = af.MemoryStore()
    workflows = chain(3)
    wf = workflows[-1]
    try:
        with wf.session("s", store=store) as s:
            s.run(1)
            fork_from = s.run(1).checkpoint_id
            s.reset()
            s.run(2)
        assert fork_from is not None
        with wf.resume(store, checkpoint_id=fork_from) as fork:
            assert fork.run(1).outputs == ["done 3 after [1, 1, 1]"]
        records = store.list()
        ids = {r.id for r in records}
        assert all(r.parent_id is None or r.parent_id in ids for r in records)
        assert store.verify() == []
        depths = set()
        for record in records:
            nested = list(nested_records(record, store.load_blob))
            assert all(n.parent_id is None for n in nested)
            depths.add(len(nested))
        assert 2 in depths, "both nested levels were walked"
    finally:
        close_all(workflows)


class Ballast(af.Executor):
    """Large state that never changes."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.data = "x" * 20_000

    @af.handler
    def on_text(self, text: str, ctx: af.Context[Any]) -> None:
        ctx.output(text)


def test_unchanged_nested_state_is_stored_once() -> None:
    """A large inner state that never changes is one blob, shared by every parent checkpoint."""
    store = af.MemoryStore()
    inner = af.WorkflowBuilder("big", start=Tally("tally", goal=10**9))
    inner.add_edge("tally", Ballast("ballast"))
    with (
        inner.build() as built,
        nest(built, "holder", "sub") as wf,
        wf.session("s", store=store) as s,
    ):
        for n in range(4):
            s.run(n)
        records = store.list(session="s")
        digests = {d for r in records for d in r.executors["sub"]}
        large = [d for d in digests if len(store.load_blob(d)) >= 20_000]
    assert len(records) >= 8
    assert len(large) == 1, "the ballast's chunk is stored once, not once per checkpoint"


# --- supervision -------------------------------------------------------------------


def flaky_parent(inner_restart: bool, parent_restart: bool) -> list[af.Workflow]:
    policy = af.RestartPolicy(max_restarts=2)
    inner = af.WorkflowBuilder(
        "flaky", start=Flaky("flaky"), restart=policy if inner_restart else None
    ).build()
    outer = af.WorkflowBuilder(
        "outer",
        start=af.WorkflowExecutor(inner, "sub", outputs="output"),
        restart=policy if parent_restart else None,
    ).build()
    return [inner, outer]


def totals(
    workflows: list[af.Workflow], fault: Callable[[af.Session], None] | None = None
) -> list[object]:
    outputs: list[object] = []
    with workflows[-1].session() as s:
        if fault is not None:
            fault(s)
        for n in (1, 2, 3):
            outputs += s.run(n).outputs
    return outputs


@pytest.mark.parametrize(
    ("inner_restart", "parent_restart"),
    [
        (True, False),
        (False, True),
        (True, True),
    ],
)
def test_fault_inside_a_child_gives_the_fault_free_outputs(
    inner_restart: bool, parent_restart: bool
) -> None:
    """A child failure is absorbed by the child's policy or by the parent restarting the child."""
    workflows = flaky_parent(inner_restart, parent_restart)
    try:
        ARMED.clear()
        clean = totals(workflows)
        ARMED.update({2, 3})
        faulty = totals(workflows)
    finally:
        ARMED.clear()
        close_all(workflows)
    assert clean == faulty == [1, 3, 6]


def test_fault_injected_into_the_sub_workflow_executor_is_supervised() -> None:
    """A fault after the nested run advanced is rolled back: the child's progress is not doubled."""
    workflows = flaky_parent(inner_restart=False, parent_restart=True)
    try:
        clean = totals(workflows)
        faulty = totals(workflows, lambda s: inject_fault(s, "sub", superstep=2))
    finally:
        close_all(workflows)
    assert clean == faulty == [1, 3, 6]


def test_child_failing_past_every_policy_fails_the_parent_naming_both() -> None:
    """With no policy that absorbs it, the parent run fails at the sub-workflow, inner error chained."""
    workflows = flaky_parent(inner_restart=False, parent_restart=False)
    try:
        ARMED.add(1)
        with workflows[-1].session() as s, pytest.raises(af.ExecutorFailed) as info:
            s.run(1)
    finally:
        ARMED.clear()
        close_all(workflows)
    assert info.value.executor == "sub"
    cause = info.value.__cause__
    assert isinstance(cause, af.ExecutorFailed) and cause.executor == "flaky"
    # The original exception's type, and each policy's refusal once, naming its executor.
    assert info.value.error_type == cause.error_type != "actorflow.errors.ExecutorFailed"
    message = str(info.value)
    assert "covers 'flaky'" in message and "covers 'sub'" in message, message


@pytest.mark.parametrize("inner", [None, "inner", 3])
def test_a_sub_workflow_of_something_else_than_a_workflow_is_refused_at_once(inner: Any) -> None:
    with pytest.raises(TypeError, match="'sub' runs a built workflow"):
        af.WorkflowExecutor(inner, "sub")
