"""The program an executor host runs: one executor instance and its handlers.

An :class:`ExecutorProgram` is the immutable, picklable description of one
executor (class, blueprint bytes, out-edges). The host calls it to make an
:class:`ExecutorRunner`, which rebuilds a private instance from the blueprint
bytes on the actor's own thread and then answers byte requests (see
:mod:`._wire`). Nothing it holds is reachable from another actor.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from actorflow.actors import HostLoop, decode, decode_state, encode_state, state_names
from actorflow.errors import DecodeError, EncodeError, HandlerReturnedValue, UnroutableMessage

from ._buffer import StepBuffer
from ._context import Context
from ._effects import NO_FRAME, EffectJournal, EffectMemory, carry
from ._state_fit import restore_fitted, undecodable
from ._wire import RESPONSE, SINGLE, StepReport, StepRequest, pack, split_digests, unpack
from .graph import Executor, HandlerInfo, OutEdge, Resource, a_label, type_label
from .telemetry import traced_step

__all__ = [
    "RESPONSE_SOURCE",
    "Attachment",
    "ExecutorProgram",
    "ExecutorRunner",
]

RESPONSE_SOURCE = "__response__"


class Attachment(Protocol):
    """Code, not state, that a blueprint hands to every instance rebuilt from it.

    A sub-workflow's inner ``Workflow`` is the case: it cannot be encoded (it is
    code, like the executor class), yet every instance needs it. The builder takes
    it from the blueprint's ``_af_code`` attribute (None for ordinary executors).
    """

    def attach(self, instance: Executor) -> None:
        """Give ``instance`` (fresh from ``cls.__new__``) its code, before ``restore``."""

    def describe(self) -> dict[str, Any]:
        """A canonical, JSON-able description; it enters the graph signature."""


@dataclass(frozen=True, slots=True)
class ExecutorProgram:
    """Everything an actor needs to host one executor. Immutable; bytes for state."""

    executor_id: str
    """Id in the graph."""
    cls: type[Executor]
    """The executor class (code, not state)."""
    blueprint: tuple[bytes, ...]
    """Initial state as encoded at build time (``encode_state`` chunks)."""
    blueprint_digests: tuple[str, ...]
    """sha256 hex digest of each blueprint chunk (computed once, at build time)."""
    timeout: float | None
    """Per-superstep time limit."""
    edges: tuple[OutEdge, ...]
    """Out-edges, for routing in this actor."""
    code: Attachment | None = None
    """Code the instance needs besides its class (a sub-workflow); never encoded.
    Not picklable when set: a backend that ships programs by pickling must rebuild it."""
    strict_routing: bool = False
    """Whether a send every condition declines fails the step (``MessageDropped``)."""
    _frozen_state: list[dict[str, Any]] = field(
        default_factory=list, compare=False, hash=False, repr=False
    )
    # The decoded blueprint, kept only when every value in it is immutable: then a
    # shallow copy is as private as a fresh decode, and much cheaper.
    blueprint_chunks: tuple[tuple[str, bytes], ...] = field(
        init=False, compare=False, hash=False, repr=False
    )
    """(digest, chunk) pairs of the blueprint: what a fresh instance's supervisor holds."""
    blueprint_digest_set: frozenset[str] = field(init=False, compare=False, hash=False, repr=False)
    state_names: tuple[str, ...] = field(init=False, compare=False, hash=False, repr=False)
    """The blueprint's attribute names: what a restored instance must have too."""
    resources: tuple[tuple[str, Resource[Any]], ...] = field(
        init=False, compare=False, hash=False, repr=False
    )
    """The class's resources, (attribute name, resource) in definition order."""

    def __post_init__(self) -> None:
        # Derived once here rather than at every install (a one-off run installs every
        # executor afresh). object.__setattr__ is how a frozen dataclass sets its own.
        pairs = tuple(zip(self.blueprint_digests, self.blueprint, strict=True))
        object.__setattr__(self, "blueprint_chunks", pairs)
        object.__setattr__(self, "blueprint_digest_set", frozenset(self.blueprint_digests))
        object.__setattr__(self, "state_names", tuple(state_names(self.blueprint)))
        object.__setattr__(self, "resources", tuple(self.cls._af_resources().items()))

    def __call__(self) -> ExecutorRunner:
        """Make the runner (called by the host, on its thread)."""
        return ExecutorRunner(self)

    def bare_instance(self) -> Executor:
        """A new instance of the class with its id, timeout and code, before ``restore``
        (``__init__`` is not called: the state comes from a blueprint or a snapshot)."""
        cls = self.cls
        instance = cls.__new__(cls)
        instance._af_id = self.executor_id
        instance._af_timeout = self.timeout
        instance._af_live = None
        if self.code is not None:
            self.code.attach(instance)
        return instance

    def initial_state(self) -> dict[str, Any]:
        """A fresh copy of the blueprint state, owned by the caller."""
        if self._frozen_state:
            return dict(self._frozen_state[0])
        state = decode_state(self.blueprint)
        if all(_immutable(v) for v in state.values()):
            self._frozen_state[:] = [dict(state)]
        return state


_IMMUTABLE_LEAVES = (type(None), bool, int, float, complex, str, bytes, range)


def _immutable(value: object, depth: int = 0) -> bool:
    """Whether nothing reachable from ``value`` can be mutated in place."""
    if isinstance(value, _IMMUTABLE_LEAVES):
        return True
    if depth < 8 and type(value) in (tuple, frozenset):
        return all(_immutable(v, depth + 1) for v in value)  # type: ignore[attr-defined]  # tuple/frozenset
    return False


class ExecutorRunner:
    """Hosts one executor instance. Every method runs on the host actor's thread."""

    def __init__(self, program: ExecutorProgram) -> None:
        self._program = program
        self._instance: Executor | None = None
        self._loop: HostLoop | None = None
        self._reported: AbstractSet[str] = frozenset()
        self._previous: Sequence[tuple[str, bytes]] = ()
        self._remembered: tuple[str, int, EffectMemory] = ("", -1, {})
        """(scope, superstep, results) of the effects of the last superstep this runner
        ran: a second attempt at it (restart, rollback) gets them without calling again."""

    # --- Hosted protocol ------------------------------------------------------

    def start(self, loop: HostLoop) -> None:
        """Take the actor's loop. The instance is built by the first call: from the
        blueprint bytes, or straight from a snapshot when that call is ``restore``
        (resuming never decodes a blueprint it would throw away)."""
        self._loop = loop

    def call(self, method: str, payload: bytes) -> bytes:
        """Answer one request from the supervisor (see :mod:`._wire`)."""
        if self._instance is None and method != "restore":
            program = self._program
            self._install(
                program.initial_state(),
                program.blueprint_chunks,
                program.blueprint_digest_set,
                from_snapshot=False,
            )
        if method == "step":
            return self._step(payload)
        if method == "snapshot":
            return pack(self._snapshot())
        if method == "restore":
            field, *chunks = unpack(payload)
            known = tuple(zip(split_digests(field), chunks, strict=True))
            self._install(
                self._decoded(chunks), known, frozenset(d for d, _ in known), from_snapshot=True
            )
            return b""
        raise ValueError(f"unknown runner method {method!r}")

    def stop(self) -> None:
        """Drop the instance; resources are released with it."""
        self._instance = None

    def _decoded(self, chunks: list[bytes]) -> dict[str, Any]:
        try:
            return decode_state(chunks)
        except DecodeError as exc:
            raise undecodable(self._program, exc) from exc

    # --- internals ------------------------------------------------------------

    def _install(
        self,
        state: dict[str, Any],
        known: Sequence[tuple[str, bytes]],
        known_digests: AbstractSet[str],
        *,
        from_snapshot: bool,
    ) -> None:
        """Build the instance from ``state``, whose chunks ``known`` (digest, bytes) the
        supervisor already holds: the next snapshot elides them and, where a chunk is
        unchanged, skips hashing it. A state ``from_snapshot`` (a resume, a rollback)
        must fit the current class (:func:`._state_fit.restore_fitted`)."""
        program = self._program
        instance = program.bare_instance()
        if from_snapshot:
            restore_fitted(program, instance, state)
        else:
            instance.restore(state)
        live: dict[str, Any] = {}
        for name, res in program.resources:
            made = res.factory()
            if inspect.isawaitable(made):
                assert self._loop is not None
                made = self._loop.run(_await(made))
            live[name] = made
        instance._af_live = live
        self._instance = instance
        # Both are replaced, never mutated, by the next snapshot: sharing is safe.
        self._reported = known_digests
        self._previous = known

    def _handler_for(self, value: object) -> tuple[Callable[..., Any], HandlerInfo] | None:
        instance = self._instance
        assert instance is not None
        info = _message_handler(type(instance), type(value))
        return None if info is None else (getattr(instance, info.name), info)

    def _response_handler_for(
        self, request: object, answer: object
    ) -> tuple[Callable[..., Any], HandlerInfo] | None:
        instance = self._instance
        assert instance is not None
        for info in type(instance)._af_handler_infos():
            if (
                info.is_response
                and info.request_spec is not None
                and isinstance(request, info.request_spec.classes)
                and isinstance(answer, info.spec.classes)
            ):
                return (getattr(instance, info.name), info)
        return None

    @property
    def program(self) -> ExecutorProgram:
        """What this runner hosts."""
        return self._program

    def _step(self, payload: bytes) -> bytes:
        request = StepRequest.unpacked(payload)
        if request.trace is not None:  # the run is traced
            return traced_step(self, request)
        program = self._program
        buffer = StepBuffer(
            program.executor_id,
            program.edges,
            request.superstep,
            request.suffix,
            strict=program.strict_routing,
        )
        return self.handle(buffer, request).packed()

    def handle(self, buffer: StepBuffer, step: StepRequest) -> StepReport:
        """Run a ``step`` request's batch into ``buffer``; returns the report."""
        buffer.open_journal = partial(self._journal, step)
        try:
            for source, group, body in step.deliveries:
                ctx: Context[Any] = Context(buffer, source, body[0] if group == RESPONSE else None)
                if group == SINGLE:
                    value = decode(body)
                    found = self._handler_for(value)
                    args: tuple[Any, ...] = (value, ctx)
                elif group == RESPONSE:
                    _request_id, request_body, answer_body = body
                    request, answer = decode(request_body), decode(answer_body)
                    found = self._response_handler_for(request, answer)
                    args = (request, answer, ctx)
                else:
                    value = [decode(item) for item in body]
                    found = self._handler_for(value)
                    args = (value, ctx)
                if found is None:
                    raise UnroutableMessage(
                        f"executor {self._program.executor_id!r} received "
                        f"{a_label(type_label(type(args[-2])))} from {source!r} but has no handler "
                        "for it"
                    )
                fn, info = found
                try:
                    if info.is_async:
                        assert self._loop is not None
                        returned = self._loop.run(fn(*args))
                    else:
                        returned = fn(*args)
                finally:
                    ctx.expire()
                if returned is not None:
                    raise HandlerReturnedValue(
                        f"handler {type(self._instance).__qualname__}.{info.name} of executor "
                        f"{self._program.executor_id!r} returned {_short(returned)}, which goes "
                        "nowhere; call ctx.output(value) to emit it as a run output, or "
                        "ctx.send(value) to pass it on, and return nothing"
                    )
            snapshot = self._snapshot() if step.want_snapshot else None
        except BaseException as exc:
            # The attempt failed: the results this host knows for the superstep (its
            # earlier attempts' too) go with the exception, so the supervisor hands them
            # to the next attempt and records them if the superstep fails for good.
            attempt = buffer.journal if buffer.journal is not None else self._journal(step)
            carry(exc, attempt.known())
            raise
        journal = buffer.journal  # None: no handler of the step needed it
        return StepReport(
            buffer.sends,
            buffer.outputs,
            buffer.requests,
            snapshot,
            None,
            buffer.dropped,
            (journal.made or None) if journal is not None else None,
            (journal.statements or None) if journal is not None else None,
        )

    def _journal(self, step: StepRequest) -> EffectJournal:
        """The step's effect journal, with what an earlier attempt at it remembered
        (here, or handed in with the step by a resume of a failed superstep)."""
        scope, fencing, dialect, recorded, handed = step.effects or NO_FRAME
        superstep = step.superstep
        if recorded is not None:
            return EffectJournal(
                self._program.executor_id,
                superstep,
                scope,
                memory={},
                recorded={(name, n): result for name, n, result in recorded},
                dialect=dialect,
                fencing=fencing,
            )
        remembered = self._remembered
        if remembered[0] != scope or remembered[1] != superstep:
            remembered = self._remembered = (scope, superstep, {})
        memory = remembered[2]
        for name, n, result in handed or ():
            memory.setdefault((name, n), result)  # this process's own attempt is newer
        return EffectJournal(
            self._program.executor_id,
            superstep,
            scope,
            memory=memory,
            dialect=dialect,
            fencing=fencing,
        )

    def _snapshot(self) -> list[list[Any]]:
        """The state as content-addressed chunks; chunks reported before are elided."""
        instance = self._instance
        assert instance is not None
        try:
            chunks = encode_state(instance.snapshot())
        except EncodeError as exc:
            raise EncodeError(
                f"executor {self._program.executor_id!r} ({type(instance).__qualname__}): its "
                f"state cannot be snapshotted: {exc}",
                type_name=exc.type_name,
                executor=self._program.executor_id,
            ) from None  # the message holds the codec's: chaining it would print it twice
        out: list[list[Any]] = []
        reported = self._reported
        # Comparing with last time's chunk at the same place is a memcmp, far cheaper
        # than hashing it again; appends leave most chunks equal.
        previous = self._previous
        digests: list[str] = []
        for index, chunk in enumerate(chunks):
            before = previous[index] if index < len(previous) else None
            if before is not None and before[1] == chunk:
                digest = before[0]
            else:
                digest = hashlib.sha256(chunk).hexdigest()
            digests.append(digest)
            out.append([digest, None if digest in reported else chunk])
        self._reported = set(digests)
        self._previous = list(zip(digests, chunks, strict=True))
        return out


def _message_handler(cls: type[Executor], kind: type) -> HandlerInfo | None:
    """The handler of ``cls`` for messages of type ``kind``: the most specific class in
    ``kind``'s MRO wins; a list without a handler for ``list`` goes to a ``list[T]``
    (fan-in) handler. Resolved once per (class, type) and kept on the class."""
    table: dict[type, HandlerInfo | None] | None = cls.__dict__.get("_af_dispatch")
    if table is None:
        table = {}
        cls._af_dispatch = table  # type: ignore[attr-defined]  # a per-class cache
    if kind in table:
        return table[kind]
    infos = [i for i in cls._af_handler_infos() if not i.is_response]
    found = next(
        (info for klass in kind.__mro__ for info in infos if klass in info.spec.classes), None
    )
    if found is None and kind is list:
        found = next((info for info in infos if info.spec.list_items), None)
    table[kind] = found  # same answer from any thread: a racing write is harmless
    return found


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _short(value: object) -> str:
    """``value`` for an error message: its repr, cut short, and its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({a_label(type_label(type(value)))})"
