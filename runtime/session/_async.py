"""The async side of a session: its runs awaited on the caller's event loop, never blocking it.

:class:`AsyncRuns` is the session's collaborator for ``arun``/``astream``: it gets
the session a supervisor actor off the loop, hands a run's events to a coroutine
through an :class:`AsyncSink` (or only the end, through an :class:`EndSink`), and
stops the run when the awaiting task is cancelled or the iterator is closed. The
steps of a run are the session's :class:`~._jobs.RunJobs`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from typing import Any

import actorflow.runtime._events as ev
from actorflow.runtime.supervisor import RunJob

from ._delivery import AsyncSink, End, EndSink, materialize
from ._engine import Engine
from ._history import Chronicle
from ._jobs import NO_INPUT, RunJobs
from ._turn import STOP_WAIT, Turn

__all__ = ["NO_INPUT", "AsyncRuns"]


class AsyncRuns:
    """A session's ``arun``/``astream``: given its engine, turn and run jobs."""

    __slots__ = ("_engine", "_runs", "_turn")

    def __init__(self, engine: Engine[Any], turn: Turn, runs: RunJobs) -> None:
        self._engine = engine
        self._turn = turn
        self._runs = runs

    async def run(
        self,
        value: Any,
        max_supersteps: int | None,
        metadata: Mapping[str, Any] | None,
        answers: Mapping[str, Any] | None,
    ) -> ev.RunResult:
        """Run (or answer, with ``answers``) until idle; see ``Session.arun``."""
        # The events are kept on the supervisor's side and only the End wakes the loop:
        # one wake-up per run instead of one per event, so the loop stays free.
        sink = EndSink(asyncio.get_running_loop())
        job = await self._begin(value, max_supersteps, metadata, answers, sink)
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
        return self._runs.finish(job, sink.events, end)

    async def stream(
        self,
        value: Any,
        max_supersteps: int | None,
        metadata: Mapping[str, Any] | None,
        history: Chronicle,
        since: int | None,
    ) -> AsyncGenerator[ev.Event, None]:
        """The run's events, each decoded on the loop (after the history from ``since``,
        if given); see ``Session.astream``."""
        sink = AsyncSink(asyncio.get_running_loop())
        backlog = await asyncio.to_thread(history.read, since) if since is not None else []

        def prelude() -> None:  # the turn is held: nothing is numbered before the run
            if since is not None:
                for event in backlog + history.after(backlog, since):
                    sink.queue.put_nowait(event)

        job = await self._begin(value, max_supersteps, metadata, None, sink, prelude=prelude)
        # aclosing: closing this generator closes the drain at once (which waits for
        # the run to stop), instead of leaving it to the loop's garbage collection.
        async with aclosing(self._drain(job, sink)) as items:
            async for item in items:
                if isinstance(item, End):
                    item.raise_error()
                else:
                    yield materialize(item)

    async def _begin(
        self,
        value: Any,
        max_supersteps: int | None,
        metadata: Mapping[str, Any] | None,
        answers: Mapping[str, Any] | None,
        sink: Callable[[Any], None],
        *,
        prelude: Callable[[], None] | None = None,
    ) -> RunJob:
        self._turn.check_open(self._runs.driver.session)
        if self._runs.needs_supervisor:
            # Tasks ready in this loop step (sessions opened together, a gather) take
            # their step before new supervisor threads compete with them for the GIL:
            # 20 sessions opened at once on a SQLiteStore stalled the loop for 16-21 ms
            # without this yield, 10-16 ms with it (bench.loop_lag).
            await asyncio.sleep(0)
            # Starting an actor thread takes a few hundred microseconds: not on the loop.
            self._runs.adopt(await asyncio.to_thread(self._engine.acquire_supervisor))
        job = self._runs.begin(value, max_supersteps, metadata, sink, answers=answers)
        if prelude is not None:
            prelude()
        self._runs.submit(job)
        return job

    async def _drain(self, job: RunJob, sink: AsyncSink) -> AsyncGenerator[Any, None]:
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
