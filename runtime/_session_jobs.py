"""How a session's run goes: checked and packed, handed to the supervisor actor, finished.

A mixin of :class:`~._session.Session`, kept apart because it is one concern:
the life of one run job (the input checked against the start executor and
encoded, the session taken, the job run on the supervisor actor's thread, the
caller that stops waiting cancelling it, the collected events made a result).
The blocking and async entry points (``run``/``stream``, ``arun``/``astream``)
share these steps.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pykka

from actorflow.actors import encode
from actorflow.errors import EncodeError, InputNotAccepted, SessionBroken
from actorflow.storage import EMPTY_METADATA, packed_metadata

from . import _events as ev
from ._checkpointing import Restored
from ._context import RUN_INPUT
from ._delivery import End, collected, pending_of
from ._engine import Engine
from ._otel import capture_context
from ._session_async import NO_INPUT, STOP_WAIT
from ._types import type_label
from ._wire import SINGLE
from .supervisor import Driver, RunJob, SupervisorActor, new_run_id

__all__ = ["RunJobs"]


class RunJobs:
    """The steps of a run for the session (which provides the attributes declared here)."""

    _engine: Engine[Any]
    _id: str
    _driver: Driver
    _restored: Restored | None
    _started: bool
    _answers_queued: bool
    _supervisor: pykka.ActorRef[SupervisorActor] | None
    _busy: threading.Lock
    _ending: threading.Lock
    _close_when_done: bool
    _cancel: threading.Event

    if TYPE_CHECKING:

        @property
        def last_checkpoint_id(self) -> str | None: ...

        def _acquire(self, what: str) -> None: ...

        def _check_open(self) -> None: ...

        def _queue_answers(self, answers: Mapping[str, Any]) -> None: ...

        def _teardown(self, *, wait: bool) -> None: ...

    def _begin(
        self,
        value: Any,
        max_supersteps: int | None,
        metadata: Mapping[str, Any] | None,
        emit: Callable[[Any], None],
        *,
        answers: Mapping[str, Any] | None = None,
    ) -> RunJob:
        spec = self._engine.spec
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
        self._acquire("start a run")
        try:
            self._check_open()
            if self._driver.broken is not None:
                raise SessionBroken(
                    f"session {self._id!r} cannot run: {self._driver.broken}; call reset(), "
                    "or resume from a checkpoint"
                )
            if answers is not None:
                self._queue_answers(answers)
        except BaseException:
            self._busy.release()
            raise
        if self._cancel.is_set():  # a cancel meant for an earlier run must not stop this one
            self._cancel = threading.Event()
        return RunJob(
            run_id=new_run_id(),
            emit=emit,
            cancel=self._cancel,
            max_supersteps=max_supersteps or spec.max_supersteps,
            metadata=packed,
            input=payload,
            trace=capture_context(),
        )

    def _submit(self, job: RunJob) -> pykka.Future[Any]:
        """Hand the job to the supervisor actor; its last event is an :class:`End`."""
        if self._supervisor is None:
            self._supervisor = self._engine.acquire_supervisor()

        def work() -> End:
            end = End(ev.RunStatus.FAILED, None)
            try:
                end = End(self._drive(job), None)
            except Exception as exc:  # noqa: BLE001 - handed to the caller through End
                end = End(ev.RunStatus.FAILED, exc)
            finally:
                with self._ending:
                    if self._close_when_done:
                        self._close_when_done = False
                        try:
                            self._teardown(wait=False)
                        except Exception:  # noqa: BLE001 - closing for a caller that left
                            pass
                    self._busy.release()
                job.emit(end)
            return end

        return self._supervisor.ask(work, block=False)

    def _drive(self, job: RunJob) -> ev.RunStatus:
        """Supervisor thread: start actors if needed, queue the input, run."""
        driver = self._driver
        spec = self._engine.spec
        if not self._started:
            driver.start_hosts(self._restored.snapshots if self._restored is not None else None)
            self._started = True
        job.emit(
            ev.RunStartedEvent(job.run_id, driver.state.superstep, time.time(), spec.name, self._id)
        )
        first: str | None = None
        if job.input is not None:
            driver.state.inbox.setdefault(spec.start, []).append([RUN_INPUT, SINGLE, job.input])
            first = "entry"
        elif self._answers_queued:
            self._answers_queued = False
            first = "response"
        status = driver.run(job, first_checkpoint=first)
        if driver.checkpointer is not None:
            driver.checkpointer.flush()
        return status

    def _abandon(self, future: pykka.Future[Any]) -> None:
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

    def _finish(self, job: RunJob, raw: list[Any], end: End) -> ev.RunResult:
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


def _input_label(value: Any) -> str:
    """The input's type for an error message; for a list, its items' types too."""
    if type(value) is not list or not value:
        return type_label(type(value))
    items = sorted({type_label(type(item)) for item in value})
    return f"list[{' | '.join(items)}]"
