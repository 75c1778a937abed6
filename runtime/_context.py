"""The handler's window on the run: send, output, request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ._buffer import StepBuffer

__all__ = ["RUN_INPUT", "Context"]

RUN_INPUT = "__input__"
"""``ctx.source`` of the run's input (and of answers to requests: ``"__response__"``)."""

T_Send = TypeVar("T_Send")


class Context(Generic[T_Send]):
    """What a handler may do besides changing its own state.

    One context per delivered message; valid only while the handler runs. The
    type parameter declares what the handler sends (``Context[Order | Refund]``),
    so ``build()`` can check that every such type has a target and a type checker
    can check each ``send``; ``Context[None]`` declares a handler that sends
    nothing (it may still ``output`` and ``request``). A bare ``Context`` (allowed
    at run time, "missing type arguments" under ``mypy --strict``) declares nothing.
    """

    __slots__ = ("_buffer", "_request_id", "_source")

    def __init__(self, buffer: StepBuffer, source: str, request_id: str | None = None) -> None:
        self._buffer = buffer
        self._source = source
        self._request_id = request_id

    @property
    def source(self) -> str:
        """Id of the executor that sent the message being handled (:data:`RUN_INPUT` for input)."""
        return self._source

    @property
    def request_id(self) -> str | None:
        """In a ``@response_handler``: the id of the request being answered; else None."""
        return self._request_id

    @property
    def superstep(self) -> int:
        """The superstep this handler runs in (messages sent now arrive in the next)."""
        return self._buffer.superstep

    @property
    def executor_id(self) -> str:
        """Id of the executor running this handler."""
        return self._buffer.executor_id

    def send(self, value: T_Send, to: str | None = None) -> None:
        """Send a copy of ``value`` along every out-edge whose target handles its type.

        Edge conditions run now, in this actor, before the value is encoded; the
        value is encoded immediately, so mutating it afterwards changes nothing.
        It arrives in the next superstep.

        Args:
            value: an encodable value (built-in types or ``@actorflow.message`` classes).
            to: restrict delivery to this target id (must be an out-edge target).

        Raises:
            UnroutableMessage: no out-edge target has a handler for the value.
            EncodeError: the value (or something in it) cannot be encoded.
        """
        self._buffer.send(value, to)

    def output(self, value: Any) -> None:
        """Emit ``value`` as a run output (encoded now; the caller receives its own copy)."""
        self._buffer.output(value)

    def request(self, value: Any, response_type: type, *, request_id: str | None = None) -> str:
        """Ask the caller for an answer of ``response_type``; returns the request id.

        The run goes idle with the request pending (status
        ``IDLE_WITH_PENDING_REQUESTS``); ``session.respond({id: answer})`` delivers
        the answer to this executor's ``@response_handler`` as ``(value, answer, ctx)``.

        Args:
            value: the request (encoded now, like a message).
            response_type: the type the answer must have.
            request_id: an explicit id (must be unique in the session); by default
                ``"<executor>:<superstep>:<n>"``, stable across replays.
        """
        return self._buffer.request(value, response_type, request_id)

    def __repr__(self) -> str:
        return f"<Context of {self.executor_id!r} step {self.superstep} from {self._source!r}>"
