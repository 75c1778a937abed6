"""What crash and fault probes found: values shared by reference, escaping errors, loose checks."""

from __future__ import annotations

from typing import Any

import pytest

import actorflow as af


class Count(af.Executor):
    """Counts to ``limit``, one superstep per number, outputting each."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.seen += 1
        ctx.output(n)
        if n < 3:
            ctx.send(n + 1)


def _counter() -> af.Workflow:
    return af.WorkflowBuilder("count", start=Count("c")).add_edge("c", "c").build()


def test_run_metadata_is_copied_when_the_run_is_submitted() -> None:
    """Mutating the metadata (even a list inside it) after stream() returned changes no
    checkpoint of that run."""
    store = af.MemoryStore()
    metadata: dict[str, Any] = {"tags": ["first"], "nested": {"n": 1}}
    with _counter() as wf, wf.session("s", store=store) as s:
        events = s.stream(1, metadata=metadata)
        metadata["tags"].append("late")
        metadata["nested"]["n"] = 2
        metadata["added"] = True
        list(events)
    records = store.list(session="s")
    assert len(records) > 2
    for record in records:
        assert store.load(record.id).metadata == {"tags": ["first"], "nested": {"n": 1}}


def test_metadata_that_cannot_be_encoded_is_refused_before_the_run() -> None:
    """An unencodable metadata value raises EncodeError from run() itself; nothing ran."""
    store = af.MemoryStore()
    with _counter() as wf, wf.session("s", store=store) as s:
        with pytest.raises(af.EncodeError, match="metadata"):
            s.run(1, metadata={"when": object()})
        assert store.list(session="s") == []
        assert s.run(1).outputs == [1, 2, 3]


class BadSnapshot(af.Executor):
    """Its blueprint snapshots, but once it handled a message snapshot() fails."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.handled = False

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        self.handled = True
        ctx.output(n)

    def snapshot(self) -> Any:
        if self.handled:
            raise RuntimeError("cannot snapshot")
        return super().snapshot()


@pytest.mark.parametrize(
    "policy",
    [af.CheckpointPolicy(on_idle_only=True), af.CheckpointPolicy(every=5)],
    ids=["on_idle_only", "every_5"],
)
def test_a_snapshot_failing_at_the_final_checkpoint_fails_the_run(
    policy: af.CheckpointPolicy,
) -> None:
    """The final checkpoint asks for state: a failing snapshot() ends the stream with a
    RunFailedEvent and raises ExecutorFailed (a RunFailed) with the cause chained."""
    wf = af.WorkflowBuilder("bad-snapshot", start=BadSnapshot("b")).build()
    events: list[af.Event] = []
    with (
        wf,
        wf.session("s", store=af.MemoryStore(), checkpoint=policy) as s,
        pytest.raises(af.ExecutorFailed) as info,
    ):
        events.extend(s.stream(1))
    assert isinstance(info.value, af.RunFailed)
    assert info.value.executor == "b"
    assert "snapshot()" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(events[-1], af.RunFailedEvent)
    assert events[-1].executor == "b"


class TakesStrings(af.Executor):
    @af.handler
    def on_texts(self, texts: list[str], ctx: af.Context[None]) -> None:
        ctx.output("".join(texts))


def test_a_list_input_is_checked_item_by_item() -> None:
    """A start executor whose handler takes list[str] refuses [1, 2] before the run."""
    with af.WorkflowBuilder("texts", start=TakesStrings("t")).build() as wf:
        assert wf.run(["a", "b"]).outputs == ["ab"]
        with pytest.raises(af.InputNotAccepted, match=r"list\[int\].*list\[str\]"):
            wf.run([1, 2])
        with pytest.raises(af.InputNotAccepted):
            wf.run(["a", 2])


def test_a_list_sent_on_a_direct_edge_is_checked_item_by_item() -> None:
    """A list of ints sent to a target that takes list[str] is unroutable, never delivered."""
    wf = (
        af.WorkflowBuilder("edge-list", start=Forward("f")).add_edge("f", TakesStrings("t")).build()
    )
    with wf, pytest.raises(af.UnroutableMessage, match=r"list"):
        wf.run(1)


class Forward(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:  # type: ignore[type-arg]  # undeclared on purpose
        ctx.send([n])


class Nowhere(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:  # type: ignore[type-arg]  # undeclared on purpose
        ctx.send("a str nobody takes")


def test_an_unroutable_send_is_caught_as_unroutable_message() -> None:
    """``except af.UnroutableMessage`` catches a run failing on an unroutable send; it is
    an ExecutorFailed too, naming the executor, with the handler's error chained."""
    wf = af.WorkflowBuilder("nowhere", start=Nowhere("n")).add_edge("n", TakesStrings("t")).build()
    with wf:
        try:
            wf.run(1)
        except af.UnroutableMessage as exc:
            caught: BaseException = exc
        else:
            pytest.fail("the run did not fail")
    assert isinstance(caught, af.ExecutorFailed)
    assert caught.executor == "n"
    assert isinstance(caught.__cause__, af.UnroutableMessage)
