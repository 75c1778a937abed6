"""How a session's runs go: checked and packed, handed to the supervisor actor, finished.

:class:`RunJobs` is the session's collaborator for the life of each run job (the
input checked against the start executor and encoded, the session's turn taken,
the job run on the supervisor actor's thread, the caller that stops waiting
cancelling it, the collected events made a result), and it owns what those runs
share: the driver and its hosts, the supervisor actor, the cancel event. The
blocking and async entry points (``run``/``stream``, ``arun``/``astream``) share
these steps.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pykka

import actorflow.runtime._events as ev
from actorflow.actors import encode
from actorflow.errors import EncodeError, InputNotAccepted, SessionBroken, SessionBusy
from actorflow.runtime._context import RUN_INPUT
from actorflow.runtime._wire import SINGLE
from actorflow.runtime.checkpoints import Restored, at_rest
from actorflow.runtime.graph import type_label
from actorflow.runtime.supervisor import Driver, Payload, RunJob, SupervisorActor, new_run_id
from actorflow.runtime.telemetry import capture_context
from actorflow.storage import EMPTY_METADATA, packed_metadata

from ._answers import Answers
from ._delivery import End, collected, pending_of
from ._engine import Engine
from ._ownership import Ownership
from ._turn import STOP_WAIT, Turn

__all__ = ["NO_INPUT", "RunJobs"]

NO_INPUT: Any = object()
"""Run without new input: continue what is in flight (after a cancel or a limit)."""


class RunJobs:
    """A session's runs, and what they share: the driver, its hosts, the supervisor actor.

    Given the session's engine, turn and answers; the session hands it a new driver
    when it resets (:meth:`retire`, :meth:`install`) and renews it for a recycled
    one-off run (:meth:`recycle`).
    """

    def __init__(
        self,
        engine: Engine[Any],
        turn: Turn,
        answers: Answers,
        driver: Driver,
        restored: Restored | None,
        *,
        ownership: Ownership | None = None,
    ) -> None:
        self._engine = engine
        self._ownership = ownership
        """The session's hold on its lease: the runs watch it for cancel requests."""
        self._turn = turn
        self._answers = answers
        self._driver = driver
        self._restored = restored
        """What the session was resumed from: the snapshots the hosts start with."""
        self._started = False
        """Whether the driver's hosts are borrowed (by the first run, on its thread)."""
        self._supervisor: pykka.ActorRef[SupervisorActor] | None = None
        self._cancel = threading.Event()
        """The current (or next) run's cancel; a new one for each run after a cancel."""

    # --- what the session reads ---------------------------------------------------

    @property
    def driver(self) -> Driver:
        """The driver the runs go to (replaced by a reset)."""
        return self._driver

    @property
    def last_checkpoint_id(self) -> str | None:
        """Id of the newest checkpoint the runs wrote, or the one resumed from."""
        checkpointer = self._driver.checkpointer
        if checkpointer is not None:
            return checkpointer.last_id
        return self._restored.checkpoint.id if self._restored is not None else None

    @property
    def holds_actors(self) -> bool:
        """Whether a supervisor actor or hosts are held (closing then waits for them)."""
        return self._supervisor is not None or self._started

    @property
    def needs_supervisor(self) -> bool:
        """Whether the next run must first get a supervisor actor."""
        return self._supervisor is None

    def cancel(self) -> None:
        """Stop the current run at its next barrier (safe from any thread)."""
        self._cancel.set()

    # --- one run --------------------------------------------------------------------

    def begin(
        self,
        value: Any,
        max_supersteps: int | None,
        metadata: Mapping[str, Any] | None,
        emit: Callable[[Any], None],
        *,
        answers: Mapping[str, Any] | None = None,
        doing: str = "start a run",
    ) -> RunJob:
        """Check and pack a run, take the session's turn, queue ``answers``: the job.

        The turn is held from here until the job ends on the supervisor thread, so
        the caller must :meth:`submit` the job it gets.

        Raises:
            InputNotAccepted, EncodeError: the input (before the turn is taken).
            SessionBusy, SessionClosed, SessionBroken, RequestError: nothing started.
        """
        spec = self._engine.spec
        if max_supersteps is not None and (
            isinstance(max_supersteps, bool)
            or not isinstance(max_supersteps, int)
            or max_supersteps < 1
        ):
            raise ValueError(
                f"max_supersteps= must be a whole number >= 1, got {max_supersteps!r}; or leave "
                f"it out for the workflow's bound ({spec.max_supersteps})"
            )
        payload = None
        if value is not NO_INPUT:
            if not spec.accepts[spec.start].single(value):
                labels = ", ".join(spec.accepts[spec.start].labels) or "nothing"
                raise InputNotAccepted(
                    f"the start executor {spec.start!r} has no handler for the input type "
                    f"{_input_label(value)} (it handles {labels}); pass one of those, or "
                    "add a handler for this type"
                )
            try:
                payload = encode(value)
            except EncodeError as exc:
                raise EncodeError(
                    f"the run's input cannot be encoded: {exc}", type_name=exc.type_name
                ) from None  # the message holds the codec's: chaining it would print it twice
        # Packed now, so the caller's later changes to its dict (or to lists inside
        # it) never reach a checkpoint; EncodeError names a bad value before anything runs.
        packed = packed_metadata(metadata) if metadata else EMPTY_METADATA
        driver = self._driver
        self._turn.take(driver.session, doing)
        try:
            self._turn.check_open(driver.session)
            if driver.broken is not None:
                raise SessionBroken(
                    f"session {driver.session!r} cannot run: {driver.broken}; call reset(), "
                    "or resume from a checkpoint"
                )
            if answers is not None:
                self._answers.queue(driver.state, answers)
        except BaseException:
            self._turn.give()
            raise
        if self._cancel.is_set():  # a cancel meant for an earlier run must not stop this one
            self._cancel = threading.Event()
        return RunJob(
            run_id=new_run_id(),
            emit=emit,
            cancel=self._cancel,
            max_supersteps=spec.max_supersteps if max_supersteps is None else max_supersteps,
            metadata=packed,
            input=payload,
            trace=capture_context(),
        )

    def save(self, metadata: Mapping[str, Any] | None) -> str | None:
        """Store the session between runs (see ``Session.save``): the id of the cut
        written, None without a store.

        Raises:
            SessionBusy, SessionClosed, SessionBroken: nothing was stored.
            ExecutorFailed, CheckpointWriteFailed: the cut could not be written.
        """
        if self._driver.checkpointer is None:
            return None
        job = self.begin(NO_INPUT, None, metadata, _unheard, doing="save")
        end: End = self.submit(job, self._save).get()
        end.raise_error()
        return self.last_checkpoint_id

    def _save(self, job: RunJob) -> ev.RunStatus:
        """Supervisor thread: write the session's cut (see ``Session.save``)."""
        driver = self._driver
        checkpointer = driver.checkpointer
        assert checkpointer is not None
        if driver.state.inbox:
            latest = checkpointer.store.latest(session=driver.session)
            if latest is not None and not at_rest(latest):
                # Its last run failed, or its process died mid-run, with messages in
                # flight: a new cut would hide the one that says why, and the finished
                # parts of a superstep a crash interrupted hang off that one.
                raise SessionBusy(
                    f"session {driver.session!r} cannot be saved now: its last run stopped "
                    f"with messages in flight after superstep {driver.state.superstep} "
                    "(it failed, or its process died); run it on (session.run()) to idle "
                    "first, or fork it"
                )
        self._start_hosts()
        driver.save(job)
        return ev.RunStatus.COMPLETED

    def submit(
        self, job: RunJob, drive: Callable[[RunJob], ev.RunStatus] | None = None
    ) -> pykka.Future[Any]:
        """Hand the job to the supervisor actor, which runs it (or calls ``drive`` with
        it instead); its last event is an :class:`End`."""
        if self._supervisor is None:
            self._supervisor = self._engine.acquire_supervisor()
        drive = self._drive if drive is None else drive

        def work() -> End:
            end = End(ev.RunStatus.FAILED, None)
            try:
                end = End(drive(job), None)
            except Exception as exc:  # noqa: BLE001 - handed to the caller through End
                end = End(ev.RunStatus.FAILED, exc)
            finally:
                self._turn.end_run()
                job.emit(end)
            return end

        return self._supervisor.ask(work, block=False)

    def _drive(self, job: RunJob) -> ev.RunStatus:
        """Supervisor thread: start actors if needed, queue the input, run."""
        driver = self._driver
        spec = self._engine.spec
        self._start_hosts()
        # From here on the run's history events are numbered (and kept for its cuts).
        job.emit = emit = driver.history.emitter(job.emit)
        now = time.time()
        superstep = driver.state.superstep
        given = Payload(job.input) if job.input is not None else None
        emit(ev.RunStartedEvent(job.run_id, superstep, now, spec.name, driver.session, given))
        first: str | None = None
        if job.input is not None:
            driver.state.inbox.setdefault(spec.start, []).append([RUN_INPUT, SINGLE, job.input])
            first = "entry"
        else:
            answered = self._answers.take()
            for request_id, executor, payload in answered:
                emit(
                    ev.RequestAnsweredEvent(
                        job.run_id, superstep, now, request_id, executor, Payload(payload)
                    )
                )
            if answered:
                first = "response"
        ownership = self._ownership
        if ownership is not None:  # a cancel asked for through the store stops it too
            ownership.watch(job.run_id, job.cancel)
        try:
            status = driver.run(job, first_checkpoint=first)
        finally:
            if ownership is not None:
                ownership.unwatch()
        if driver.checkpointer is not None:
            driver.checkpointer.flush()
        return status

    def _start_hosts(self) -> None:
        """Supervisor thread: borrow the driver's hosts, unless a run did already."""
        if not self._started:
            restored = self._restored
            self._driver.start_hosts(restored.snapshots if restored is not None else None)
            self._started = True

    def abandon(self, future: pykka.Future[Any]) -> None:
        """The caller stopped waiting: cancel, and give the run :data:`STOP_WAIT` s to stop.

        The barrier abandons handlers still running :data:`CANCEL_GRACE` s after the
        cancel, so the run normally ends well within that; if it does not (stuck
        outside a handler), the session stays busy until it does.

        Not at interpreter exit: a stream left open is closed then, and its run may be
        stuck in a handler that never returns; waiting would hold up the exit.
        """
        self._cancel.set()
        if sys.is_finalizing():
            return
        try:
            future.get(timeout=STOP_WAIT)
        except Exception:  # noqa: BLE001 - the caller already left; nothing to report to
            pass

    def finish(self, job: RunJob, raw: list[Any], end: End) -> ev.RunResult:
        """The caller's result of a job that ended (its failure raised here)."""
        end.raise_error()
        if raw and type(raw[-1]) is End:
            raw.pop()  # the supervisor emits the End last
        events, outputs, supersteps = collected(raw)
        return ev.RunResult(
            run_id=job.run_id,
            status=end.status,
            outputs=outputs,
            events=events,
            supersteps=supersteps,
            pending_requests=pending_of(self._driver.state.pending),
            checkpoint_id=self.last_checkpoint_id,
        )

    def adopt(self, ref: pykka.ActorRef[SupervisorActor]) -> None:
        """Run on ``ref``, a supervisor actor got off the event loop: unless one is held
        already (another task of this session got one meanwhile) or the session closed,
        in which case ``ref`` goes back to the engine."""
        if self._supervisor is None and not self._turn.closed:
            self._supervisor = ref
        else:
            self._engine.release_supervisor(ref)

    # --- the driver's lifetime (the session holds the turn) -----------------------

    def retire(self, *, wait: bool = True) -> None:
        """Give the driver's hosts back and close its checkpointer (reset, close).

        With ``wait``, the programs are unloaded (their resources released) when this
        returns.
        """
        if self._started:
            self._driver.release_hosts(wait=wait)
            self._started = False
        if self._driver.checkpointer is not None:
            self._driver.checkpointer.close()

    def install(self, driver: Driver) -> None:
        """Run later jobs on ``driver``, built from the blueprints (after :meth:`retire`)."""
        self._driver = driver
        self._restored = None

    def close(self, *, wait: bool) -> None:
        """Retire the driver and give the supervisor actor back (the session closes)."""
        self.retire(wait=wait)
        if self._supervisor is not None:
            self._engine.release_supervisor(self._supervisor)
            self._supervisor = None

    def recyclable(self) -> bool:
        """Whether these hosts can serve an unrelated one-off run (see :meth:`recycle`)."""
        return self._started and self._driver.reusable

    def recycle(self, session: str) -> None:
        """Start over as ``session`` on the same hosts: nothing of the last run carries
        over (state in flight, restart counts, a cancel)."""
        self._driver.renew(session)
        if self._cancel.is_set():
            self._cancel = threading.Event()


def _input_label(value: Any) -> str:
    """The input's type for an error message; for a list, its items' types too."""
    if type(value) is not list or not value:
        return type_label(type(value))
    items = sorted({type_label(type(item)) for item in value})
    return f"list[{' | '.join(items)}]"


def _unheard(event: Any) -> None:
    """Where a save's events go: nowhere (it is not a run; its cut is its result)."""
