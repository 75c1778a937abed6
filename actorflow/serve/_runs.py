"""One run the service started on a thread: driven in the background, read by anyone.

A :class:`Run` drives ``Session.astream`` to the run's end in its own task, so the
run goes on whether or not a client waits for it or streams it, and records what
readers need: where its history starts (the ``seq`` of its ``RunStartedEvent``),
where it ends, its outputs, its status and its failure. Streams of the run read the
session's history (``Session.afollow``), never this task's events, so every reader
gets every event once, from the store and then live.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from actorflow.actors import to_json
from actorflow.runtime import (
    Event,
    OutputEvent,
    RequestEvent,
    RunCancelledEvent,
    RunCompletedEvent,
    RunFailedEvent,
    RunStartedEvent,
    Session,
)

from ._shapes import interrupt_json, iso

__all__ = ["Run"]


class Run:
    """A run on a thread and what it has done so far (event loop only).

    Args:
        thread_id: the thread (session) it runs on.
        assistant_id: the workflow's name.
        metadata: the client's metadata, kept with the run's checkpoints.
        stream_mode: the stream modes asked for when it was created (a reconnecting
            stream that names none uses them).
    """

    def __init__(
        self,
        thread_id: str,
        assistant_id: str,
        metadata: Mapping[str, Any],
        stream_mode: Sequence[str],
    ) -> None:
        self.run_id = ""
        """The runtime's id of the run (its events' ``run_id``), known once it started."""
        self.thread_id = thread_id
        self.assistant_id = assistant_id
        self.metadata = dict(metadata)
        self.stream_mode = tuple(stream_mode)
        self.created_at = self.updated_at = time.time()
        self.status = "pending"
        """``pending``, ``running``, ``success`` (idle, maybe waiting on requests),
        ``error`` or ``interrupted`` (cancelled)."""
        self.first_seq: int | None = None
        """``seq`` of its ``RunStartedEvent`` (its first history event)."""
        self.end_seq: int | None = None
        """``seq`` of the event that ended it."""
        self.outputs: list[Any] = []
        """Its outputs so far, as JSON."""
        self.interrupts: list[dict[str, Any]] = []
        """The requests pending when it ended, as interrupts."""
        self.error: dict[str, Any] | None = None
        """``{"error": type, "message": text}`` when it failed."""
        self.started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Done once the run started, or with the error that kept it from starting."""
        self.done = asyncio.Event()
        """Set once the run ended (or never started)."""
        self.task: asyncio.Task[None] | None = None
        self.elsewhere = False
        """Whether another worker started it (this record was read from the store)."""
        self._stored_seq = -1
        """The last stored event :meth:`note_stored` took."""

    @classmethod
    def stored(
        cls, thread_id: str, assistant_id: str, run_id: str, history: Sequence[Event]
    ) -> Run | None:
        """The record of run ``run_id`` as the thread's stored ``history`` tells it (a run
        another worker started), or None when the history has no such run. Its
        :attr:`done` is set if its end is stored; :meth:`note_stored` adds what comes
        after. Its metadata and stream modes are not in the history: empty, ``values``."""
        starts = (i for i, e in enumerate(history) if isinstance(e, RunStartedEvent))
        start = next((i for i in starts if history[i].run_id == run_id), None)
        if start is None:
            return None
        run = cls(thread_id, assistant_id, {}, ("values",))
        run.elsewhere = True
        run.created_at = history[start].time
        run.note_stored(history[start:])
        return run

    def note_stored(self, history: Sequence[Event]) -> None:
        """Take ``history``, stored events from this run's start on (those taken already
        are skipped); at its end, the requests it asked become its interrupts, and
        :attr:`done` is set."""
        for event in history:
            if self.done.is_set():
                return
            if event.seq is None or event.seq <= self._stored_seq:
                continue
            self._stored_seq = event.seq
            self._note(event)
            if isinstance(event, RequestEvent):
                self.interrupts.append(
                    interrupt_json(
                        event.request_id, event.executor, event.value, event.response_type
                    )
                )
            if self.end_seq is not None:
                self.done.set()

    @property
    def stored_from(self) -> int:
        """The ``seq`` of the first stored event :meth:`note_stored` has not taken."""
        return self._stored_seq + 1

    def note_lost(self) -> None:
        """Nobody holds the thread and the run's end is not stored: its worker stopped,
        or could not store its end (its store failed); it is recorded as failed."""
        self.status = "error"
        self.error = {
            "error": "RunLost",
            "message": f"run {self.run_id} ended without storing its end: the worker running "
            "it stopped, or its store failed; read the thread's state, and run the thread "
            "again to go on from its last checkpoint",
        }
        self.done.set()

    @property
    def running(self) -> bool:
        """Whether it has not ended yet."""
        return not self.done.is_set()

    async def drive(
        self,
        session: Session,
        value: Any,
        answers: Mapping[str, Any],
        stored: Mapping[str, Any],
        let_go: Callable[[], Awaitable[None]],
    ) -> None:
        """Queue ``answers``, run ``value`` (``NO_INPUT``: continue, or handle the answers)
        on ``session`` to its end, recording it, its checkpoints carrying ``stored`` as
        their metadata; then ``let_go`` of the session, before :attr:`done` is set. Its
        own task; cancelling the task cancels the run."""
        try:
            if answers:
                await asyncio.to_thread(session.queue_answers, answers)
            async with aclosing(session.astream(value, metadata=stored)) as events:
                async for event in events:
                    self._note(event)
            if self.status in ("success", "interrupted", "error"):
                self.interrupts = [
                    interrupt_json(p.request_id, p.executor, p.value, p.response_type)
                    for p in session.pending_requests
                ]
        except Exception as exc:  # noqa: BLE001 - any failure is the run's, recorded for its readers
            if not self.started.done():
                self.started.set_exception(exc)
            if self.error is None:
                self.status = "error"
                self.error = {"error": type(exc).__name__, "message": str(exc)}
        finally:
            try:
                await let_go()
            finally:
                if not self.started.done():
                    self.started.cancel()  # cancelled before it started (the service stops)
                self.updated_at = time.time()
                self.done.set()

    def _note(self, event: Any) -> None:
        if event.seq is None:
            return
        self.updated_at = event.time
        if isinstance(event, RunStartedEvent):
            self.run_id = event.run_id
            self.first_seq = event.seq
            self.status = "running"
            if not self.started.done():
                self.started.set_result(None)
        elif isinstance(event, OutputEvent):
            self.outputs.append(to_json(event.value))
        elif isinstance(event, RunCompletedEvent):
            self.end_seq, self.status = event.seq, "success"
        elif isinstance(event, RunFailedEvent):
            self.end_seq, self.status = event.seq, "error"
            self.error = {"error": event.error_type, "message": event.error}
        elif isinstance(event, RunCancelledEvent):
            self.end_seq, self.status = event.seq, "interrupted"

    def result(self) -> dict[str, Any]:
        """What ``runs.wait`` answers: ``{"outputs": [...]}``, plus ``"__interrupt__"``
        (the pending requests) when it went idle waiting on some, ``"__error__"``
        when it failed, or ``"__cancelled__"`` when it was cancelled."""
        out: dict[str, Any] = {"outputs": list(self.outputs)}
        if self.interrupts:
            out["__interrupt__"] = list(self.interrupts)
        if self.error is not None:
            out["__error__"] = dict(self.error)
        if self.status == "interrupted":  # cancelled (a request pending is "success")
            out["__cancelled__"] = {
                "message": "the run was cancelled and stopped at a barrier; run the thread "
                "again (with no input) to go on from there"
            }
        return out

    def json(self) -> dict[str, Any]:
        """The run in the LangGraph ``Run`` shape."""
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "status": self.status,
            "metadata": self.metadata,
            "multitask_strategy": "reject",
            "kwargs": {"stream_mode": list(self.stream_mode)},
        }
