"""The core runtime: isolation, routing, supersteps, errors, determinism."""

from __future__ import annotations

import inspect
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

import actorflow as af
from tests.support import ROOT


@af.message
@dataclass
class Bag:
    items: list[str] = field(default_factory=list)


@af.message
@dataclass
class Num:
    n: int


class Mutator(af.Executor):
    """Receives a Bag, mutates its own copy, and outputs it."""

    @af.handler
    def on_bag(self, bag: Bag, ctx: af.Context[Any]) -> None:
        bag.items.append(f"touched-by-{ctx.executor_id}")
        ctx.output(bag)


class Sender(af.Executor):
    """Sends a Bag, then mutates the sent object and outputs it."""

    @af.handler
    def on_start(self, text: str, ctx: af.Context[Any]) -> None:
        bag = Bag([text])
        ctx.send(bag)
        ctx.output(bag)
        bag.items.append("mutated-after-send")


def test_value_sent_is_a_copy_for_sender_and_every_receiver(backend: af.ActorBackend) -> None:
    """Mutating a sent value changes nothing in the sender's output or in other receivers."""
    builder = af.WorkflowBuilder("copy", start=Sender("s"))
    builder.add_fan_out("s", [Mutator("a"), Mutator("b")])
    with builder.build(backend=backend) as wf:
        result = wf.run("x")
    assert result.outputs[0] == Bag(["x"])
    assert sorted(tuple(o.items) for o in result.outputs[1:]) == [
        ("x", "touched-by-a"),
        ("x", "touched-by-b"),
    ]


def test_outputs_and_events_are_the_callers_own(backend: af.ActorBackend) -> None:
    """Mutating returned outputs and event values changes nothing else the caller holds."""

    with af.WorkflowBuilder("own", start=Mutator("m")).build(backend=backend) as wf:
        result = wf.run(Bag(["a"]))
        result.outputs[0].items.append("caller")
        event_values = [e.value for e in result.events if isinstance(e, af.OutputEvent)]
        assert event_values == [Bag(["a", "touched-by-m"])]
        again = wf.run(Bag(["a"]))
    assert again.outputs == [Bag(["a", "touched-by-m"])]


class Counter(af.Executor):
    def __init__(self, id: str, seen: list[int]) -> None:
        super().__init__(id)
        self.seen = seen

    @af.handler
    def on_num(self, num: Num, ctx: af.Context[Any]) -> None:
        self.seen.append(num.n)
        ctx.output(list(self.seen))


def test_blueprint_rule_both_directions(backend: af.ActorBackend) -> None:
    """Mutating the blueprint (or its constructor args) after build changes no run, and runs never touch it."""
    shared = [1]
    blueprint = Counter("c", shared)
    with af.WorkflowBuilder("bp", start=blueprint).build(backend=backend) as wf:
        shared.append(99)
        blueprint.seen.append(100)
        first = wf.run(Num(7))
        second = wf.run(Num(8))
    assert first.outputs == [[1, 7]]
    assert second.outputs == [[1, 8]], "a run must start from fresh blueprint state"
    assert blueprint.seen == [1, 99, 100]
    assert shared == [1, 99, 100]


class StrOnly(af.Executor):
    @af.handler
    def on_text(self, text: str, ctx: af.Context[Any]) -> None:
        ctx.output(text)


def test_input_not_accepted_raises_before_anything_runs() -> None:
    """run(12345) on a start executor that only handles str raises, starting no actor."""
    with af.WorkflowBuilder("strs", start=StrOnly("s")).build() as wf:
        threads_before = threading.active_count()
        with pytest.raises(af.InputNotAccepted, match=r"'s'.*int.*str"):
            wf.run(12345)
        assert threading.active_count() == threads_before


class Splitter(af.Executor):
    @af.handler
    def on_num(self, num: int, ctx: af.Context[Any]) -> None:
        ctx.send(num)


class Worker(af.Executor):
    def __init__(self, id: str, factor: int) -> None:
        super().__init__(id)
        self.factor = factor

    @af.handler
    def on_num(self, num: int, ctx: af.Context[Any]) -> None:
        ctx.send(num * self.factor)


class Sum(af.Executor):
    @af.handler
    def on_all(self, values: list[int], ctx: af.Context[Any]) -> None:
        ctx.output(values)
        ctx.output(sum(values))


def fan_in_workflow(width: int) -> af.Workflow:
    workers = [Worker(f"w{i}", i) for i in range(width)]
    builder = af.WorkflowBuilder("fan", start=Splitter("src"))
    builder.add_fan_out("src", workers)
    builder.add_fan_in([w.id for w in workers], Sum("sum"))
    return builder.build()


def test_runs_are_deterministic_including_fan_in_order() -> None:
    """The same input gives the same outputs in the same order, fan-in list in source order."""
    with fan_in_workflow(8) as wf:
        results = [wf.run(2).outputs for _ in range(5)]
    assert results[0] == [[0, 2, 4, 6, 8, 10, 12, 14], 56]
    assert all(r == results[0] for r in results)


def test_concurrent_runs_from_threads_each_get_their_own_actors() -> None:
    """Many threads running one workflow at once all get correct, independent results."""
    with fan_in_workflow(4) as wf:
        outcomes: dict[int, object] = {}

        def go(k: int) -> None:
            outcomes[k] = wf.run(k).outputs[-1]

        threads = [threading.Thread(target=go, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert outcomes == {k: k * 6 for k in range(8)}


class Loop(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n + 1)


def test_superstep_limit_raises() -> None:
    """A cycle that never stops hits max_supersteps with SuperstepLimitExceeded."""
    builder = af.WorkflowBuilder("loop", start=Loop("a"), max_supersteps=10)
    builder.add_edge("a", Loop("b")).add_edge("b", "a")
    with builder.build() as wf, pytest.raises(af.SuperstepLimitExceeded, match="max_supersteps=10"):
        wf.run(0)


class Boom(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        raise ValueError(f"bad {n}")


def test_handler_exception_fails_run_with_executor_and_cause() -> None:
    """A handler exception raises ExecutorFailed naming executor and superstep, original chained."""
    builder = af.WorkflowBuilder("boom", start=Splitter("src")).add_edge("src", Boom("boom"))
    with builder.build() as wf:
        with pytest.raises(af.ExecutorFailed) as info:
            wf.run(3)
        assert info.value.executor == "boom"
        assert info.value.superstep == 2
        assert isinstance(info.value.__cause__, ValueError)
        run = wf.run
        assert (
            inspect.ismethod(run) and run.__self__ is wf
        )  # the workflow stays usable after a failure
        with pytest.raises(af.ExecutorFailed):
            wf.run(4)


class SendsText(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(f"text {n}")


def test_unroutable_message_fails_the_run() -> None:
    """A value no out-edge target handles is an error naming sender and type, never a drop."""
    builder = af.WorkflowBuilder("unroutable", start=SendsText("s")).add_edge("s", Sum("sum_list"))
    with builder.build() as wf, pytest.raises(af.ExecutorFailed) as info:
        wf.run(1)
    assert isinstance(info.value.__cause__, af.UnroutableMessage)
    assert "'s'" in str(info.value.__cause__) and "str" in str(info.value.__cause__)


class NoHandlers(af.Executor):
    pass


class Unencodable(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.lock = threading.Lock()

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        del n, ctx


def test_build_reports_every_problem_at_once() -> None:
    """build() lists unknown ids, duplicates, unreachable executors, bad state in one GraphError."""
    builder = af.WorkflowBuilder("bad", start=Splitter("src"))
    builder.add_edge("src", "ghost")
    builder.add_edge("src", Worker("w", 1))
    builder.add_edge("src", Worker("w", 2))
    builder.add_executor(NoHandlers("lonely"))
    builder.add_edge("src", Unencodable("u"))
    with pytest.raises(af.GraphError) as info:
        builder.build()
    text = str(info.value)
    assert "'ghost'" in text
    assert "share the id 'w'" in text
    assert "'lonely' is unreachable" in text
    assert "no @handler" in text
    assert "'u'" in text and "lock" in text.lower()
    assert len(info.value.problems) >= 5


class Declared(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[str]) -> None:
        ctx.send(str(n))


def test_build_checks_declared_send_types_against_targets() -> None:
    """An edge whose target handles none of the declared send types is a build error."""
    builder = af.WorkflowBuilder("typed", start=Declared("d")).add_edge("d", Sum("sum"))
    with pytest.raises(af.GraphError, match="'sum' has no handler for any type 'd' sends"):
        builder.build()


def test_an_executor_without_out_edges_that_declares_sends_is_told_of_context_none() -> None:
    """An executor that declares a send type and has no out-edge (it meant to output) is
    told both fixes: an edge, or ``af.Context[None]``; one with edges only the first."""
    with pytest.raises(af.GraphError) as info:
        af.WorkflowBuilder("last", start=Declared("d")).build()
    [problem] = info.value.problems
    assert "executor 'd' declares it sends str" in problem
    assert "add an edge from it, or, if it sends nothing, annotate ctx as af.Context[None]" in (
        problem
    )
    builder = af.WorkflowBuilder("typed", start=Declared("d")).add_edge("d", Sum("sum"))
    with pytest.raises(af.GraphError) as info:
        builder.build()
    assert not any("Context[None]" in problem for problem in info.value.problems)


class Router(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.send(n)


class Tag(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        ctx.output(f"{self.id}:{n}")


def test_switch_conditions_and_fan_out_select() -> None:
    """Switch takes the first true case or the default; conditions and selectors run in the sender."""
    builder = af.WorkflowBuilder("route", start=Router("r"))
    builder.add_switch(
        "r",
        [
            af.Case(lambda n: n < 0, Tag("neg")),
            af.Case(lambda n: n == 0, Tag("zero")),
            af.Default(Tag("pos")),
        ],
    )
    builder.add_edge("r", Tag("even"), when=lambda n: n % 2 == 0)
    builder.add_fan_out("r", [Tag("x"), Tag("y")], select=lambda n, ids: ids[: abs(n) % 3])
    with builder.build() as wf:
        assert sorted(wf.run(-1).outputs) == ["neg:-1", "x:-1"]
        assert sorted(wf.run(0).outputs) == ["even:0", "zero:0"]
        assert sorted(wf.run(5).outputs) == ["pos:5", "x:5", "y:5"]


class Union(af.Executor):
    @af.handler
    def on_number(self, value: int | float, ctx: af.Context[Any]) -> None:
        ctx.output(("number", value))

    @af.handler
    def on_anything(self, value: object, ctx: af.Context[Any]) -> None:
        ctx.output(("other", value))


def test_union_and_catch_all_handlers() -> None:
    """Union annotations route each member type; object catches the rest."""
    with af.WorkflowBuilder("u", start=Union("u")).build() as wf:
        assert wf.run(1).outputs == [("number", 1)]
        assert wf.run(2.5).outputs == [("number", 2.5)]
        assert wf.run("s").outputs == [("other", "s")]


class AsyncWorker(af.Executor):
    @af.handler
    async def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        import asyncio

        await asyncio.sleep(0)
        ctx.output(n * 10)


def test_async_handlers_run_on_the_actors_loop() -> None:
    """An async def handler runs to completion inside its actor."""
    with af.WorkflowBuilder("async", start=AsyncWorker("a")).build() as wf:
        assert wf.run(4).outputs == [40]


def _make_client() -> dict[str, int]:
    return {"calls": 0}


class UsesResource(af.Executor):
    client = af.resource(_make_client)

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.handled = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.client["calls"] += 1
        self.handled += 1
        ctx.output((self.client["calls"], self.handled, sorted(self.snapshot())))


def test_resources_are_built_in_the_actor_and_never_snapshotted() -> None:
    """A resource exists only inside the actor and is not part of the state."""
    blueprint = UsesResource("r")
    with pytest.raises(AttributeError, match="only inside a running actor"):
        _ = blueprint.client
    with af.WorkflowBuilder("res", start=blueprint).build() as wf:
        assert wf.run(1).outputs == [(1, 1, ["handled"])]


def test_stream_yields_typed_events_in_order() -> None:
    """stream() yields run started, superstep events, outputs and a completion, in order."""
    with fan_in_workflow(2) as wf:
        events = list(wf.stream(1))
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "RunStartedEvent"
    assert kinds[-1] == "RunCompletedEvent"
    assert kinds.count("SuperstepStartedEvent") == 3
    outputs = [e.value for e in events if isinstance(e, af.OutputEvent)]
    assert outputs == [[0, 1], 1]
    assert len({e.run_id for e in events}) == 1


def test_abandoned_stream_stops_its_actors() -> None:
    """Breaking out of a stream cancels the run; the workflow stays usable and leaks nothing."""
    builder = af.WorkflowBuilder("loop2", start=Loop("a"), max_supersteps=100000)
    builder.add_edge("a", Loop("b")).add_edge("b", "a")
    with builder.build() as wf:
        stream = wf.stream(0)
        for event in stream:
            if isinstance(event, af.SuperstepCompletedEvent) and event.superstep >= 3:
                break
        stream.close()  # type: ignore[attr-defined]
        with fan_in_workflow(2) as other:
            assert other.run(1).outputs[-1] == 1


def test_graph_signature_is_stable_across_processes() -> None:
    """The signature is the same in a fresh interpreter (no id()/hash() in it)."""
    with fan_in_workflow(3) as wf:
        here = wf.signature
    code = (
        "import tests.runtime.test_runtime_core as t; "
        "wf = t.fan_in_workflow(3); print(wf.signature); wf.close()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
        cwd=ROOT,  # `-c` code imports from its working folder
    )
    assert out.stdout.strip() == here


def test_forgotten_workflow_does_not_hang_interpreter_exit() -> None:
    """A subprocess that runs a workflow and never closes anything exits promptly."""
    code = (
        "import tests.runtime.test_runtime_core as t; "
        "wf = t.fan_in_workflow(4); print(wf.run(1).outputs[-1]); s = wf.session(); s.run(2)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6"


class TupleState(af.Executor):
    """Immutable state (a tuple): its decoded blueprint is reused across runs."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: tuple[int, ...] = (0,)

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        self.seen = (*self.seen, n)
        ctx.output(self.seen)


def test_runs_start_from_the_blueprint_even_when_its_decoded_state_is_reused() -> None:
    """A reused immutable blueprint never carries one run's changes into the next."""
    with af.WorkflowBuilder("tuples", start=TupleState("t")).build() as wf:
        assert [wf.run(n).outputs for n in (1, 2, 3)] == [[(0, 1)], [(0, 2)], [(0, 3)]]
