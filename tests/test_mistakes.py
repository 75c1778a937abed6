"""Mistakes users make are caught, and the message says how to fix them."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

import pytest

import actorflow as af


class ReturnsValue(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> int:
        return n * 2


class ReturnsValueAsync(af.Executor):
    @af.handler
    async def on_num(self, n: int, ctx: af.Context[None]) -> int:
        return n * 2


@pytest.mark.parametrize("cls", [ReturnsValue, ReturnsValueAsync])
def test_a_handler_returning_a_value_fails_with_the_fix(cls: type[af.Executor]) -> None:
    """A returned value is never silently dropped: the run fails with HandlerReturnedValue,
    whose message names the handler, the value and ctx.output / ctx.send."""
    with (
        af.WorkflowBuilder("returns", start=cls("r")).build() as wf,
        pytest.raises(af.ExecutorFailed) as info,
    ):
        wf.run(21)
    cause = info.value.__cause__
    assert isinstance(cause, af.HandlerReturnedValue)
    message = str(cause)
    assert f"{cls.__qualname__}.on_num" in message
    assert "42 (an int)" in message
    assert "ctx.output(value)" in message and "ctx.send(value)" in message


@dataclass
class NotRegistered:
    n: int


class TakesUnregistered(af.Executor):
    @af.handler
    def on_thing(self, thing: NotRegistered, ctx: af.Context[None]) -> None:
        ctx.output(thing.n)


def test_a_handler_for_an_unregistered_class_is_reported_by_build() -> None:
    """build() names the handler, the class and @af.message."""
    with pytest.raises(af.GraphError) as info:
        af.WorkflowBuilder("unregistered", start=TakesUnregistered("u")).build()
    [problem] = info.value.problems
    assert "TakesUnregistered.on_thing" in problem
    assert "NotRegistered" in problem and "@af.message" in problem


@af.message
@dataclass
class Circle:
    r: float


class Shape:
    """An unregistered base whose registered subclasses are real messages."""


@af.message
@dataclass
class Square(Shape):
    side: float


class TakesBase(af.Executor):
    @af.handler
    def on_shape(self, shape: Shape, ctx: af.Context[None]) -> None:
        ctx.output(type(shape).__name__)


def test_an_unregistered_base_of_registered_messages_is_accepted() -> None:
    """A handler for a base class whose subclasses are registered builds and runs."""
    with af.WorkflowBuilder("base", start=TakesBase("b")).build() as wf:
        assert wf.run(Square(1.0)).outputs == ["Square"]


class TwoHandlers(af.Executor):
    @af.handler
    def first(self, c: Circle, ctx: af.Context[None]) -> None:
        ctx.output(1)

    @af.handler
    def second(self, c: Circle | int, ctx: af.Context[None]) -> None:
        ctx.output(2)


def test_two_handlers_for_one_type_are_reported_by_build() -> None:
    """build() names the type and both handlers."""
    with pytest.raises(af.GraphError) as info:
        af.WorkflowBuilder("two", start=TwoHandlers("t")).build()
    [problem] = info.value.problems
    assert "2 handlers for" in problem and "Circle" in problem
    assert "first and second" in problem


class ForgotInit(af.Executor):
    def __init__(self, id: str, factor: int) -> None:
        self.factor = factor

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n * self.factor)


def test_forgetting_super_init_names_the_fix() -> None:
    """An executor whose __init__ skipped Executor.__init__ is a GraphError naming
    super().__init__(id), not an AttributeError about a private slot."""
    executor = ForgotInit("f", 2)
    assert "ForgotInit" in repr(executor)
    with pytest.raises(af.GraphError, match=r"ForgotInit.__init__.*super\(\).__init__\(id\)"):
        af.WorkflowBuilder("forgot", start=executor).build()


class Quiet(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)


def test_context_none_declares_a_handler_that_sends_nothing() -> None:
    """Context[None] builds, even with out-edges, and the handler outputs."""
    wf = af.WorkflowBuilder("quiet", start=Quiet("q")).build()
    with wf:
        assert wf.run(3).outputs == [3]


class Slow(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        import threading

        threading.Event().wait(0.5)  # the workload: a handler slower than its timeout


def test_a_timeouts_error_type_names_a_public_type() -> None:
    """ExecutorFailed.error_type of a timeout is actorflow.errors.ExecutorTimedOut, a type
    users can import and catch (the cause is one)."""
    wf = af.WorkflowBuilder(
        "slow", start=Slow("s", timeout=0.05), restart=af.RestartPolicy(max_restarts=0)
    ).build()
    with wf, pytest.raises(af.ExecutorFailed) as info:
        wf.run(1)
    assert info.value.error_type == "actorflow.errors.ExecutorTimedOut"
    assert isinstance(info.value.__cause__, af.ExecutorTimedOut)
    assert isinstance(info.value.__cause__, TimeoutError)


@af.message
@dataclass
class Authorization:
    ok: bool


class AsksApproval(af.Executor):
    @af.handler
    def on_text(self, text: str, ctx: af.Context[None]) -> None:
        ctx.request(text, Authorization, request_id="r1")

    @af.response_handler
    def on_answer(self, text: str, answer: Authorization, ctx: af.Context[None]) -> None:
        ctx.output(answer.ok)


def test_messages_use_the_right_article() -> None:
    """A wrong answer reads 'expects an Authorization, got an int'."""
    with (
        af.WorkflowBuilder("approve", start=AsksApproval("a")).build() as wf,
        wf.session() as s,
    ):
        s.run("pay?")
        with pytest.raises(af.RequestError, match="expects an Authorization, got an int"):
            s.respond({"r1": 3})


class SendsUnencodable(af.Executor):
    @af.handler
    def on_any(self, value: object, ctx: af.Context[object]) -> None:
        ctx.send(object())


class TakesAnything(af.Executor):
    @af.handler
    def on_any(self, value: object, ctx: af.Context[None]) -> None:
        ctx.output(value)


def _printed(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def test_an_encode_error_prints_its_message_once() -> None:
    """The traceback of an unencodable input, or of a run failing on an unencodable send,
    holds the codec's message once."""
    wf = (
        af.WorkflowBuilder("enc", start=SendsUnencodable("s"))
        .add_edge("s", TakesAnything("t"))
        .build()
    )
    with wf, wf.session() as s:
        with pytest.raises(af.EncodeError) as info:
            s.run(object())
        assert _printed(info.value).count("cannot encode a value of type 'object'") == 1
        with pytest.raises(af.ExecutorFailed) as failed:
            s.run(1)
        assert isinstance(failed.value.__cause__, af.EncodeError)
        assert _printed(failed.value.__cause__).count("cannot encode a value of type") == 1
