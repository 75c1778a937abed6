"""The threads a service knows: their sessions while in use, and their runs.

A thread is a session id. :class:`Threads` opens a thread's :class:`Session` when a
request needs it (``if_exists="resume"``: it continues the thread's latest
checkpoint, from this process or any other) and holds it, with the session's lease,
only while something uses it: a run until it ends, the stream of that run until its
client leaves, a read of its live history. The last user closes it, giving the
lease back; a thread's stream holds nothing (:meth:`Threads.follow`). So several
workers of a service on one store each serve any thread: a thread is busy on another
worker (:class:`SessionOwned`, HTTP 409) only while a run goes on there. A thread runs one run at a time: a second is refused
(:class:`SessionBusy`, HTTP 409). Blocking calls (opening, closing, reading the
store) run in worker threads, never on the loop.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from actorflow.errors import InvalidRequest, RunNotFound, SessionBusy, SessionExists, ThreadNotFound
from actorflow.runtime import (
    NO_INPUT,
    Event,
    RunCancelledEvent,
    RunCompletedEvent,
    RunFailedEvent,
    Session,
    Workflow,
    delete_session,
    event_of,
    read_entries,
)
from actorflow.storage import CancelRequests, Checkpoint, CheckpointStore

from . import _params as params
from ._inputs import Inputs
from ._runs import Run

__all__ = ["Thread", "Threads"]

HANDOFF_WAIT = 2.0
"""Seconds a worker waits for a thread's lease that another worker holds: one that is
letting go of it (its run just ended, its stream's client just left) hands it over;
one still using it makes the request fail with ``SessionOwned`` (HTTP 409)."""

KEPT_THREADS = 10_000
"""Thread records kept beyond those in use: the least recently used idle ones of
threads the store holds are forgotten (their state and history stay in the store; the
records of their runs go), so a service that runs for days keeps a bounded memory."""

STORED_POLL = 0.1
"""Seconds between reads of the store while a client waits for a run that another
worker runs (no worker tells another when a run ends)."""

KEPT_RUNS = 100
"""Finished runs remembered per thread (their records; their history stays in the store)."""

THREAD_KEY = "actorflow.thread"
"""The key, in the metadata of every checkpoint the service writes, of what it keeps of
the thread (:class:`StoredThread`; a run's own metadata beside it), so every worker
reads a thread from its latest checkpoint."""


@dataclass(frozen=True)
class StoredThread:
    """What the service keeps of a thread in its checkpoints."""

    metadata: dict[str, Any]
    """The thread's metadata (``POST /threads``, ``PATCH``)."""
    created_at: float
    """When the thread was made."""

    @classmethod
    def of(cls, latest: Checkpoint | None) -> StoredThread | None:
        """What the thread's latest checkpoint ``latest`` keeps of it; None without one,
        or for a session the service did not write."""
        if latest is None:
            return None
        kept = latest.metadata.get(THREAD_KEY)
        if not isinstance(kept, dict):
            return None
        metadata, created_at = kept.get("metadata"), kept.get("created_at")
        return cls(
            dict(metadata) if isinstance(metadata, dict) else {},
            float(created_at) if isinstance(created_at, int | float) else latest.created_at,
        )

    def stored_with(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """The metadata of a checkpoint that keeps this, beside ``metadata`` (a run's)."""
        kept: dict[str, Any] = {"metadata": self.metadata, "created_at": self.created_at}
        return {**metadata, THREAD_KEY: kept}


@dataclass
class Thread:
    """What the service holds of one thread (event loop only)."""

    thread_id: str
    created_at: float = field(default_factory=time.time)
    session: Session | None = None
    """Open while :attr:`users` is not 0 (see :meth:`Threads.hold`)."""
    users: int = 0
    """Runs, streams and reads holding the session."""
    runs: OrderedDict[str, Run] = field(default_factory=OrderedDict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Taken to start a run or delete the thread: one of them at a time."""
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Taken to open or close the session: a close gives the lease back before the
    next open asks for it."""
    stored: bool = False
    """Whether the store has had checkpoints of it: once they are gone, another worker
    of the service deleted it."""
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
            RunNotFound: this worker started no such run on the thread.
        """
        try:
            return self.runs[run_id]
        except KeyError:
            raise RunNotFound(
                f"no run {run_id!r} on thread {self.thread_id!r}: this worker did not start "
                "it and the thread's stored history has no such run; list the runs with GET "
                "/threads/{id}/runs, or read the thread's events (GET /threads/{id}/events)"
            ) from None


class Threads:
    """The service's threads over one workflow and one store.

    Args:
        workflow: what every thread runs.
        store: where threads' checkpoints (and so their history and state) live.
    """

    def __init__(self, workflow: Workflow, store: CheckpointStore) -> None:
        self._workflow = workflow
        self._store = store
        self._inputs = Inputs(workflow)
        self._threads: OrderedDict[str, Thread] = OrderedDict()
        """By id, the least recently used first."""
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

        The thread is stored at once (a checkpoint of the workflow's initial state,
        carrying ``metadata``), so every worker of the service finds it.

        Raises:
            SessionExists: ``thread_id`` exists and ``if_exists`` is not ``do_nothing``.
            SessionOwned: another worker is making it, and still is after
                :data:`HANDOFF_WAIT` s.
        """
        tid = str(uuid.uuid4()) if thread_id is None else params.thread_id(thread_id)
        existing = await self._existing(tid) if thread_id is not None else None
        if existing is None:
            try:
                session = await self._workflow.asession(tid, store=self._store, wait=HANDOFF_WAIT)
                await self._save(session, StoredThread(dict(metadata), time.time()))
                return self._remember(Thread(tid, stored=True))
            except SessionExists:  # made meanwhile, by another worker
                existing = self._remember(Thread(tid, stored=True))
        if if_exists == "do_nothing":
            return existing
        raise SessionExists(
            f"thread {tid!r} exists; use it, or create it with if_exists='do_nothing' to "
            "get the existing one"
        )

    @staticmethod
    async def _save(session: Session, made: StoredThread) -> None:
        """Store a new thread's ``session`` keeping ``made``, and close it, giving its
        lease back."""
        try:
            await session.asave(metadata=made.stored_with({}))
        finally:
            await session.aclose()

    async def _stored(self, thread: Thread) -> StoredThread:
        """What the thread's latest checkpoint keeps of it (made now for a thread whose
        checkpoints keep nothing: made by a run, or outside the service)."""
        latest = await asyncio.to_thread(self._store.latest, session=thread.thread_id)
        return StoredThread.of(latest) or StoredThread({}, thread.created_at)

    async def update(self, thread: Thread, metadata: Mapping[str, Any]) -> None:
        """Merge ``metadata`` into the thread's, stored with a new checkpoint of its
        idle state.

        Raises:
            SessionBusy: a run is going on, or the last one failed or its process died
                with messages in flight.
            SessionOwned: another worker runs the thread.
        """
        async with thread.lock:
            active = thread.active
            if active is not None:
                raise SessionBusy(
                    f"thread {thread.thread_id!r} is busy with run {active.run_id}; wait for "
                    "it, then update the thread's metadata"
                )
            session = await self.hold(thread)
            try:
                kept = await self._stored(thread)
                merged = replace(kept, metadata={**kept.metadata, **metadata})
                try:
                    await session.asave(metadata=merged.stored_with({}))
                except SessionBusy:
                    raise SessionBusy(
                        f"thread {thread.thread_id!r} cannot take new metadata now: its last "
                        "run failed, or its process died, with messages in flight; run it "
                        "on (a run without input) or fork it, then update the metadata"
                    ) from None
                thread.stored = True
            finally:
                await self.let_go(thread)

    async def get(self, thread_id: str, *, create: bool = False) -> Thread:
        """The thread ``thread_id``: one this service knows, or one with checkpoints.

        Raises:
            ThreadNotFound: neither (and not ``create``).
        """
        thread = self._threads.get(params.thread_id(thread_id, "the thread id"))
        if thread is not None and (not thread.stored or thread.session is not None):
            return self._remember(thread)  # only this service has it, or it is in use here
        stored = await asyncio.to_thread(self._store.latest, session=thread_id) is not None
        if thread is not None and not stored and thread.session is None:
            # Stored once, gone now: another worker deleted it.
            if self._threads.get(thread_id) is thread:
                del self._threads[thread_id]
            thread = None
        if thread is not None:
            return self._remember(thread)
        if create or stored:
            return self._remember(Thread(thread_id, stored=stored))
        raise ThreadNotFound(
            f"no thread {thread_id!r}: this service did not create it and the store has no "
            "checkpoint of it; create it with POST /threads, or run with if_not_exists='create'"
        )

    async def _existing(self, thread_id: str) -> Thread | None:
        """The thread ``thread_id`` if it exists, else None: as :meth:`get` finds it, so
        a record of a stored thread is checked against the store (another worker may
        have deleted it)."""
        try:
            return await self.get(thread_id)
        except ThreadNotFound:
            return None

    async def hold(self, thread: Thread) -> Session:
        """The thread's session, opened (resuming its latest checkpoint) if need be and
        held until the caller calls :meth:`let_go` once.

        Raises:
            SessionOwned: another process holds the thread's session.
            SessionClosed: the service is closing.
            ThreadNotFound: the thread was deleted meanwhile.
        """
        async with thread.opening:
            if thread.deleted:
                raise ThreadNotFound(f"thread {thread.thread_id!r} was deleted")
            if thread.session is None:
                if self._closed:
                    raise SessionBusy("the service is stopping; try again on its next start")
                # A request cancelled (its client gone) mid-open leaves no session open.
                thread.session = await self._workflow.asession(
                    thread.thread_id, store=self._store, if_exists="resume", wait=HANDOFF_WAIT
                )
            thread.users += 1
            return thread.session

    async def let_go(self, thread: Thread) -> None:
        """End one :meth:`hold`: the last user closes the session, giving its lease back."""
        async with thread.opening:
            thread.users -= 1
            if thread.users == 0 and thread.session is not None:
                session, thread.session = thread.session, None
                await session.aclose()

    async def history(self, thread: Thread, since: int) -> list[Event]:
        """The thread's history events numbered ``since`` or more: its session's (the
        live run's events too) while this worker holds it, else the stored ones, read
        without taking its lease (another worker may be running it)."""
        if thread.session is None:
            tid = thread.thread_id
            entries = await asyncio.to_thread(read_entries, self._store, tid, since)
            return [event_of(entry) for entry in entries]
        session = await self.hold(thread)  # open already: counts one more user
        try:
            return await asyncio.to_thread(session.history, since)
        finally:
            await self.let_go(thread)

    async def start(
        self,
        thread: Thread,
        *,
        input: Any = NO_INPUT,
        resume: Any = None,
        has_resume: bool = False,
        metadata: Mapping[str, Any] | None = None,
        stream_mode: Sequence[str] = ("values",),
        streamed: bool = False,
    ) -> Run:
        """Start a run on ``thread`` in the background; returns once it started.

        ``input`` is JSON for the start executor (``NO_INPUT``: none); ``resume``
        (with ``has_resume``) answers pending requests (see :meth:`Inputs.answers`).
        ``streamed``: the caller holds the session too, to stream the run (taken
        before the run may end; the caller calls :meth:`let_go`).

        Raises:
            SessionBusy: the thread is running a run.
            InvalidRequest: the input or an answer does not fit.
            RequestError: nothing is pending to answer (or it was answered already).
            InputNotAccepted: the start executor does not take the input's type.
        """
        async with thread.lock:
            active = thread.active
            if active is not None and active.end_seq is not None:
                # It ended (its stream told its client so) and only lets go of the
                # session now: a close, bounded; the next run goes on after it.
                await active.done.wait()
                active = thread.active
            if active is not None:
                raise SessionBusy(
                    f"thread {thread.thread_id!r} is busy with run {active.run_id}; wait for it "
                    f"(GET /threads/{thread.thread_id}/runs/{active.run_id}/join), or cancel it "
                    "(POST .../cancel)"
                )
            session = await self.hold(thread)
            try:
                value = self._inputs.input(input) if input is not NO_INPUT else NO_INPUT
                answers: dict[str, Any] = {}
                if has_resume:
                    if value is not NO_INPUT:
                        raise InvalidRequest(
                            "give either input or command.resume, not both: an answer runs "
                            "the thread on from where it waits"
                        )
                    answers = self._inputs.answers(resume, session.pending_requests)
                # The run's checkpoints keep the thread on: the session is held, so no
                # other worker changes it meanwhile.
                kept = await self._stored(thread)
            except BaseException:
                await self.let_go(thread)
                raise
            if streamed:
                await self.hold(thread)  # open and held: only counts one more user
            run = Run(thread.thread_id, self._workflow.name, metadata or {}, stream_mode)
            stored = kept.stored_with(run.metadata)
            # The run holds the session until it ended; it lets go before it says so,
            # so a client told the run ended finds the thread free on any worker.
            run.task = asyncio.create_task(
                run.drive(session, value, answers, stored, partial(self.let_go, thread))
            )
            try:
                await asyncio.shield(run.started)
            except BaseException as exc:
                if streamed:
                    await self.let_go(thread)
                if isinstance(exc, asyncio.CancelledError) and run.started.cancelled():
                    raise SessionBusy("the service stopped the run before it started") from None
                raise
            thread.stored = True  # by the run's first checkpoint, written as it started
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
        # Its own id first: the thread may read as gone by the next look (deleted on
        # another worker meanwhile), and the fork of a session into itself is no fork.
        if tid == thread.thread_id or (
            new_id is not None and await self._existing(tid) is not None
        ):
            raise SessionExists(f"thread {tid!r} exists; fork into a new thread id")
        source = await self._stored(thread)
        made = StoredThread({**source.metadata, "forked_from": thread.thread_id}, time.time())
        session = await asyncio.to_thread(
            self._workflow.resume,
            self._store,
            session=thread.thread_id,
            checkpoint_id=checkpoint_id,
            as_session=tid,
        )
        await self._save(session, made)  # stored now: any worker runs it
        return self._remember(Thread(tid, stored=True))

    async def delete(self, thread_id: str) -> None:
        """Delete the thread: its session closes (which ends its runs' streams; its own
        streams end as they see it deleted) and every
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
                async with thread.opening:  # its runs' streams' session: they end
                    session, thread.session = thread.session, None
                    if session is not None:
                        await session.aclose()
                await asyncio.to_thread(delete_session, self._store, thread_id)
            except BaseException:
                thread.deleted = False  # still there: usable again
                raise
            if self._threads.get(thread_id) is thread:
                del self._threads[thread_id]

    async def run(self, thread: Thread, run_id: str) -> Run:
        """The run ``run_id`` of ``thread``: this worker's record of it, or one read from
        the thread's stored history (a run another worker started).

        Raises:
            RunNotFound: neither knows it.
        """
        try:
            return thread.run(run_id)
        except RunNotFound:
            # A run just started elsewhere stores its first event a moment later: while
            # some worker holds the thread, it is looked for a little longer.
            deadline = time.monotonic() + HANDOFF_WAIT
            while True:
                history = await self.history(thread, 0)
                found = Run.stored(thread.thread_id, self._workflow.name, run_id, history)
                if found is not None:
                    await self._catch_up(thread, found)
                    return found
                if not await self._held(thread) or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(STORED_POLL)

    async def join(self, thread: Thread, run: Run) -> None:
        """Wait until ``run`` ended. One another worker runs is followed through the
        store, every :data:`STORED_POLL` s; when nobody holds the thread any more and
        its end is still not stored, its worker stopped (:meth:`Run.note_lost`)."""
        if not run.elsewhere:
            await run.done.wait()
            return
        while not await self._catch_up(thread, run):
            await asyncio.sleep(STORED_POLL)

    async def follow(self, thread: Thread, since: int) -> AsyncGenerator[Event, None]:
        """The thread's history events from ``since`` on, then each new one, read every
        :data:`STORED_POLL` s (the live events of a run this worker runs, the stored
        ones of a run another worker runs), holding nothing: any worker runs the thread
        meanwhile. Ends when the thread is deleted or the service stops.

        Each read starts at the last event seen, which must still be there: if it is
        not, the thread was deleted by another worker, and maybe made anew, since the
        last read (its history starts over: going on from here would skip its first
        events), so the stream ends as for a deletion."""
        last: Event | None = None
        while not (self._closed or thread.deleted):
            if last is None:
                events = await self.history(thread, since)
            else:
                events = await self.history(thread, since - 1)
                if not events or not _same(events[0], last):
                    return
                del events[0]
            for event in events:
                yield event
                last = event
                since = (event.seq if event.seq is not None else since) + 1
            if thread.stored and thread.session is None and not await self._exists(thread):
                return  # deleted by another worker
            await asyncio.sleep(STORED_POLL)

    async def _exists(self, thread: Thread) -> bool:
        """Whether the store holds checkpoints of the thread."""
        latest = await asyncio.to_thread(self._store.latest, session=thread.thread_id)
        return latest is not None

    async def follow_stored(self, thread: Thread, run: Run) -> AsyncGenerator[Event, None]:
        """``run``'s events from its first on, read from the store as they are stored
        (every :data:`STORED_POLL` s): a run another worker runs. Ends with its end, or
        when nobody holds the thread any more and nothing more is stored (its worker
        stopped, or the thread was deleted): then nothing more will come."""
        since = run.first_seq
        assert since is not None, "a stored run's record starts at its first event"
        while True:
            held = await self._held(thread)
            for event in await self.history(thread, since):
                if event.run_id != run.run_id:
                    return  # another run's: the thread was deleted and made anew meanwhile
                yield event
                if isinstance(event, (RunCompletedEvent, RunFailedEvent, RunCancelledEvent)):
                    return
                since = (event.seq if event.seq is not None else since) + 1
            if not held:
                return
            await asyncio.sleep(STORED_POLL)

    async def _catch_up(self, thread: Thread, run: Run) -> bool:
        """Take what the store holds of ``run`` (another worker's) since last time;
        returns whether it ended. Its worker stores the run's end before it lets go of
        the thread, so a thread nobody held *before* this read of its history, with no
        end stored, lost its run (:meth:`Run.note_lost`).

        Raises:
            RunNotFound: the thread was deleted meanwhile (its history went too).
        """
        held = await self._held(thread)
        run.note_stored(await self.history(thread, run.stored_from))
        if not run.done.is_set() and not held:
            assert run.first_seq is not None, "a stored run's record starts at its first event"
            first = await self.history(thread, run.first_seq)
            if not first or first[0].run_id != run.run_id:
                # Its history went: the thread was deleted (and maybe made anew) meanwhile.
                raise RunNotFound(
                    f"run {run.run_id} of thread {thread.thread_id!r} is no longer stored: the "
                    "thread was deleted meanwhile"
                )
            run.note_lost()
        return run.done.is_set()

    async def _held(self, thread: Thread) -> bool:
        """Whether some worker (this one too) holds the thread's lease now."""
        lease = await asyncio.to_thread(self._store.current_lease, thread.thread_id)
        return lease is not None

    async def cancel(self, thread: Thread, run: Run, *, wait: bool = True) -> None:
        """Ask ``run`` to stop at its next barrier; with ``wait``, wait until it ended.

        A run another worker runs is asked through the store (``request_cancel``):
        that worker's session looks at its lease for such requests while it runs.

        Raises:
            SessionBusy: another worker runs it, and the store carries no cancel
                requests (only that worker can stop it then).
        """
        if run.elsewhere and run.running:
            store = self._store
            if not isinstance(store, CancelRequests):
                raise SessionBusy(
                    f"run {run.run_id} goes on on another worker of this service, which alone "
                    f"can stop it: the store ({type(store).__name__}) carries no cancel "
                    "requests; send the cancel to the worker that started it"
                )
            # False: nobody holds the thread, so the run ended (joining finds how).
            await asyncio.to_thread(store.request_cancel, thread.thread_id, run.run_id)
            if wait:
                await self.join(thread, run)
            return
        if run.running and thread.session is not None:
            thread.session.cancel()
            if wait:
                await run.done.wait()

    def _remember(self, thread: Thread) -> Thread:
        """The record kept for ``thread``'s id (``thread``, unless one is kept already),
        now the most recently used; beyond :data:`KEPT_THREADS`, the least recently
        used idle records of stored threads are forgotten."""
        kept = self._threads.setdefault(thread.thread_id, thread)
        self._threads.move_to_end(kept.thread_id)
        excess = len(self._threads) - KEPT_THREADS
        if excess > 0:
            gone: list[str] = []
            for tid, t in self._threads.items():  # the least recently used first
                if len(gone) == excess:
                    break
                if t is not kept and _forgettable(t):
                    gone.append(tid)
            for tid in gone:
                del self._threads[tid]
        return kept

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


def _same(found: Event, seen: Event) -> bool:
    """Whether ``found``, read from a thread's history, is the event ``seen`` before (a
    thread made anew numbers its events from 0 again, in runs of other ids)."""
    return (type(found), found.seq, found.run_id, found.time) == (
        type(seen),
        seen.seq,
        seen.run_id,
        seen.time,
    )


def _forgettable(thread: Thread) -> bool:
    """Whether nothing but its record would go with it: the store holds the thread,
    and no run, stream, read, start or delete uses it."""
    return (
        thread.stored
        and thread.users == 0
        and thread.active is None
        and not thread.lock.locked()
        and not thread.opening.locked()
    )
