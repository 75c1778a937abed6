"""Workflow: a built, immutable graph you can run, stream, open sessions on and resume."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator, Iterator, Mapping
from contextlib import aclosing
from functools import partial
from typing import Any

from actorflow.actors import ActorBackend, ThreadBackend
from actorflow.storage import CheckpointStore, bounded_waits

from . import _events as ev
from ._graph import GraphSpec, edge_labels
from ._policy import CheckpointPolicy, RestartPolicy
from .session import (
    DEFAULT_LEASE_TTL,
    LOCK_WAIT_FLOOR,
    Engine,
    IfExists,
    Session,
    check_open_options,
    open_off_loop,
    open_session,
    resume_session,
)

__all__ = ["Workflow"]


class Workflow:
    """A checked workflow graph. Immutable and thread-safe.

    Every ``run`` gets its own executor instances, rebuilt from blueprint bytes
    inside warm actors borrowed from this workflow's bounded pool; concurrent runs
    from many threads or tasks never share an actor. ``close()`` (or ``with wf:``)
    stops the pool; so does interpreter exit.
    """

    def __init__(
        self,
        spec: GraphSpec,
        *,
        restart: RestartPolicy | None = None,
        restart_overrides: Mapping[str, RestartPolicy] | None = None,
        backend: ActorBackend | None = None,
    ) -> None:
        self._spec = spec
        self._engine: Engine[Session] = Engine(
            spec,
            restart=restart,
            restart_overrides=restart_overrides or {},
            backend=backend if backend is not None else ThreadBackend(),
        )

    @property
    def name(self) -> str:
        """The workflow name."""
        return self._spec.name

    @property
    def backend(self) -> ActorBackend:
        """Where this workflow's executors are hosted unless a session says otherwise."""
        return self._engine.backend

    @property
    def signature(self) -> str:
        """Hex digest of the graph's structure, executor types and handler types."""
        return self._spec.signature

    @property
    def start_executor(self) -> str:
        """Id of the executor that receives the input."""
        return self._spec.start

    @property
    def executor_ids(self) -> tuple[str, ...]:
        """Ids of every executor, sorted."""
        return tuple(sorted(self._spec.programs))

    def describe(self) -> dict[str, Any]:
        """The canonical description the signature hashes (executors, handlers, edges)."""
        return copy.deepcopy(self._spec.description)

    def edges(self) -> list[tuple[str, str, str, str]]:
        """Every edge as ``(kind, source, target, label)``, sorted: what drawing the
        graph needs (``actorflow graph``).

        ``kind`` is ``edge``, ``switch``, ``fan_out`` or ``fan_in``; ``label`` says what
        decides whether a value takes the edge: ``""`` for a plain edge, a ``when``
        predicate's name (``"when"`` for a lambda), a switch case's index and predicate
        name (``"case 0: is_big"``; ``"case i"`` for a lambda) or ``"default"``, a fan-out selector's name
        (``"select"`` for a lambda, ``""`` without one), ``"fan_in"``.

        >>> import actorflow as af
        >>> class Pass(af.Executor):
        ...     @af.handler
        ...     def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ...         ctx.send(n)
        >>> class Keep(af.Executor):
        ...     @af.handler
        ...     def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ...         ctx.output(n)
        >>> def is_big(n: int) -> bool:
        ...     return n > 5
        >>> builder = af.WorkflowBuilder("w", start=Pass("a"))
        >>> _ = builder.add_switch("a", [af.Case(is_big, Keep("b")), af.Default(Keep("c"))])
        >>> with builder.build() as wf:
        ...     wf.edges()
        [('switch', 'a', 'b', 'case 0: is_big'), ('switch', 'a', 'c', 'default')]
        """
        return edge_labels(self._spec.programs)

    # --- one-off runs -------------------------------------------------------------

    def run(
        self,
        input: Any,
        *,
        max_supersteps: int | None = None,
        store: CheckpointStore | None = None,
        session: str | None = None,
    ) -> ev.RunResult:
        """Run once on fresh executor instances and return the result.

        Args:
            input: the value delivered to the start executor.
            max_supersteps: bound on the run (default: the builder's).
            store: checkpoint every superstep into this store (session id: ``session``
                or a fresh one), so the run can be resumed with :meth:`resume`.
            session: session id for the checkpoints.

        Raises:
            InputNotAccepted: the start executor does not handle the input's type.
            RunFailed: the run failed; the original error is chained.
        """
        recyclable = store is None and session is None
        s = self._take_warm() if recyclable else self.session(session, store=store)
        completed = False
        try:
            result = s.run(input, max_supersteps=max_supersteps)
            completed = recyclable and result.status is ev.RunStatus.COMPLETED
            return result
        finally:
            s._give_back(completed)

    def stream(self, input: Any, *, max_supersteps: int | None = None) -> Iterator[ev.Event]:
        """Run once, yielding events as they happen (see :meth:`Session.stream`)."""
        s = self.session()
        try:
            yield from s.stream(input, max_supersteps=max_supersteps)
        finally:
            s.close()

    async def arun(self, input: Any, *, max_supersteps: int | None = None) -> ev.RunResult:
        """Async :meth:`run`; never blocks the event loop.

        Cancelling the awaiting task stops the run within a second, whatever its
        handlers do (see :meth:`Session.arun`).
        """
        s = self._take_warm()
        completed = False
        try:
            result = await s.arun(input, max_supersteps=max_supersteps)
            completed = result.status is ev.RunStatus.COMPLETED
            return result
        finally:
            if completed:
                s._give_back(completed)  # the run is over: nothing to wait for
            else:
                await asyncio.to_thread(s._give_back, completed)

    async def astream(
        self, input: Any, *, max_supersteps: int | None = None
    ) -> AsyncGenerator[ev.Event, None]:
        """Async :meth:`stream`; never blocks the event loop."""
        s = self.session()
        try:
            async with aclosing(s.astream(input, max_supersteps=max_supersteps)) as events:
                async for event in events:
                    yield event
        finally:
            await s.aclose()

    # --- sessions -----------------------------------------------------------------

    def session(
        self,
        session_id: str | None = None,
        *,
        store: CheckpointStore | None = None,
        checkpoint: CheckpointPolicy | None = None,
        restart: RestartPolicy | None = None,
        if_exists: IfExists = "error",
        wait: float = 0.0,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        backend: ActorBackend | None = None,
    ) -> Session:
        """Open a long-lived session: actors and executor state persist between runs.

        With a store the session is opened for writing: it takes the session's lease
        (see ``docs/sessions.md``), renewed while it is open and released by ``close()``.

        Args:
            session_id: lineage key for checkpoints (default: a fresh id).
            store: where to checkpoint (every superstep by default); None: no checkpoints,
                and no snapshot is ever taken.
            checkpoint: when and how to checkpoint.
            restart: this session's restart policy, in place of the workflow's
                (``WorkflowBuilder(restart=...)``); per-executor overrides
                (``set_restart``) still apply. ``RestartPolicy(max_restarts=0)``
                makes the session fail fast.
            if_exists: when ``session_id`` already has checkpoints in ``store``:
                ``"error"`` (raise :class:`SessionExists`), ``"resume"`` (continue its
                latest checkpoint, as :meth:`resume`) or ``"fresh"`` (a new lineage;
                the old one stays readable, its pending requests become unanswerable).
            wait: seconds to wait for another owner of the session to let go.
            lease_ttl: seconds the lease outlives this process if it dies (the
                takeover time after a crash); renewed every third of it.
            backend: where this session's executors are hosted (default: the
                workflow's, ``build(backend=...)``), e.g. ``RayBackend()``. A
                checkpoint taken on one backend resumes on any other.

        Raises:
            SessionOwned: another open session (any process) holds the session.
            SessionExists: ``session_id`` has checkpoints and ``if_exists="error"``.
        """
        self._check_open()
        check_open_options(checkpoint=checkpoint, restart=restart, wait=wait, lease_ttl=lease_ttl)
        with bounded_waits(max(wait, LOCK_WAIT_FLOOR)):  # the store's locks too
            return open_session(
                self._engine,
                session_id,
                store=store,
                checkpoint=checkpoint,
                restart=restart,
                if_exists=if_exists,
                wait=wait,
                lease_ttl=lease_ttl,
                pool=self._engine.pool_for(backend),
            )

    def resume(
        self,
        store: CheckpointStore,
        *,
        session: str | None = None,
        checkpoint_id: str | None = None,
        checkpoint: CheckpointPolicy | None = None,
        responses: Mapping[str, Any] | None = None,
        restart: RestartPolicy | None = None,
        as_session: str | None = None,
        wait: float = 0.0,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        backend: ActorBackend | None = None,
    ) -> Session:
        """Open a session restored from a checkpoint (the session's latest, or ``checkpoint_id``).

        Every executor's private state, in-flight messages, fan-in buffers, pending
        requests and the superstep counter are restored; call ``run()`` (no input)
        to continue. The session is opened for writing: it holds the session's lease
        until closed (see :meth:`session`). Resuming from an older checkpoint
        (time travel) starts a new branch of the session: history is never
        overwritten, and the new records name that checkpoint as their parent.

        ``responses`` answers pending requests (as :meth:`Session.respond` would);
        they are handled by the next ``run()``. ``restart``, ``wait``, ``lease_ttl``
        and ``backend`` are as for :meth:`session`.

        Args:
            as_session: fork into this new session id (it must have no checkpoints)
                instead of continuing the resumed session; the original lineage is
                untouched.

        Raises:
            CheckpointNotFound: nothing to resume.
            GraphMismatch: the checkpoint was taken on a different graph.
            StateMigrationError: an executor's stored state cannot be brought to its
                current ``state_version``.
            RequestError: a response does not fit a pending request.
            SessionOwned: another open session holds the session (``as_session``'s).
            SessionExists: ``as_session`` already has checkpoints.
        """
        self._check_open()
        check_open_options(checkpoint=checkpoint, restart=restart, wait=wait, lease_ttl=lease_ttl)
        with bounded_waits(max(wait, LOCK_WAIT_FLOOR)):  # the store's locks too
            resumed = resume_session(
                self._engine,
                store,
                session=session,
                checkpoint_id=checkpoint_id,
                checkpoint=checkpoint,
                restart=restart,
                as_session=as_session,
                wait=wait,
                lease_ttl=lease_ttl,
                pool=self._engine.pool_for(backend),
            )
        if responses:
            try:
                resumed.queue_answers(responses)
            except BaseException:
                resumed.close()
                raise
        return resumed

    async def asession(
        self,
        session_id: str | None = None,
        *,
        store: CheckpointStore | None = None,
        checkpoint: CheckpointPolicy | None = None,
        restart: RestartPolicy | None = None,
        if_exists: IfExists = "error",
        wait: float = 0.0,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        backend: ActorBackend | None = None,
    ) -> Session:
        """Async :meth:`session`: the lease is taken and the store read off the event loop
        (``async with await wf.asession(id, store=store) as s:``).

        Cancelling the awaiting task never leaves a session open: one the open makes
        after all is closed (its lease released). Arguments as for :meth:`session`.

        Raises:
            SessionOwned, SessionExists: as for :meth:`session`.
        """
        return await open_off_loop(
            partial(
                self.session,
                session_id,
                store=store,
                checkpoint=checkpoint,
                restart=restart,
                if_exists=if_exists,
                wait=wait,
                lease_ttl=lease_ttl,
                backend=backend,
            )
        )

    async def aresume(
        self,
        store: CheckpointStore,
        *,
        session: str | None = None,
        checkpoint_id: str | None = None,
        checkpoint: CheckpointPolicy | None = None,
        responses: Mapping[str, Any] | None = None,
        restart: RestartPolicy | None = None,
        as_session: str | None = None,
        wait: float = 0.0,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        backend: ActorBackend | None = None,
    ) -> Session:
        """Async :meth:`resume`: the lease is taken and the checkpoint read off the event loop.

        Cancelling the awaiting task never leaves a session open (see :meth:`asession`).
        Arguments as for :meth:`resume`.

        Raises:
            CheckpointNotFound, GraphMismatch, StateMigrationError, RequestError,
            SessionOwned, SessionExists: as for :meth:`resume`.
        """
        return await open_off_loop(
            partial(
                self.resume,
                store,
                session=session,
                checkpoint_id=checkpoint_id,
                checkpoint=checkpoint,
                responses=responses,
                restart=restart,
                as_session=as_session,
                wait=wait,
                lease_ttl=lease_ttl,
                backend=backend,
            )
        )

    # --- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        """Stop the warm actor pool. Open sessions keep their actors until closed."""
        self._engine.close()

    async def aclose(self) -> None:
        """Async :meth:`close`: the actors are stopped off the event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Workflow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Workflow:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r} executors={list(self.executor_ids)}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # A sub-workflow's inner workflow travels inside its program to a remote host
        # as code: the graph and policies, never the pools or warm sessions.
        engine = self._engine
        return (_rebuild, (self._spec, engine.restart, engine.restart_overrides, engine.backend))

    def _check_open(self) -> None:
        self._engine.check_open()

    def _take_warm(self) -> Session:
        """A session for one blocking one-off run: a recycled one when one is idle.

        A one-off run without a store needs nothing from its session but the warm
        actors, and building a session, borrowing its hosts and giving them back
        cost a tenth of a small run's CPU (W2: ~16 of ~170 us); so a session whose
        run completed cleanly is kept (see :meth:`Session._give_back`) for the next one.
        """
        self._engine.check_open()
        s = self._engine.take_warm()
        if s is None:
            return self.session()
        s._recycle()
        return s


def _rebuild(
    spec: GraphSpec,
    restart: RestartPolicy | None,
    overrides: dict[str, RestartPolicy],
    backend: ActorBackend,
) -> Workflow:
    return Workflow(spec, restart=restart, restart_overrides=overrides, backend=backend)
