"""The supervisor: drives supersteps over executor hosts, routes bytes, recovers.

A :class:`Driver` is one session's supervisor logic: its hosts, its in-flight
state and (optionally) its checkpointer. It runs only on a supervisor actor's
thread (:class:`SupervisorActor`), one run at a time. Per superstep it hands each
target its inbox as one batch, waits at the barrier for every report, routes the
returned payloads without decoding them, and checkpoints. A failed executor is
restored from its last good state and re-run alone (confined recovery): the
executors that completed keep their results, routed once.

Its other concerns are mixins beside it: the hosts (``_host_steps``),
checkpointing (``_checkpoint_steps``) and recovery (``_recovery``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import actorflow.runtime._events as ev
from actorflow.actors import HostFuture, HostPool, HostRef
from actorflow.errors import (
    RunCancelled,
    RunFailed,
    SuperstepLimitExceeded,
)
from actorflow.runtime._checkpointing import Checkpointer
from actorflow.runtime._graph import GraphSpec
from actorflow.runtime._logging import get_logger
from actorflow.runtime._otel import SPAN_RESTART, SPAN_ROLLBACK, RunTelemetry, open_run
from actorflow.runtime._pace import PACE
from actorflow.runtime._policy import Durability, RestartPolicy, Restarts
from actorflow.runtime._state import RunState
from actorflow.runtime._wire import SINGLE, pack, unpack
from actorflow.storage import BlobBatchReader

from ._barrier import Interrupted, TimedOut, collect
from ._cuts import CheckpointSteps, qualname
from ._hosts import HostSteps
from ._job import Fault, Payload, RunJob
from ._last_good import LastGood
from ._recovery import RecoverySteps, StepFailure

__all__ = ["Driver"]

_log = get_logger("actorflow.supervisor")


class Driver(CheckpointSteps, RecoverySteps, HostSteps):
    """Supervisor logic for one session (or one one-off run). Supervisor thread only."""

    def __init__(
        self,
        spec: GraphSpec,
        pool: HostPool,
        *,
        session: str,
        restart: RestartPolicy | None,
        restart_overrides: dict[str, RestartPolicy],
        checkpointer: Checkpointer | None,
    ) -> None:
        self.spec = spec
        self.pool = pool
        self.session = session
        self.state = RunState()
        self.hosts: dict[str, HostRef] = {}
        self.faults: dict[tuple[str, int], Fault] = {}
        self._restarts = Restarts(restart, restart_overrides)
        self.checkpointer = checkpointer
        # Last good state per executor, kept only when someone asked for it
        # (a restart policy or a store): digests, and the chunk bytes behind them.
        self._keep_state = checkpointer is not None or self._restarts.active
        store = checkpointer.store if checkpointer is not None else None
        self._last = LastGood(
            store.load_blob if store is not None else None,
            # (A runtime Protocol check costs ~25 us: only made when there is a store.)
            store.load_blobs if store is not None and isinstance(store, BlobBatchReader) else None,
        )
        self._hung: set[str] = set()
        self._stopping: threading.Event | None = None
        """The current run's cancel event, watched at the barrier."""
        self._unloaded: set[str] = set()
        self._unrestored: dict[str, list[tuple[str, bytes | None]]] = {}
        self.completed: dict[str, tuple[list[Any], list[str]]] = {}
        """Executor -> (report, snapshot digests) of a partly finished superstep (resume)."""
        self.request_suffix: tuple[str, ...] = ()
        """``(suffix,)`` when this lineage tags its request ids (see ``_lineage``), else ()."""
        self.broken: str | None = None
        """Why the driver cannot run again (a failed superstep it could not roll back)."""
        self._unwritten = False
        """The cut of the last barrier is still to be written: it is, as the next
        superstep starts (a store that lives in this process, see Checkpointer.overlaps)."""
        self._log = _log.bind(workflow=spec.name, session=session)
        self._trace: RunTelemetry | None = None
        """The current run's spans and metrics; None unless a provider is set."""

    # --- lifecycle: see HostSteps ----------------------------------------------------

    # --- the run ------------------------------------------------------------------

    def run(self, job: RunJob, *, first_checkpoint: str | None = None) -> ev.RunStatus:
        """Drive supersteps until idle, cancelled, failed or over the limit.

        Args:
            job: the run.
            first_checkpoint: ``entry`` (the input was just queued) or ``response``
                (answers were just queued): checkpoint that cut before anything runs.

        Raises:
            RunFailed (or a subclass): the run failed; emitted as an event too.
        """
        telemetry = open_run(
            job,
            workflow=self.spec.name,
            session=self.session,
            superstep=self.state.superstep,
            checkpointer=self.checkpointer,
        )
        if telemetry is None:
            with PACE.run(job.cancel):
                return self._run(job, first_checkpoint)
        self._trace = telemetry
        status, error = ev.RunStatus.FAILED.value, None
        try:
            with PACE.run(job.cancel):
                status = self._run(job, first_checkpoint).value
            return ev.RunStatus(status)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._trace = None
            telemetry.end(status, len(self.state.pending), error)

    def _run(self, job: RunJob, first_checkpoint: str | None) -> ev.RunStatus:
        log = self._log.bind(run=job.run_id)
        log.info("run started", superstep=self.state.superstep)
        self._stopping = job.cancel
        steps = 0
        emit = job.emit
        try:
            if first_checkpoint is not None and self.checkpointer is not None:
                self._checkpoint_first(job, first_checkpoint)
            while self.state.inbox:
                cancelled = job.cancel.is_set()
                if self._unwritten and (cancelled or steps >= job.max_supersteps):
                    self._write_unwritten(job)  # no next superstep: the cut is written now
                if cancelled:
                    emit(ev.RunCancelledEvent(job.run_id, self.state.superstep, time.time()))
                    return ev.RunStatus.CANCELLED
                if steps >= job.max_supersteps:
                    raise SuperstepLimitExceeded(
                        f"run {job.run_id} reached max_supersteps={job.max_supersteps} with "
                        f"messages still in flight for {sorted(self.state.inbox)}; raise "
                        "max_supersteps, or resume from the last checkpoint to continue",
                        run_id=job.run_id,
                        superstep=self.state.superstep,
                    )
                steps += 1
                if self._trace is None:
                    self._superstep(job)
                else:
                    self._trace.superstep(self._superstep, self.state.superstep + 1)
            pending = tuple(sorted(self.state.pending))
            now = time.time()
            if self.checkpointer is not None:
                self._checkpoint(job, "final")
            if pending:
                emit(
                    ev.RunIdleWithPendingRequestsEvent(
                        job.run_id, self.state.superstep, now, pending
                    )
                )
                status = ev.RunStatus.IDLE_WITH_PENDING_REQUESTS
            else:
                emit(ev.RunIdleEvent(job.run_id, self.state.superstep, now))
                status = ev.RunStatus.COMPLETED
            emit(ev.RunCompletedEvent(job.run_id, self.state.superstep, time.time(), status))
            log.info("run completed", status=status.value, supersteps=steps)
            return status
        except RunCancelled:
            # cancel() arrived during a restart backoff: the superstep was rolled back.
            emit(ev.RunCancelledEvent(job.run_id, self.state.superstep, time.time()))
            return ev.RunStatus.CANCELLED
        except RunFailed as exc:
            cause = exc.__cause__ or exc
            emit(
                ev.RunFailedEvent(
                    job.run_id,
                    self.state.superstep,
                    time.time(),
                    getattr(exc, "executor", None),
                    qualname(type(cause)),
                    str(exc),
                )
            )
            log.info(
                f"run failed in superstep {self.state.superstep}: {exc}",
                superstep=self.state.superstep,
                error=str(exc),
            )
            raise

    def _superstep(self, job: RunJob) -> None:
        state = self.state
        superstep = state.superstep + 1
        inbox, state.inbox = state.inbox, {}
        targets = sorted(inbox)
        emit = job.emit
        on_sent: Callable[[], None] | None = None
        if self._unwritten:
            # The last barrier's cut is written while the hosts start on this superstep;
            # its answers are read only after, and its events follow the cut's event.
            def on_sent() -> None:
                self._write_unwritten(job, barrier_inbox=inbox)
                self._announce(job, superstep, targets, inbox)

        else:
            self._announce(job, superstep, targets, inbox)
        checkpoint_now = self.checkpointer is not None and self.checkpointer.due(superstep)
        want_snapshot = self._restarts.active or checkpoint_now
        # With sync durability each executor's finished part is persisted as it
        # arrives, so a crash mid-superstep re-runs only the unfinished executors.
        persist = (
            checkpoint_now
            and self.checkpointer is not None
            and self.checkpointer.policy.durability is Durability.SYNC
            and len(targets) > 1
        )
        try:
            done = self._completed_reports(superstep, targets) if self.completed else {}
            to_run = [t for t in targets if t not in done] if done else targets
            reports = self._execute(
                job,
                superstep,
                to_run,
                inbox,
                want_snapshot=want_snapshot,
                persist=persist,
                on_sent=on_sent,
            )
            reports.update(done)
        except BaseException as exc:
            # Nothing of a failed superstep survives (MAF #7859): its inbox is back in
            # flight and every executor it ran is rolled back to the last barrier, so
            # a later run continues from a consistent cut.
            state.inbox = inbox
            cancelled = isinstance(exc, RunCancelled)
            if self._trace is None:
                self._roll_back(targets, superstep, cancelled=cancelled)
            else:
                self._trace.recovery(
                    SPAN_ROLLBACK,
                    superstep,
                    None,
                    lambda: self._roll_back(targets, superstep, cancelled=cancelled),
                )
            if self._unwritten:  # failed before any host started: the cut still counts
                self._write_unwritten(job)
            raise
        new_inbox = state.inbox
        now = time.time()
        for target in targets:
            sends, outputs, requests, snapshot = reports[target]
            for dst, group, payload in sends:
                if group == SINGLE:
                    new_inbox.setdefault(dst, []).append([target, SINGLE, payload])
                else:
                    state.fan_in.setdefault(group, {}).setdefault(target, []).append(payload)
            for payload in outputs:
                emit(ev.OutputEvent(job.run_id, superstep, now, target, Payload(payload)))
            for request_id, payload, response_type in requests:
                state.pending[request_id] = [target, payload, response_type]
                emit(
                    ev.RequestEvent(
                        job.run_id,
                        superstep,
                        now,
                        request_id,
                        target,
                        Payload(payload),
                        response_type,
                    )
                )
            if snapshot is not None:
                self._last.remember(target, snapshot)
            else:
                self._last.dirty.add(target)
            emit(ev.ExecutorCompletedEvent(job.run_id, superstep, now, target))
        self._complete_fan_ins(new_inbox)
        state.superstep = superstep
        emit(ev.SuperstepCompletedEvent(job.run_id, superstep, time.time()))
        if checkpoint_now:
            assert self.checkpointer is not None
            # Only with every snapshot in hand: asking a host for one would queue behind
            # the next superstep and return its state after that superstep.
            if new_inbox and self.checkpointer.overlaps and not self._last.dirty:
                self._unwritten = True
            else:
                self._checkpoint(job, "step")

    def _announce(
        self, job: RunJob, superstep: int, targets: list[str], inbox: dict[str, list[Any]]
    ) -> None:
        """Emit the events of a superstep's start."""
        now = time.time()
        emit = job.emit
        emit(ev.SuperstepStartedEvent(job.run_id, superstep, now, tuple(targets)))
        for target in targets:
            if target not in self.completed:
                emit(
                    ev.ExecutorInvokedEvent(job.run_id, superstep, now, target, len(inbox[target]))
                )

    def _write_unwritten(
        self, job: RunJob, barrier_inbox: dict[str, list[Any]] | None = None
    ) -> None:
        """Write the last barrier's cut; ``barrier_inbox``: its in-flight messages, when
        the next superstep already took them out of the state."""
        self._unwritten = False
        if barrier_inbox is None:
            self._checkpoint(job, "step")
            return
        state = self.state
        running, state.inbox = state.inbox, barrier_inbox
        try:
            self._checkpoint(job, "step")
        finally:
            state.inbox = running

    def _complete_fan_ins(self, new_inbox: dict[str, list[Any]]) -> None:
        fan_in = self.state.fan_in
        for group, (target, sources) in enumerate(self.spec.fan_in):
            buffers = fan_in.get(group)
            if not buffers or any(not buffers.get(s) for s in sources):
                continue
            items = [buffers[s].pop(0) for s in sources]
            for s in sources:
                if not buffers[s]:
                    del buffers[s]
            if not buffers:
                del fan_in[group]
            new_inbox.setdefault(target, []).append([sources[0], group, items])

    def _execute(
        self,
        job: RunJob,
        superstep: int,
        targets: list[str],
        inbox: dict[str, list[Any]],
        *,
        want_snapshot: bool,
        persist: bool,
        on_sent: Callable[[], None] | None,
    ) -> dict[str, list[Any]]:
        """Run the superstep's targets in parallel; restart failures alone.

        ``on_sent`` is called once, when every host has its part and before any answer
        is read.
        """
        reports: dict[str, list[Any]] = {}
        pending = targets
        self.restore_due(targets, job.run_id, superstep)

        def on_answer(target: str, answer: bytes, still_running: int) -> None:
            if still_running:  # the last one's part goes into the step checkpoint itself
                self._persist_partial(job, superstep, target, answer)

        while pending:
            failures = self._dispatch(
                superstep,
                pending,
                inbox,
                want_snapshot=want_snapshot,
                reports=reports,
                on_answer=on_answer if persist else None,
                on_sent=on_sent,
            )
            on_sent = None
            if not failures:
                return reports
            for failure in failures:
                if self._trace is None:
                    self._recover(job, superstep, failure)
                else:
                    self._trace.recovery(
                        SPAN_RESTART,
                        superstep,
                        failure.executor,
                        lambda f=failure: self._recover(job, superstep, f),  # type: ignore[misc]
                    )
            pending = [f.executor for f in failures]
        return reports

    def _dispatch(
        self,
        superstep: int,
        targets: list[str],
        inbox: dict[str, list[Any]],
        *,
        want_snapshot: bool,
        reports: dict[str, list[Any]],
        on_answer: Callable[[str, bytes, int], None] | None,
        on_sent: Callable[[], None] | None,
    ) -> list[StepFailure]:
        futures: dict[str, HostFuture] = {}
        faults = self.faults
        trace = self._trace
        started = time.monotonic()
        for target in targets:
            fault = faults.pop((target, superstep), None) if faults else None
            mode = fault.kind if fault is not None else ""
            if mode == "death":
                self.hosts[target].stop()
            frame = [superstep, inbox[target], want_snapshot or bool(mode), mode]
            frame += self.request_suffix
            if trace is not None:
                if len(frame) == 4:
                    frame.append("")  # the trace part is always the sixth item
                frame.append(trace.step_frame(target))
            futures[target] = self._call(target, "step", pack(frame))
        if on_sent is not None:
            on_sent()
        failures: list[StepFailure] = []
        abandoned: list[str] = []
        outcomes = collect(futures, self.spec.timeouts, started, on_answer, self._stopping)
        for target, answer, error in outcomes:
            if error is not None:
                if isinstance(error, (TimedOut, Interrupted)):
                    self._hung.add(target)
                if isinstance(error, Interrupted):
                    abandoned.append(target)
                failures.append(StepFailure(target, error))
            else:
                assert answer is not None
                report = reports[target] = unpack(answer)
                if trace is not None:
                    trace.take_sends(report)
        if abandoned:
            # Cancelled with handlers that did not reach the barrier in time: the whole
            # superstep is rolled back by the caller, the stuck hosts replaced.
            raise RunCancelled(
                f"the run was cancelled in superstep {superstep} while {abandoned} were still "
                "in their handlers; they were abandoned and the superstep rolled back"
            )
        return failures
