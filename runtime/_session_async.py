"""The async twins of a session's runs: they wait on the caller's event loop, never block it.

A mixin of :class:`~._session.Session`, kept apart because it is one concern:
handing a run's events to a coroutine through an :class:`AsyncSink` and stopping
the run when the awaiting task is cancelled or the iterator is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

import pykka

from . import _events as ev
from ._delivery import AsyncSink, End, materialize
from ._job import RunJob

__all__ = ["NO_INPUT", "AsyncRuns"]

NO_INPUT: Any = object()
"""Run without new input: continue what is in flight (after a cancel or a limit)."""


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

    async def arun(
        self,
        input: Any = NO_INPUT,
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ev.RunResult:
        """Async :meth:`run`: never blocks the event loop.

        Cancelling the awaiting task cancels the run at the next barrier (the task
        waits for that barrier, then raises ``CancelledError``).
        """
        raw: list[ev.Event] = []
        job, sink = self._abegin(input, max_supersteps, metadata)
        end = None
        async for item in self._adrain(job, sink):
            if isinstance(item, End):
                end = item
            else:
                raw.append(item)
        assert end is not None
        return self._finish(job, raw, end)

    async def astream(
        self,
        input: Any = NO_INPUT,
        *,
        max_supersteps: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[ev.Event]:
        """Async :meth:`stream`: never blocks the event loop."""
        job, sink = self._abegin(input, max_supersteps, metadata)
        async for item in self._adrain(job, sink):
            if isinstance(item, End):
                item.raise_error()
            else:
                yield materialize(item)

    def _abegin(
        self, value: Any, max_supersteps: int | None, metadata: Mapping[str, Any] | None
    ) -> tuple[RunJob, AsyncSink]:
        sink = AsyncSink(asyncio.get_running_loop())
        job = self._begin(value, max_supersteps, metadata, sink)
        self._submit(job)
        return job, sink

    async def _adrain(self, job: RunJob, sink: AsyncSink) -> AsyncIterator[Any]:
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
                # Cancelled or abandoned: stop at the next barrier, and wait for it
                # without blocking the loop, so the session is free afterwards.
                job.cancel.set()
                while not isinstance(await sink.queue.get(), End):
                    pass
