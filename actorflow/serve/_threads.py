"""The threads a service knows: one open session each while in use, and their runs.

A thread is a session id. :class:`Threads` opens a thread's :class:`Session` the first
time a request needs it (``if_exists="resume"``: it continues the thread's latest
checkpoint, from this process or any before it) and keeps it open, holding the
session's lease, until the service closes or more than ``max_open`` sessions are
open (then the least recently used idle ones are closed). A thread runs one run at
a time: a second is refused (:class:`SessionBusy`, HTTP 409). Blocking calls
(opening, closing, reading the store) run in worker threads, never on the loop.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actorflow.errors import InvalidRequest, RunNotFound, SessionBusy, SessionExists, ThreadNotFound
from actorflow.runtime import NO_INPUT, Session, Workflow, delete_session
from actorflow.storage import CheckpointStore

from . import _params as params
from ._inputs import Inputs
from ._runs import Run

__all__ = ["Thread", "Threads"]

KEPT_RUNS = 100
"""Finished runs remembered per thread (their records; their history stays in the store)."""


@dataclass
class Thread:
    """What the service holds of one thread (event loop only)."""

    thread_id: str
    created_at: float = field(default_factory=time.time)
    metadata: dict[str, Any] = field(default_factory=dict)
    session: Session | None = None
    runs: OrderedDict[str, Run] = field(default_factory=OrderedDict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used: float = field(default_factory=time.monotonic)
    deleted: bool = False
    """Being deleted, or deleted: no request opens its session again."""

    @property
    def active(self) -> Run | None:
        """The run going on, if any."""
        for run in reversed(self.runs.values()):
            if run.running:
                return run
        return None

    def run(self, run_id: str) -> Run:
        """The run ``run_id`` of this thread.

        Raises:
            RunNotFound: this service started no such run on the thread.
        """
        try:
            return self.runs[run_id]
        except KeyError:
            raise RunNotFound(
                f"no run {run_id!r} on thread {self.thread_id!r}: runs are known to the service "
                "that started them; list them with GET /threads/{id}/runs, or read the thread's "
                "history"
            ) from None


class Threads:
    """The service's threads over one workflow and one store.

    Args:
        workflow: what every thread runs.
        store: where threads' checkpoints (and so their history and state) live.
        max_open: sessions kept open at most; beyond it idle ones are closed.
    """

    def __init__(self, workflow: Workflow, store: CheckpointStore, *, max_open: int = 256) -> None:
        self._workflow = workflow
        self._store = store
        self._inputs = Inputs(workflow)
        self._max_open = max_open
        self._threads: dict[str, Thread] = {}
        self._closed = False

    @property
    def inputs(self) -> Inputs:
        """How JSON becomes the workflow's inputs and answers."""
        return self._inputs

    def known(self) -> dict[str, Thread]:
        """The threads this service has used or created, by id."""
        return dict(self._threads)

    async def create(
        self, thread_id: str | None, metadata: Mapping[str, Any], if_exists: str = "raise"
    ) -> Thread:
        """A new thread (a fresh id when none is given).

        Raises:
            SessionExists: ``thread_id`` exists and ``if_exists`` is not ``do_nothing``.
        """
        tid = str(uuid.uuid4()) if thread_id is None else params.thread_id(thread_id)
        existing = self._threads.get(tid)
        if (
            existing is None
            and thread_id is not None
            and await asyncio.to_thread(self._store.latest, session=tid) is not None
        ):
            existing = self._threads.setdefault(tid, Thread(tid))
        if existing is not None:
            if if_exists == "do_nothing":
                return existing
            raise SessionExists(
                f"thread {tid!r} exists; use it, or create it with if_exists='do_nothing' to "
                "get the existing one"
            )
        return self._threads.setdefault(tid, Thread(tid, metadata=dict(metadata)))

    async def get(self, thread_id: str, *, create: bool = False) -> Thread:
        """The thread ``thread_id``: one this service knows, or one with checkpoints.

        Raises:
            ThreadNotFound: neither (and not ``create``).
        """
        thread = self._threads.get(params.thread_id(thread_id, "the thread id"))
        if thread is not None:
            return thread
        if create or await asyncio.to_thread(self._store.latest, session=thread_id) is not None:
            return self._threads.setdefault(thread_id, Thread(thread_id))
        raise ThreadNotFound(
            f"no thread {thread_id!r}: this service did not create it and the store has no "
            "checkpoint of it; create it with POST /threads, or run with if_not_exists='create'"
        )

    async def session(self, thread: Thread) -> Session:
        """The thread's open session, opened (resuming its latest checkpoint) if need be.

        Raises:
            SessionOwned: another process holds the thread's session.
            SessionClosed: the service is closing.
            ThreadNotFound: the thread was deleted meanwhile.
        """
        thread.used = time.monotonic()
        if thread.deleted:
            raise ThreadNotFound(f"thread {thread.thread_id!r} was deleted")
        if thread.session is None:
            if self._closed:
                raise SessionBusy("the service is stopping; try again on its next start")
            # A request cancelled (its client gone) mid-open leaves no session open.
            thread.session = await self._workflow.asession(
                thread.thread_id, store=self._store, if_exists="resume"
            )
            await self._trim()
        return thread.session

    async def start(
        self,
        thread: Thread,
        *,
        input: Any = NO_INPUT,
        resume: Any = None,
        has_resume: bool = False,
        metadata: Mapping[str, Any] | None = None,
        stream_mode: Sequence[str] = ("values",),
    ) -> Run:
        """Start a run on ``thread`` in the background; returns once it started.

        ``input`` is JSON for the start executor (``NO_INPUT``: none); ``resume``
        (with ``has_resume``) answers pending requests (see :meth:`Inputs.answers`).

        Raises:
            SessionBusy: the thread is running a run.
            InvalidRequest: the input or an answer does not fit.
            RequestError: nothing is pending to answer (or it was answered already).
            InputNotAccepted: the start executor does not take the input's type.
        """
        async with thread.lock:
            active = thread.active
            if active is not None:
                raise SessionBusy(
                    f"thread {thread.thread_id!r} is busy with run {active.run_id}; wait for it "
                    f"(GET /threads/{thread.thread_id}/runs/{active.run_id}/join), or cancel it "
                    "(POST .../cancel)"
                )
            session = await self.session(thread)
            value = self._inputs.input(input) if input is not NO_INPUT else NO_INPUT
            answers: dict[str, Any] = {}
            if has_resume:
                if value is not NO_INPUT:
                    raise InvalidRequest(
                        "give either input or command.resume, not both: an answer runs the "
                        "thread on from where it waits"
                    )
                answers = self._inputs.answers(resume, session.pending_requests)
            run = Run(thread.thread_id, self._workflow.name, metadata or {}, stream_mode)
            run.task = asyncio.create_task(run.drive(session, value, answers))
            try:
                await asyncio.shield(run.started)
            except asyncio.CancelledError:
                if run.started.cancelled():
                    raise SessionBusy("the service stopped the run before it started") from None
                raise
            thread.runs[run.run_id] = run
            while len(thread.runs) > KEPT_RUNS:
                thread.runs.popitem(last=False)
            return run

    async def fork(self, thread: Thread, checkpoint_id: str | None, new_id: str | None) -> Thread:
        """A new thread that continues ``thread`` from ``checkpoint_id`` (its latest when
        None); ``thread`` is untouched.

        Raises:
            CheckpointNotFound: no such checkpoint.
            SessionExists: ``new_id`` already has checkpoints.
        """
        tid = str(uuid.uuid4()) if new_id is None else params.thread_id(new_id)
        if tid in self._threads:
            raise SessionExists(f"thread {tid!r} exists; fork into a new thread id")
        session = await asyncio.to_thread(
            self._workflow.resume,
            self._store,
            session=thread.thread_id,
            checkpoint_id=checkpoint_id,
            as_session=tid,
        )
        forked = Thread(tid, metadata={**thread.metadata, "forked_from": thread.thread_id})
        forked.session = session
        self._threads[tid] = forked
        await self._trim()
        return forked

    async def delete(self, thread_id: str) -> None:
        """Delete the thread: its session closes (which ends its streams) and every
        checkpoint of it, so its state and history, leaves the store
        (:func:`~actorflow.delete_session`). The id is then free for a new thread.

        Raises:
            ThreadNotFound: no such thread.
            SessionBusy: a run is going on; cancel it or wait for it first.
            SessionOwned: another process holds the thread's session.
        """
        thread = await self.get(thread_id)
        async with thread.lock:
            if thread.deleted:  # by a request that held the lock first
                raise ThreadNotFound(f"thread {thread_id!r} was deleted")
            active = thread.active
            if active is not None:
                raise SessionBusy(
                    f"thread {thread_id!r} is busy with run {active.run_id}; cancel it "
                    f"(POST /threads/{thread_id}/runs/{active.run_id}/cancel) or wait for it, "
                    "then delete the thread"
                )
            thread.deleted = True
            try:
                session, thread.session = thread.session, None
                if session is not None:
                    await session.aclose()
                await asyncio.to_thread(delete_session, self._store, thread_id)
            except BaseException:
                thread.deleted = False  # still there: usable again
                raise
            if self._threads.get(thread_id) is thread:
                del self._threads[thread_id]

    async def cancel(self, thread: Thread, run: Run) -> None:
        """Ask ``run`` to stop at its next barrier, and wait until it ended."""
        if run.running and thread.session is not None:
            thread.session.cancel()
            await run.done.wait()

    async def _trim(self) -> None:
        open_ = [t for t in self._threads.values() if t.session is not None]
        excess = len(open_) - self._max_open
        if excess <= 0:
            return
        idle = sorted(
            (t for t in open_ if t.active is None and not t.lock.locked()), key=lambda t: t.used
        )
        for thread in idle[:excess]:
            session, thread.session = thread.session, None
            if session is not None:
                await session.aclose()

    async def aclose(self) -> None:
        """Cancel every run going on and close every session (the service stops)."""
        self._closed = True
        tasks = [
            run.task
            for t in self._threads.values()
            for run in t.runs.values()
            if run.task is not None and run.running
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for thread in self._threads.values():
            session, thread.session = thread.session, None
            if session is not None:
                await session.aclose()
