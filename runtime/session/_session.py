"""Sessions: long-lived actors whose state carries over from one run to the next.

A session does one thing at a time (:class:`~actorflow.errors.SessionBusy`
otherwise); any number of sessions run at once. Its id is the checkpoint lineage
key. ``Workflow.run`` is a one-off session on warm pooled actors.

This module holds the session's public surface and its lifetime (open, recycle,
reset, close). :class:`Session` is composed of collaborators, each owning its
state: its turn (one thing at a time, closing: ``_turn``), its answers
(``_answers``), its run jobs (the steps of one run, the driver and the supervisor
actor they run on: ``_jobs``) and its async side (``_async``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Mapping
from functools import partial
from typing import Any, Self

import actorflow.runtime._events as ev
from actorflow._forks import forget_in_children
from actorflow.actors import ActorBackend, HostedFactory, HostPool, HostRef
from actorflow.runtime._policy import CheckpointPolicy, RestartPolicy
from actorflow.runtime.checkpoints import Checkpointer, Lineage, Restored
from actorflow.runtime.supervisor import Driver, HistoryLog
from actorflow.storage import CheckpointStore, Lease

from ._answers import Answers
from ._async import AsyncRuns
from ._delivery import End, EventStream, QueueSink, pending_of
from ._engine import Engine
from ._history import Chronicle
from ._jobs import NO_INPUT, RunJobs
from ._ownership import Ownership
from ._turn import Turn

__all__ = ["NO_INPUT", "Session"]


class Session:
    """A live instance of a workflow: actors and state persist between runs.

    Create with ``workflow.session(...)`` or ``workflow.resume(...)``; use as a
    context manager or call :meth:`close`. Thread-safe: concurrent calls get
    :class:`SessionBusy` instead of interleaving.
    """

    def __init__(
        self,
        engine: Engine[Session],
        session_id: str | None = None,
        *,
        store: CheckpointStore | None = None,
        checkpoint: CheckpointPolicy | None = None,
        restored: Restored | None = None,
        restart: RestartPolicy | None = None,
        ownership: Ownership | None = None,
        lineage: Lineage | None = None,
        pool: HostPool | None = None,
        history_seq: int = 0,
    ) -> None:
        self._engine = engine
        self._pool = pool if pool is not None else engine.pool
        self._ownership = ownership
        self._answers = Answers(lineage if lineage is not None else Lineage())
        if ownership is not None:
            ownership.release_with(self)
        self._restart = restart if restart is not None else engine.restart
        self._id = session_id or os.urandom(16).hex()  # the shape of uuid4().hex, cheaper
        self._store = store
        self._policy = checkpoint or CheckpointPolicy()
        self._turn = Turn()
        self._history = Chronicle(
            HistoryLog(history_seq, durable=store is not None), store, self._turn, lambda: self._id
        )
        self._runs = RunJobs(
            engine,
            self._turn,
            self._answers,
            self._new_driver(restored),
            restored,
            ownership=ownership,
        )
        self._async = AsyncRuns(engine, self._turn, self._runs)
        forget_in_children(self)

    # --- properties ---------------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id (checkpoint lineage key)."""
        return self._id

    @property
    def backend(self) -> ActorBackend:
        """Where this session's executors are hosted."""
        return self._pool.backend

    @property
    def lease(self) -> Lease | None:
        """The store lease this session holds (None without a store): owner, token, expiry."""
        return self._ownership.lease if self._ownership is not None else None

    @property
    def last_checkpoint_id(self) -> str | None:
        """Id of the newest checkpoint this session wrote or resumed from."""
        return self._runs.last_checkpoint_id

    @property
    def pending_requests(self) -> tuple[ev.PendingRequest, ...]:
        """Requests waiting for answers (also after a resume), sorted by id."""
        return pending_of(self._runs.driver.state.pending)

    def history(self, since: int = 0) -> list[ev.Event]:
        """The session's history from number ``since``: what its runs did, in order.

        Each event has its number in ``seq``: a run started (with its input), its
        outputs, executor failures (with a short traceback), restarts (with their
        backoff), rolled-back supersteps, requests asked and answered, and how each
        run ended. With a store this covers every run of the session id, in any
        process, whose checkpoints are still stored (entries go with their
        checkpoints); without one, the last 10,000 events of this session object.
        Safe from any thread, during a run too. See ``docs/history.md``.

        Raises:
            CheckpointCorrupt: a stored record of the session cannot be decoded.
            DecodeError: a stored value is of a type this process has not registered.
        """
        return self._history.read(_since(since))

    def follow(self, since: int = 0, *, forever: bool = False) -> Generator[ev.Event, None, None]:
        """The history from ``since`` (see :meth:`history`), then each history event as
        it is emitted, by whatever runs this session.

        Without ``forever`` it ends once no run is going (at once after the backlog
        for an idle session, or when the run in progress ends); with it, when the
        session closes. A consumer that lost its place follows again from the last
        ``seq`` it saw plus one, and misses and repeats nothing. Closing the iterator
        stops following; it never stops a run.
        """
        return self._history.follow(_since(since), forever=forever)

    def afollow(self, since: int = 0, *, forever: bool = False) -> AsyncIterator[ev.Event]:
        """Async :meth:`follow`: never blocks the event loop."""
        return self._history.afollow(_since(since), forever=forever)

    def respond(
        self,
        answers: Mapping[str, Any],
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ev.RunResult:
        """Answer pending requests and run until idle again.

        Each answer is delivered to the requesting executor's ``@response_handler``.
        With a store, a ``response`` checkpoint records the queued answers before
        any is handled, so that step is replayable. Answering some requests leaves
        the rest pending.

        Raises:
            RequestError: an unknown id, a second answer to the same request, or a
                value of the wrong type; nothing is consumed.
        """
        return self._run_blocking(NO_INPUT, max_supersteps, metadata, answers)

    def save(self, *, metadata: Mapping[str, Any] | None = None) -> str | None:
        """Store the session as it stands between runs: a session never run, or a fork
        (``resume(..., as_session=)``) before its first run, is then found by another
        process (``store.latest(session=...)``) and resumed like any other; a stored
        one gets a newer checkpoint carrying ``metadata``.

        The cut written is ``final`` at the session's superstep, carrying ``metadata``
        and no history: nothing ran. With messages in flight (a fork of a barrier in
        the middle of a run, or a session whose run was cancelled) it is a ``step`` cut,
        which its next run continues, and its metadata also holds
        ``actorflow.saved: True`` (:data:`~actorflow.runtime.checkpoints.SAVED_KEY`):
        no run wrote it, unlike a step cut that may be the last of a process that died.

        >>> import actorflow as af
        >>> class Echo(af.Executor):
        ...     @af.handler
        ...     def on_text(self, text: str, ctx: af.Context[None]) -> None:
        ...         ctx.output(text)
        >>> store = af.MemoryStore()
        >>> with af.WorkflowBuilder("echo", start=Echo("echo")).build() as wf:
        ...     with wf.session("new", store=store) as session:
        ...         saved = session.save(metadata={"owner": "ann"})
        ...     with wf.resume(store, session="new") as again:  # another process may
        ...         print(store.load(saved).metadata, again.run("hi").outputs)
        {'owner': 'ann'} ['hi']

        Returns:
            The id of the cut written; None without a store (nothing is stored).

        Raises:
            SessionBusy: a run is active; or the store holds the session and its last
                run stopped with messages in flight because it failed or its process
                died (the cut saying so would be hidden), so run it on first. Nothing
                is stored.
            ExecutorFailed: an executor's state could not be snapshotted.
            CheckpointWriteFailed: the store refused the cut (a lease lost, say).
        """
        return self._runs.save(metadata)

    async def asave(self, *, metadata: Mapping[str, Any] | None = None) -> str | None:
        """Async :meth:`save`: waits for the store on a worker thread, not on the loop."""
        return await asyncio.to_thread(self._runs.save, metadata)

    def queue_answers(self, answers: Mapping[str, Any]) -> None:
        """Validate and queue answers without running (the next run handles them).

        Raises:
            RequestError: as for :meth:`respond`; nothing is consumed.
            SessionBusy: a run is active.
        """
        self._turn.take(self._id, "take answers")
        try:
            self._turn.check_open(self._id)
            self._answers.queue(self._runs.driver.state, answers)
        finally:
            self._turn.give()

    # --- running ------------------------------------------------------------------

    def run(
        self,
        input: Any = NO_INPUT,
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ev.RunResult:
        """Run to idle and return the result.

        Raises:
            InputNotAccepted: the start executor has no handler for the input type
                (raised before anything runs).
            SessionBusy: the session is already running or resetting.
            RunFailed: the run failed (``ExecutorFailed``, ``SuperstepLimitExceeded``,
                ...), the original error chained.
        """
        return self._run_blocking(input, max_supersteps, metadata, None)

    def _run_blocking(
        self,
        value: Any,
        max_supersteps: int | None,
        metadata: Mapping[str, Any] | None,
        answers: Mapping[str, Any] | None,
    ) -> ev.RunResult:
        runs = self._runs
        raw: list[ev.Event] = []
        job = runs.begin(value, max_supersteps, metadata, raw.append, answers=answers)
        future = runs.submit(job)
        try:
            end: End = future.get()
        except BaseException:
            # KeyboardInterrupt or similar in the caller: stop at the next barrier.
            runs.abandon(future)
            raise
        return runs.finish(job, raw, end)

    def stream(
        self,
        input: Any = NO_INPUT,
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        since: int | None = None,
    ) -> Iterator[ev.Event]:
        """Run and yield each event as it happens.

        With ``since``, the session's history from that number (see :meth:`history`)
        comes first, then the run's events: a consumer that lost its connection
        continues from the last ``seq`` it saw plus one.

        Abandoning the iterator (``close()``, even before the first event, or
        dropping it after a ``break``) cancels the run, as does a ``KeyboardInterrupt``
        while it waits, and returns within :data:`STOP_WAIT` s; its remaining events
        are never delivered to a later run. A failure raises after its
        ``RunFailedEvent`` was yielded.
        """
        sink = QueueSink()
        backlog = self._history.read(_since(since)) if since is not None else []
        job = self._runs.begin(input, max_supersteps, metadata, sink)
        if since is not None:
            # The turn is ours now: nothing can be numbered before this run starts.
            for event in backlog + self._history.after(backlog, since):
                sink(event)
        future = self._runs.submit(job)
        return EventStream(sink, partial(self._runs.abandon, future))

    async def arun(
        self,
        input: Any = NO_INPUT,
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ev.RunResult:
        """Async :meth:`run`: never blocks the event loop.

        Cancelling the awaiting task (``task.cancel()``, ``asyncio.wait_for``,
        ``asyncio.timeout``) cancels the run: it stops at the next barrier, and a
        handler still running :data:`CANCEL_GRACE` s after the cancel is abandoned
        (see :meth:`Session.cancel`); the task raises ``CancelledError`` within
        :data:`STOP_WAIT` s, whatever its handlers do.
        """
        return await self._async.run(input, max_supersteps, metadata, None)

    async def arespond(
        self,
        answers: Mapping[str, Any],
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ev.RunResult:
        """Async :meth:`Session.respond`: answer pending requests and run until idle.

        Raises:
            RequestError: as for :meth:`Session.respond`; nothing is consumed.
        """
        return await self._async.run(NO_INPUT, max_supersteps, metadata, answers)

    def astream(
        self,
        input: Any = NO_INPUT,
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        since: int | None = None,
    ) -> AsyncGenerator[ev.Event, None]:
        """Async :meth:`stream`: never blocks the event loop.

        ``since`` replays the history from that number first, as in :meth:`stream`.
        Leaving early (``break``, ``await it.aclose()``) or cancelling the consuming
        task cancels the run as :meth:`arun` does; once ``aclose()`` returns the
        session is free for the next call. After a ``break``, Python closes the
        generator a step of the loop later; to have the session free at once, close
        it where you leave: ``async with contextlib.aclosing(s.astream(x)) as events``.
        """
        return self._async.stream(
            input,
            max_supersteps,
            metadata,
            self._history,
            _since(since) if since is not None else None,
        )

    def cancel(self) -> None:
        """Ask the current run to stop at the next barrier (safe from any thread).

        Handlers still running :data:`CANCEL_GRACE` s after the cancel are abandoned
        (as a ``timeout=`` does): the superstep is rolled back to the last barrier
        (its input back in flight, so a later ``run()`` re-delivers it), or, with no
        snapshot of that barrier (no store, no restart policy), the session is left
        broken until ``reset()``. The run's caller gets ``RunStatus.CANCELLED``.

        Python cannot kill a thread: an abandoned handler keeps running on its own
        (daemon) actor thread until it returns. Nothing it sends or outputs after
        that is read, but side effects outside the run (a file written, a request
        made) still happen; make such handlers idempotent or give them a timeout.
        """
        self._runs.cancel()

    def wrap_host(
        self, executor: str, wrapper: Callable[[HostRef, HostedFactory], HostRef]
    ) -> None:
        """Send this session's later calls to ``executor``'s host through
        ``wrapper(host, program)``, on every host that serves it, until the session is
        reset: the seam where testing tools wrap a host (see
        :func:`actorflow.testing.inject_fault`).

        Raises:
            KeyError: the workflow has no executor ``executor``.
        """
        self._runs.driver.wrap_host(executor, wrapper)

    def reset(self) -> None:
        """Rebuild every actor from its blueprint; drop everything in flight.

        Fan-in buffers, in-flight messages, pending requests and undelivered events
        are dropped, and checkpoints continue under a new lineage (no parent).

        Raises:
            SessionBusy: a run is active (a run started during a reset raises too).
        """
        self._turn.take(self._id, "reset")
        try:
            self._turn.check_open(self._id)
            self._runs.retire()
            # Request ids never repeat those of the old lineage.
            self._answers.follow(Lineage.fresh())
            self._runs.install(self._new_driver(None))
        finally:
            self._turn.give()

    def close(self) -> None:
        """Stop this session's run and give back every actor; returns within a second.

        A running run is cancelled (see :meth:`cancel`). When this returns, every
        program has been stopped and its resources released, unless the run was
        stuck outside any handler (a ``restore()`` or resource factory that never
        returned): the session is closed then, and gives its actors back itself
        when that run ends.
        """
        self._close(wait=True)

    def _close(self, *, wait: bool) -> None:
        if self._turn.closed:
            return
        self._runs.cancel()
        # A run reaches its barrier within CANCEL_GRACE of the cancel, abandoning any
        # handler still running then; a run stuck elsewhere (a restore() or resource
        # factory that never returns) closes the session itself when it ends.
        self._turn.close(self._teardown, wait=wait)

    def _teardown(self, wait: bool) -> None:
        """Give back every actor (the turn is held: by the closer, or the run ending)."""
        self._runs.close(wait=wait)
        self._history.log.close()  # followers end
        if self._ownership is not None:
            self._ownership.release()  # after the checkpointer drained its writes

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """Async :meth:`Session.close`: actors are stopped off the event loop."""
        if not self._runs.holds_actors:
            self.close()  # nothing was started: nothing to wait for
            return
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<Session {self._id!r} of workflow {self._engine.name!r}>"

    def forget_parent(self) -> None:
        """In a forked child (its only thread): this session is the parent's (see
        :meth:`Turn.leave_to_parent`); its followers here end."""
        self._turn.leave_to_parent(os.getppid())
        self._history.log.forget_parent()

    # --- internals ----------------------------------------------------------------

    def _new_driver(self, restored: Restored | None) -> Driver:
        spec = self._engine.spec
        checkpointer = None
        if self._store is not None:
            checkpointer = Checkpointer(
                self._store,
                spec,
                self._id,
                self._policy,
                parent=restored.checkpoint if restored else None,
                lease=self._ownership.first if self._ownership is not None else None,
                lineage=self._answers.lineage,
                on_stored=self._history.log.stored,
                held=restored.held() if restored else None,
            )
        driver = Driver(
            spec,
            self._pool,
            session=self._id,
            restart=self._restart,
            restart_overrides=self._engine.restart_overrides,
            checkpointer=checkpointer,
            history=self._history.log,
        )
        if restored is not None:
            driver.state = restored.state
            driver.resume_parts(restored.completed)
        lineage = self._answers.lineage
        driver.request_suffix, driver.origin = lineage.suffix, lineage.origin
        attempt = restored.failed_attempt() if restored is not None else None
        if attempt is not None and attempt.scope == lineage.effect_scope(self._id):
            driver.hand_back(attempt)  # (a fork, with keys of its own, calls anew)
        return driver

    def _give_back(self, completed: bool) -> None:
        """After a one-off run: kept warm by the engine if the run completed cleanly
        and the engine has room (see ``_recycle``), else closed without awaiting unloads
        (a one-off run's programs are its own). Caller: the workflow, which owns this
        session alone."""
        if completed and self._recyclable() and self._engine.keep_warm(self):
            return
        self._close(wait=False)

    def _recyclable(self) -> bool:
        """Whether this idle one-off session can serve another one-off run (see ``_recycle``)."""
        return not self._turn.closed and self._runs.recyclable()

    def _recycle(self) -> None:
        """Turn this idle one-off session into a new one on the same warm actors.

        It gets a new id; every executor is rebuilt from its blueprint by its next
        call, and nothing of the last run (state in flight, restart counts, queued
        answers, a cancel) carries over. Caller: the workflow, which owns this
        session alone.
        """
        self._id = os.urandom(16).hex()
        self._runs.recycle(self._id)
        self._answers.drop()


def _since(since: object) -> int:
    """``since`` checked: a history number (an int >= 0)."""
    if not isinstance(since, int) or isinstance(since, bool) or since < 0:
        raise ValueError(f"since= must be a history number (an int >= 0), got {since!r}")
    return since
