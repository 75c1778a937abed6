"""The async twins of a session's runs: they wait on the caller's event loop, never block it.

A mixin of :class:`~._session.Session`, kept apart because it is one concern:
handing a run's events to a coroutine through an :class:`AsyncSink` and stopping
the run when the awaiting task is cancelled or the iterator is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Self

import pykka

from . import _events as ev
from ._delivery import AsyncSink, End, EndSink, materialize
from ._engine import Engine
from .supervisor import CANCEL_GRACE, RunJob, SupervisorActor

__all__ = ["NO_INPUT", "STOP_WAIT", "AsyncRuns"]

NO_INPUT: Any = object()
"""Run without new input: continue what is in flight (after a cancel or a limit)."""

STOP_WAIT = CANCEL_GRACE + 0.5
"""Seconds a caller that stops waiting (Ctrl-C, a cancelled task, a closed stream,
``close()``) gives the run to end: the barrier's grace, plus room to roll back and
replace abandoned hosts."""


class AsyncRuns:
    """``arun``/``astream`` for the session (which provides the methods declared here)."""

    if TYPE_CHECKING:

        def _begin(
            self,
            value: Any,
            max_supersteps: int | None,
            metadata: Mapping[str, Any] | None,
            emit: Callable[[Any], None],
            *,
            answers: Mapping[str, Any] | None = None,
        ) -> RunJob: ...

        def _submit(self, job: RunJob) -> pykka.Future[Any]: ...

        def _finish(self, job: RunJob, raw: list[Any], end: End) -> ev.RunResult: ...

        def close(self) -> None: ...

        def _check_open(self) -> None: ...

        _closed: bool

        _supervisor: pykka.ActorRef[SupervisorActor] | None
        _started: bool
        _engine: Engine[Any]

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
        return await self._acollect(input, max_supersteps, metadata, None)

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
        return await self._acollect(NO_INPUT, max_supersteps, metadata, answers)

    async def _acollect(
        self,
        value: Any,
        max_supersteps: int | None,
        metadata: Mapping[str, Any] | None,
        answers: Mapping[str, Any] | None,
    ) -> ev.RunResult:
        # The events are kept on the supervisor's side and only the End wakes the loop:
        # one wake-up per run instead of one per event, so the loop stays free.
        sink = EndSink(asyncio.get_running_loop())
        job = await self._abegin(value, max_supersteps, metadata, answers, sink)
        try:
            end = await asyncio.shield(sink.end)
        except asyncio.CancelledError:
            # Stop the run, and wait (not blocking the loop, STOP_WAIT s at most) for
            # its end, which frees the session.
            job.cancel.set()
            try:
                async with asyncio.timeout(STOP_WAIT):
                    await sink.end
            except TimeoutError:
                pass  # stuck outside a handler: the session stays busy until it ends
            raise
        return self._finish(job, sink.events, end)

    async def astream(
        self,
        input: Any = NO_INPUT,
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[ev.Event, None]:
        """Async :meth:`stream`: never blocks the event loop.

        Leaving early (``break``, ``await it.aclose()``) or cancelling the consuming
        task cancels the run as :meth:`arun` does; once ``aclose()`` returns the
        session is free for the next call.
        """
        sink = AsyncSink(asyncio.get_running_loop())
        job = await self._abegin(input, max_supersteps, metadata, None, sink)
        # aclosing: closing this generator closes the drain at once (which waits for
        # the run to stop), instead of leaving it to the loop's garbage collection.
        async with aclosing(self._adrain(job, sink)) as items:
            async for item in items:
                if isinstance(item, End):
                    item.raise_error()
                else:
                    yield materialize(item)

    async def aclose(self) -> None:
        """Async :meth:`Session.close`: actors are stopped off the event loop."""
        if self._supervisor is None and not self._started:
            self.close()  # nothing was started: nothing to wait for
            return
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _abegin(
        self,
        value: Any,
        max_supersteps: int | None,
        metadata: Mapping[str, Any] | None,
        answers: Mapping[str, Any] | None,
        sink: Callable[[Any], None],
    ) -> RunJob:
        self._check_open()
        if self._supervisor is None:
            # Tasks ready in this loop step (sessions opened together, a gather) take
            # their step before new supervisor threads compete with them for the GIL:
            # 20 sessions opened at once on a SQLiteStore stalled the loop for 16-21 ms
            # without this yield, 10-16 ms with it (bench.loop_lag).
            await asyncio.sleep(0)
            # Starting an actor thread takes a few hundred microseconds: not on the loop.
            self._adopt(await asyncio.to_thread(self._engine.acquire_supervisor))
        job = self._begin(value, max_supersteps, metadata, sink, answers=answers)
        self._submit(job)
        return job

    def _adopt(self, ref: pykka.ActorRef[SupervisorActor]) -> None:
        if self._supervisor is None and not self._closed:
            self._supervisor = ref
        else:  # another task of this session got one meanwhile, or it was closed
            self._engine.release_supervisor(ref)

    async def _adrain(self, job: RunJob, sink: AsyncSink) -> AsyncGenerator[Any, None]:
        finished = False
        try:
            while True:
                item = await sink.queue.get()
                if isinstance(item, End):
                    finished = True
                yield item
                if finished:
                    return
        finally:
            if not finished:
                # Cancelled or abandoned: stop the run and wait, without blocking the
                # loop and for STOP_WAIT s at most, for its end (which frees the session).
                job.cancel.set()
                try:
                    async with asyncio.timeout(STOP_WAIT):
                        while not isinstance(await sink.queue.get(), End):
                            pass
                except TimeoutError:
                    pass  # stuck outside a handler: the session stays busy until it ends
