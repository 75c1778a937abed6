"""The handler's window on the run: send, output, request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from actorflow.errors import ContextExpired

if TYPE_CHECKING:
    from ._buffer import StepBuffer
    from ._effects import EffectJournal, SqlValue

__all__ = ["RUN_INPUT", "Context"]

RUN_INPUT = "__input__"
"""``ctx.source`` of the run's input (and of answers to requests: ``"__response__"``)."""

T_Send = TypeVar("T_Send")
R = TypeVar("R")


class Context(Generic[T_Send]):
    """What a handler may do besides changing its own state.

    One context per delivered message; valid only while the handler runs. The
    type parameter declares what the handler sends (``Context[Order | Refund]``),
    so ``build()`` can check that every such type has a target and a type checker
    can check each ``send``; ``Context[None]`` declares a handler that sends
    nothing (it may still ``output`` and ``request``). A bare ``Context`` (allowed
    at run time, "missing type arguments" under ``mypy --strict``) declares nothing.
    """

    __slots__ = ("_buffer", "_live", "_request_id", "_source")

    def __init__(self, buffer: StepBuffer, source: str, request_id: str | None = None) -> None:
        self._buffer = buffer
        self._source = source
        self._request_id = request_id
        self._live = True
        """False once the handler returned: what it does then would be lost."""

    def expire(self) -> None:
        """End the context with its handler (the runner calls this): what the handler
        does goes into its superstep, which is reported as the handler returns, so a
        thread or task it left behind gets :class:`~actorflow.errors.ContextExpired`
        instead of a send, output, effect result or statement that would be lost."""
        self._live = False

    def _check_live(self, action: str) -> None:
        if not self._live:
            raise ContextExpired(
                f"executor {self.executor_id!r} called ctx.{action} in superstep "
                f"{self.superstep} after its handler returned (from a thread or task it "
                "started), when the superstep had ended: it would be lost; wait for that "
                "work inside the handler (await asyncio.gather(...), future.result()) "
                "before returning"
            )

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
        self._check_live("send")
        self._buffer.send(value, to)

    def output(self, value: Any) -> None:
        """Emit ``value`` as a run output (encoded now; the caller receives its own copy)."""
        self._check_live("output")
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
        self._check_live("request")
        return self._buffer.request(value, response_type, request_id)

    # --- effects (see docs/effects.md) ---------------------------------------------

    def effect(
        self, fn: Callable[..., R], /, *args: Any, key: str | None = None, **kwargs: Any
    ) -> R:
        """Call ``fn(*args, **kwargs)`` once per superstep along the lineage; journal its result.

        The result is encoded like a message (registered types only) and recorded with
        the checkpoint that commits this superstep; the handler gets a decoded copy.
        When the superstep runs again along the same lineage (the handler failed and
        was restarted, the superstep was rolled back and run again in this process, or
        a replay), the recorded result is returned and ``fn`` is not called. A call in
        flight when the process died is made again, with the same :meth:`effect_key`.

        Args:
            fn: the call to the outside world (not a coroutine function: see :meth:`aeffect`).
            key: the effect's name in this superstep, by default ``fn``'s qualified name;
                the n-th effect of a name finds the n-th recorded result of that name.

        Raises:
            EncodeError: the result cannot be encoded (names the executor and the effect).
            EffectNotRecorded: in a replay, the stored run made no such effect.
            Whatever ``fn`` raises (nothing is recorded; the next attempt calls again).

        >>> import actorflow as af
        >>> calls, attempts = [], []
        >>> def charge(amount: int) -> str:
        ...     calls.append(amount)
        ...     return f"receipt-{amount}"
        >>> class Pay(af.Executor):
        ...     @af.handler
        ...     def on_amount(self, amount: int, ctx: af.Context[None]) -> None:
        ...         receipt = ctx.effect(charge, amount, key="charge")
        ...         attempts.append(receipt)
        ...         if len(attempts) == 1:  # fail once, after the charge
        ...             raise RuntimeError("lost the connection")
        ...         ctx.output(receipt)
        >>> restart = af.RestartPolicy(max_restarts=1)
        >>> with af.WorkflowBuilder("pay", start=Pay("pay"), restart=restart).build() as wf:
        ...     wf.run(5).outputs
        ['receipt-5']
        >>> calls  # charged once, though the handler ran twice
        [5]
        """
        self._check_live("effect")
        result: R = self._journal().call(key or _name_of(fn), fn, args, kwargs)
        self._check_live("effect (its call ended after the handler: not journaled)")
        return result

    async def aeffect(
        self,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        key: str | None = None,
        **kwargs: Any,
    ) -> R:
        """:meth:`effect` for a coroutine function: ``await ctx.aeffect(fetch, url)``
        (a plain function's result is recorded as it is)."""
        self._check_live("aeffect")
        result: R = await self._journal().acall(key or _name_of(fn), fn, args, kwargs)
        self._check_live("aeffect (its call ended after the handler: not journaled)")
        return result

    def effect_key(self, key: str) -> str:
        """The idempotency key of the next effect named ``key`` (pass it to the API called).

        Derived from the session (its id and the random origin of this use of the
        id), the lineage, the superstep, the executor, the name and the occurrence:
        the same on every attempt at this superstep along this lineage, a resume's
        too (so the API deduplicates a call a crash interrupted), different for
        another session id, a session id used anew (deleted, then opened again;
        another store; no store), a fork, a reset or a later superstep.
        """
        self._check_live("effect_key")
        return self._journal().key(key)

    def sql(self, statement: str, params: tuple[SqlValue, ...] | list[SqlValue] = ()) -> None:
        """Queue a write to the session store's own database, committed with this superstep.

        The statement runs in the transaction that stores the checkpoint committing
        this superstep (SQLiteStore, PostgresStore): after a crash, both are there or
        neither is; a superstep that fails or is rolled back commits none of its
        statements. Placeholders are the store's own (``?`` for SQLite, ``%s`` for
        PostgreSQL: see :attr:`sql_dialect`). A statement that fails in that
        transaction stops the run with ``CheckpointWriteFailed`` (``StatementFailed``
        chained) and nothing of the checkpoint is stored.

        Raises:
            StatementRefused: the store commits no statements, or the statement or a
                parameter cannot run inside the checkpoint's transaction.
        """
        self._check_live("sql")
        self._journal().queue_sql(statement, tuple(params))

    @property
    def sql_dialect(self) -> str | None:
        """``"sqlite"`` or ``"postgres"``: what :meth:`sql` writes to; None if it cannot."""
        return self._journal().dialect

    @property
    def fencing_token(self) -> int | None:
        """The session lease's fencing token (None without a lease), for a service that
        fences writers itself. It is not part of :meth:`effect_key`: a new owner after a
        crash gets a new token, and the key must stay the same for the retry."""
        return self._journal().fencing

    def _journal(self) -> EffectJournal:
        return self._buffer.effects()

    def __repr__(self) -> str:
        return f"<Context of {self.executor_id!r} step {self.superstep} from {self._source!r}>"


def _name_of(fn: Callable[..., Any]) -> str:
    """An effect's default name: the callable's qualified name."""
    name = getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", "effect")
    return str(name)
