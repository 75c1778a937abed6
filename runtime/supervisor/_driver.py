"""The supervisor: drives supersteps over executor hosts, routes bytes, recovers.

A :class:`Driver` is one session's supervisor logic, run only on a supervisor
actor's thread (:class:`SupervisorActor`), one run at a time. Per superstep it
hands each target its inbox as one batch, waits at the barrier for every report,
routes the returned payloads without decoding them, and checkpoints. A failed
executor is restored from its last good state and re-run alone (confined
recovery): the executors that completed keep their results, routed once.

It is composed of collaborators that own their state: the hosts it borrowed
(:class:`Hosts`), the recovery of failed executors (:class:`Recovery`), the cuts
it writes (:class:`CutWriter`, with a store only) and the last good state of each
executor (:class:`LastGood`), which the other three share. A run's telemetry is a
collaborator too, :data:`SILENT` when nobody listens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import actorflow.runtime._events as ev
from actorflow.actors import HostFuture, HostPool, group_wait
from actorflow.errors import (
    CheckpointWriteFailed,
    RunCancelled,
    RunFailed,
    SuperstepLimitExceeded,
)
from actorflow.runtime._effects import NO_FRAME, carried, carry_unrecorded
from actorflow.runtime._graph import GraphSpec
from actorflow.runtime._logging import get_logger
from actorflow.runtime._pace import PACE
from actorflow.runtime._policy import RestartPolicy
from actorflow.runtime._wire import SINGLE, StepReport, StepRequest
from actorflow.runtime.checkpoints import (
    SAVED_KEY,
    Checkpointer,
    FailedAttempt,
    RunState,
    effect_scope,
)
from actorflow.runtime.telemetry import SILENT, SPAN_RESTART, SPAN_ROLLBACK, Telemetry, open_run
from actorflow.storage import BlobBatchReader, metadata_with, sql_dialect

from ._attempts import Attempts
from ._barrier import Interrupted, Outcome, TimedOut, collect, wait_released
from ._cuts import CutWriter, Parts
from ._drops import report_drops
from ._express import Chain
from ._failures import StepFailure, error_type_of, qualname
from ._history import HistoryLog
from ._hosts import Hosts, HostWrapper
from ._job import Payload, RunJob
from ._journals import Journals
from ._last_good import Chunks, LastGood
from ._recovery import Recovery

__all__ = ["Driver"]

_log = get_logger("actorflow.supervisor")


class Driver:
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
        history: HistoryLog | None = None,
    ) -> None:
        self.spec = spec
        self.session = session
        self.state = RunState()
        self._log = _log.bind(workflow=spec.name, session=session)
        store = checkpointer.store if checkpointer is not None else None
        self._last = LastGood(
            store.load_blob if store is not None else None,
            # (A runtime Protocol check costs ~25 us: only made when there is a store.)
            store.load_blobs if store is not None and isinstance(store, BlobBatchReader) else None,
        )
        # Last good state per executor, kept only when someone asked for it
        # (a restart policy or a store): digests, and the chunk bytes behind them.
        keep_state = checkpointer is not None or restart is not None or bool(restart_overrides)
        self._hosts = Hosts(spec, pool, self._last, keep_state=keep_state)
        self._recovery = Recovery(
            self._hosts,
            self._last,
            restart,
            restart_overrides,
            keep_state=keep_state,
            log=self._log,
        )
        self.history = (
            history if history is not None else HistoryLog(durable=checkpointer is not None)
        )
        """The session's history: numbers events, and hands the cuts their entries."""
        self._journals = Journals()
        """Effects and statements of completed supersteps, until a cut commits them."""
        self._cuts = (
            CutWriter(
                checkpointer,
                self._hosts,
                self._last,
                self.history,
                self._journals,
                log=self._log,
            )
            if checkpointer is not None
            else None
        )
        self._effect_frame: list[Any] = list(NO_FRAME)
        """The ``effects`` field of this run's step requests (see ``_wire``)."""
        self._attempts = Attempts()
        """Effect results of failed attempts at the current superstep, until it completes."""
        self._stopping: threading.Event | None = None
        """The current run's cancel event, watched at the barrier."""
        self.request_suffix = ""
        """The lineage's tag of default request ids (see ``_lineage``), or ``""``."""
        self.origin = ""
        """The session's origin (see ``_lineage``): part of its effects' scope."""
        self.broken: str | None = None
        """Why the driver cannot run again (a failed superstep it could not roll back)."""
        self._telemetry: Telemetry = SILENT
        """The current run's spans and metrics."""
        self._local_hosts: bool | None = None
        """Whether the hosts answer on threads of this process (their futures call back
        at no cost, so a chain of express supersteps pays off), or in other processes
        (their futures wait together, ``wait_any``: a callback costs a thread hop
        each); learned from the first superstep's futures."""

    # --- what the session sees ---------------------------------------------------

    @property
    def checkpointer(self) -> Checkpointer | None:
        """The checkpointer of the session's store (None without a store)."""
        return self._cuts.checkpointer if self._cuts is not None else None

    def resume_parts(self, completed: Parts) -> None:
        """The finished parts of the superstep a crashed process was running: its next
        superstep runs only the executors without one."""
        assert self._cuts is not None, "only a session with a store resumes"
        self._cuts.completed = dict(completed)

    def hand_back(self, attempt: FailedAttempt | None) -> None:
        """The effect results a failed superstep got before its run halted (another
        process, maybe): its next attempt gets them instead of calling again, and every
        cut until it completes records them again. The caller hands back only an
        attempt of this session's scope (a fork's keys differ: it calls anew)."""
        self._attempts.resume(attempt)
        if attempt is not None and self._cuts is not None:
            for executor, made in attempt.results.items():
                self._journals.attempted(executor, attempt.superstep, made)

    def start_hosts(self, initial: dict[str, Chunks] | None = None) -> None:
        """Borrow hosts for every executor (see :meth:`Hosts.start`)."""
        self._hosts.start(initial)

    def release_hosts(self, *, wait: bool = True) -> None:
        """Unload every program and give the hosts back (see :meth:`Hosts.release`)."""
        self._hosts.release(wait=wait)

    def wrap_host(self, executor: str, wrapper: HostWrapper) -> None:
        """Send every later call to ``executor``'s host through ``wrapper`` (testing tools)."""
        self._hosts.wrap(executor, wrapper)

    @property
    def reusable(self) -> bool:
        """Whether :meth:`renew` may hand these hosts to an unrelated run: no store
        (its lineage is the session's), nothing broken, no host abandoned mid-handler."""
        return self._cuts is None and self.broken is None and not self._hosts.any_hung

    def renew(self, session: str) -> None:
        """Start over on the same hosts, for an unrelated run (a recycled one-off session).

        Nothing of the last run survives: in-flight state, restart counters and last
        good states are dropped, and each executor's next call reloads its program,
        so every run gets fresh instances built from the blueprints.

        The one call not made on the supervisor thread: its owner calls it between
        runs, while no job is queued, and the next job, queued after it through the
        actor's inbox, sees every write.
        """
        assert self.reusable, "only a driver without store, failure or hung host is renewed"
        self.session = session
        self.state = RunState()
        self._last.forget_all()
        self.broken = None
        self._log = _log.bind(workflow=self.spec.name, session=session)
        self._recovery.renew(self._log)
        self._hosts.reload()
        self.history.renew()

    def save(self, job: RunJob) -> None:
        """Write the cut of the state as it stands, between runs (``Session.save``):
        ``final`` when idle, ``step`` when messages are in flight (a fork of a barrier
        in the middle of a run, or a cancelled run, which its next run continues),
        marked with :data:`~actorflow.runtime.checkpoints.SAVED_KEY`.

        Raises:
            ExecutorFailed: a snapshot the cut needs could not be taken.
            CheckpointWriteFailed: the store refused the cut.
        """
        assert self._cuts is not None, "only a session with a store saves"
        kind = "final"
        if self.state.inbox:  # marked: no run wrote this step cut (see checkpoints._rest)
            kind, job.metadata = "step", metadata_with(job.metadata, SAVED_KEY, True)
        self._cuts.write(job, kind, self.state, self._telemetry)
        self._cuts.checkpointer.flush()

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
        telemetry = self._telemetry = open_run(
            job,
            workflow=self.spec.name,
            session=self.session,
            superstep=self.state.superstep,
            checkpointer=self.checkpointer,
        )
        status, error = ev.RunStatus.FAILED, None
        try:
            with PACE.run(job.cancel):
                status = self._run(job, first_checkpoint)
            return status
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._telemetry = SILENT
            telemetry.end(status.value, len(self.state.pending), error)

    def _run(self, job: RunJob, first_checkpoint: str | None) -> ev.RunStatus:
        log = self._log.bind(run=job.run_id)
        log.info("run started", superstep=self.state.superstep)
        self._stopping = job.cancel
        self._effect_frame = self._effect_frame_of()
        steps = 0
        emit = job.emit
        state, cuts, telemetry = self.state, self._cuts, self._telemetry
        # Supersteps of one executor may go from host to host (see _expressible):
        # never when every barrier's state is kept for a restart, or with spans, or
        # on hosts in other processes (_local_hosts).
        express = not self._recovery.active and telemetry is SILENT
        try:
            if first_checkpoint is not None and cuts is not None:
                cuts.write_first(job, first_checkpoint, state, self.spec.start, telemetry)
            while state.inbox:
                cancelled = job.cancel.is_set()
                if (
                    cuts is not None
                    and cuts.unwritten
                    and (cancelled or steps >= job.max_supersteps)
                ):
                    cuts.write_unwritten(job, state, telemetry)  # no next superstep: written now
                if cancelled:
                    self._halt(job, ev.RunCancelledEvent(job.run_id, state.superstep, time.time()))
                    return ev.RunStatus.CANCELLED
                if steps >= job.max_supersteps:
                    raise SuperstepLimitExceeded(
                        f"run {job.run_id} reached max_supersteps={job.max_supersteps} with "
                        f"messages still in flight for {sorted(state.inbox)}; raise "
                        "max_supersteps, or resume from the last checkpoint to continue",
                        run_id=job.run_id,
                        superstep=state.superstep,
                    )
                if (
                    express
                    and self._local_hosts
                    and len(state.inbox) == 1
                    and self._expressible(state.superstep + 1, *state.inbox)
                ):
                    steps += self._express(job, job.max_supersteps - steps)
                else:
                    steps += 1
                    telemetry.superstep(state.superstep + 1, lambda: self._superstep(job))
            pending = tuple(sorted(state.pending))
            now = time.time()
            status = ev.RunStatus.IDLE_WITH_PENDING_REQUESTS if pending else ev.RunStatus.COMPLETED
            # Numbered before the final cut, which carries it; emitted once that is stored.
            completed = self.history.note(
                ev.RunCompletedEvent(job.run_id, state.superstep, now, status)
            )
            if cuts is not None:
                try:
                    cuts.write(job, "final", state, telemetry)
                except RunFailed:
                    self.history.retract(completed)  # it did not complete: it fails
                    raise
            if pending:
                emit(ev.RunIdleWithPendingRequestsEvent(job.run_id, state.superstep, now, pending))
            else:
                emit(ev.RunIdleEvent(job.run_id, state.superstep, now))
            emit(completed)
            log.info("run completed", status=status.value, supersteps=steps)
            return status
        except RunCancelled:
            # cancel() arrived during a restart backoff: the superstep was rolled back.
            self._halt(job, ev.RunCancelledEvent(job.run_id, state.superstep, time.time()))
            return ev.RunStatus.CANCELLED
        except RunFailed as exc:
            cause = exc.__cause__ or exc
            halted = self._halt(
                job,
                ev.RunFailedEvent(
                    job.run_id,
                    state.superstep,
                    time.time(),
                    getattr(exc, "executor", None),
                    error_type_of(cause),
                    str(exc),
                ),
                write=not isinstance(exc, CheckpointWriteFailed),
            )
            if not halted:
                # No cut holds what the run's effects got since its last one: the
                # caller may (a sub-workflow's parent records them).
                carry_unrecorded(exc, self._journals.unrecorded())
            log.info(
                f"run failed in superstep {state.superstep}: {exc}",
                superstep=state.superstep,
                error=str(exc),
            )
            raise

    def _halt(self, job: RunJob, end: ev.Event, *, write: bool = True) -> bool:
        """End a run that did not go idle with ``end`` (its failure or cancel): with a
        store, a ``halt`` cut of the last barrier carries it (and what led to it), so
        the session's history says why it stopped; then ``end`` is emitted.

        No cut is written (``write`` false) when the run failed because its store did:
        a run whose entry could not be written was never accepted, and leaves nothing.
        Nor when the driver is broken or some executor's state at the barrier was never
        snapshotted (a policy that skips barriers): asking a host for it now could wait
        on the very host that failed. The entries then go with the session's next cut.
        Returns whether the ``halt`` cut was written.
        """
        self.history.note(end)
        cuts = self._cuts
        written = False
        if write and cuts is not None and self.broken is None and cuts.may_halt():
            try:
                cuts.write(job, "halt", self.state, self._telemetry)
                written = True
            except RunFailed as exc:  # the store failed too: reported as its own event
                self._log.warning(
                    f"the halt checkpoint of run {job.run_id} could not be written: {exc}",
                    run=job.run_id,
                )
        job.emit(end)
        return written

    def _expressible(self, superstep: int, target: str) -> bool:
        """Whether ``superstep``, run by ``target`` alone, may be handed to it by the
        host before it: nothing in it is the supervisor's to do. Not a superstep whose
        barrier is checkpointed (its state is asked for, and the cut written after it),
        nor one with a cut still to write or parts of a crashed process to take; not a
        ``timeout=`` executor (the supervisor watches deadlines), nor one whose stored
        state is still to restore (after a resume); nor one whose barrier hands a
        fan-in group on (its buffers hold an item from every source, as after sources
        that sent twice): that delivery joins the superstep, which then is not
        ``target``'s alone.

        Asked by the supervisor for a chain's first superstep, and by the host holding
        the chain for each next one (while the supervisor only waits).
        """
        cuts = self._cuts
        if cuts is not None and (cuts.unwritten or cuts.completed or cuts.due(superstep)):
            return False
        return (
            self.spec.timeouts.get(target) is None
            and not self._hosts.unrestored(target)
            and not self._complete_groups()
        )

    def _express(self, job: RunJob, budget: int) -> int:
        """Run one-executor supersteps as a chain, at most ``budget`` (see ``_express``),
        then settle each as :meth:`_superstep` would have; returns how many ran."""
        state = self.state
        [(target, deliveries)] = state.inbox.items()
        chain = Chain(
            self._hosts,
            may_run=self._expressible,
            suffix=self.request_suffix,
            effects=self._effect_frame,
            cancel=self._stopping,
            budget=budget,
        )
        state.inbox = {}
        chain.start(state.superstep + 1, target, deliveries)
        if not wait_released(chain.done, self._stopping):
            chain.abandon()  # cancelled, and a handler is still running past the grace
        for link in chain.links:
            # Each link's batch is what the one before it routed: in flight no more.
            inbox = {link.target: link.deliveries}
            assert not state.inbox or state.inbox == inbox, "a link runs all that was routed"
            state.inbox = {}
            self._announce(job, link.superstep, [link.target], inbox)
            self._settle(job, link.superstep, [link.target], {link.target: link.report})
        stopped = chain.stopped
        if stopped is None:
            return len(chain.links)
        # The step the chain did not complete fails as it would have in a superstep of
        # its own (restarted, or rolled back), with the same events.
        state.inbox = {stopped.target: stopped.deliveries}
        error = stopped.error if stopped.error is not None else Interrupted(stopped.target)
        self._superstep(job, given={stopped.target: error})
        return len(chain.links) + 1

    def _superstep(self, job: RunJob, given: dict[str, BaseException] | None = None) -> None:
        """Run one superstep; ``given``: the outcome of its executors' first attempt, when
        it is already known (an express chain's failed step), instead of running them."""
        state, cuts, telemetry = self.state, self._cuts, self._telemetry
        superstep = state.superstep + 1
        inbox, state.inbox = state.inbox, {}
        targets = sorted(inbox)
        emit = job.emit
        on_sent: Callable[[], None] | None = None
        announced = [False]  # whether the caller heard of this superstep (a cell: on_sent sets it)
        if cuts is not None and cuts.unwritten:
            # The last barrier's cut is written while the hosts start on this superstep;
            # its answers are read only after, and its events follow the cut's event.
            def on_sent() -> None:
                cuts.write_unwritten(job, state, telemetry, barrier_inbox=inbox)
                self._announce(job, superstep, targets, inbox)
                announced[0] = True

        else:
            self._announce(job, superstep, targets, inbox)
            announced[0] = True
        checkpoint_now = cuts is not None and cuts.due(superstep)
        want_snapshot = self._recovery.active or checkpoint_now
        persist = checkpoint_now and cuts is not None and cuts.persists_parts(targets)
        try:
            done = cuts.take_completed(superstep, targets, state) if cuts and cuts.completed else {}
            to_run = [t for t in targets if t not in done] if done else targets
            reports = self._execute(
                job,
                superstep,
                to_run,
                inbox,
                want_snapshot=want_snapshot,
                persist=persist,
                on_sent=on_sent,
                given=given,
            )
            reports.update(done)
        except BaseException as exc:
            # Nothing of a failed superstep survives (MAF #7859): its inbox is back in
            # flight and every executor it ran is rolled back to the last barrier, so
            # a later run continues from a consistent cut.
            state.inbox = inbox
            cancelled = isinstance(exc, RunCancelled)
            broken = telemetry.recovery(
                SPAN_ROLLBACK,
                superstep,
                None,
                lambda: self._recovery.roll_back(targets, superstep, cancelled=cancelled),
            )
            if broken is not None:
                self.broken = broken
            elif announced[0]:  # (a superstep whose start the caller never heard of is not news)
                emit(
                    ev.SuperstepRolledBackEvent(
                        job.run_id, superstep, time.time(), tuple(targets), _reason(exc)
                    )
                )
            if cuts is not None and cuts.unwritten:
                cuts.write_unwritten(job, state, telemetry)  # no host started: the cut counts
            raise
        self._settle(job, superstep, targets, reports)
        if checkpoint_now:
            assert cuts is not None
            if cuts.may_defer(state):
                cuts.unwritten = True
            else:
                cuts.write(job, "step", state, telemetry)

    def _settle(
        self, job: RunJob, superstep: int, targets: list[str], reports: dict[str, StepReport]
    ) -> None:
        """Take a completed superstep's reports: route, emit, remember; it is then done."""
        state, cuts, emit = self.state, self._cuts, job.emit
        new_inbox = state.inbox
        now = time.time()
        last = self._last
        for target in targets:
            report = reports[target]
            for dst, group, payload in report.sends:
                if group == SINGLE:
                    new_inbox.setdefault(dst, []).append([target, SINGLE, payload])
                else:
                    state.fan_in.setdefault(group, {}).setdefault(target, []).append(payload)
            for payload in report.outputs:
                emit(ev.OutputEvent(job.run_id, superstep, now, target, Payload(payload)))
            if report.dropped:
                report_drops(job, superstep, now, target, report.dropped, log=self._log)
            for request_id, payload, response_type in report.requests:
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
            if cuts is not None:
                self._journals.completed(target, superstep, report)
            if report.snapshot is not None:
                last.remember(target, report.snapshot)
            else:
                last.dirty.add(target)
            emit(ev.ExecutorCompletedEvent(job.run_id, superstep, now, target))
        self._complete_fan_ins(new_inbox)
        state.superstep = superstep
        self._attempts.clear()
        if cuts is not None:
            self._journals.settled(superstep)
        emit(ev.SuperstepCompletedEvent(job.run_id, superstep, time.time()))

    def _effect_frame_of(self) -> list[Any]:
        """``[scope, fencing token, SQL dialect, recorded, remembered]`` for this run's
        handlers; the scope (session id, origin and lineage tag) is what makes effect keys
        unique to a lineage of one use of the session id."""
        scope = effect_scope(self.session, self.origin, self.request_suffix)
        checkpointer = self.checkpointer
        if checkpointer is None:
            return [scope, None, None, None, None]
        lease = checkpointer.lease
        return [
            scope,
            lease.token if lease is not None else None,
            sql_dialect(checkpointer.store),
            None,
            None,
        ]

    def _announce(
        self, job: RunJob, superstep: int, targets: list[str], inbox: dict[str, list[Any]]
    ) -> None:
        """Emit the events of a superstep's start."""
        now = time.time()
        emit = job.emit
        emit(ev.SuperstepStartedEvent(job.run_id, superstep, now, tuple(targets)))
        completed = self._cuts.completed if self._cuts is not None else {}
        for target in targets:
            if target not in completed:
                emit(
                    ev.ExecutorInvokedEvent(job.run_id, superstep, now, target, len(inbox[target]))
                )

    def _complete_fan_ins(self, new_inbox: dict[str, list[Any]]) -> None:
        """Hand each fan-in group holding an item from every source its next delivery
        (one per group per barrier: the oldest item of each source, in source order)."""
        fan_in = self.state.fan_in
        for group, target, sources, buffers in self._complete_groups():
            items = [buffers[s].pop(0) for s in sources]
            for s in sources:
                if not buffers[s]:
                    del buffers[s]
            if not buffers:
                del fan_in[group]
            new_inbox.setdefault(target, []).append([sources[0], group, items])

    def _complete_groups(self) -> list[tuple[int, str, tuple[str, ...], dict[str, list[Any]]]]:
        """The fan-in groups whose buffers hold an item from every source: (group,
        target, sources, buffers) each."""
        fan_in = self.state.fan_in
        if not fan_in:
            return []
        complete = []
        for group, (target, sources) in enumerate(self.spec.fan_in):
            buffers = fan_in.get(group)
            if buffers and all(buffers.get(s) for s in sources):
                complete.append((group, target, sources, buffers))
        return complete

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
        given: dict[str, BaseException] | None = None,
    ) -> dict[str, StepReport]:
        """Run the superstep's targets in parallel; restart failures alone.

        ``on_sent`` is called once, when every host has its part and before any answer
        is read. ``given``: the failures of a first attempt already made (see
        :meth:`_superstep`).
        """
        reports: dict[str, StepReport] = {}
        pending = targets
        self._hosts.restore_due(targets, job.run_id, superstep)
        cuts = self._cuts

        def on_answer(target: str, answer: bytes, still_running: int) -> None:
            if still_running:  # the last one's part goes into the step checkpoint itself
                assert cuts is not None
                cuts.write_part(job, superstep, target, answer)

        scope = self._effect_frame[0]
        try:
            while pending:
                failures = self._dispatch(
                    superstep,
                    pending,
                    inbox,
                    want_snapshot=want_snapshot,
                    reports=reports,
                    on_answer=on_answer if persist else None,
                    on_sent=on_sent,
                    given=given,
                )
                on_sent = given = None
                for failure in failures:  # all kept before a restart policy may give up
                    self._attempts.failed(
                        scope, superstep, failure.executor, carried(failure.error)
                    )
                for failure in failures:
                    self._telemetry.recovery(
                        SPAN_RESTART,
                        superstep,
                        failure.executor,
                        lambda f=failure: self._recovery.recover(job, superstep, f),  # type: ignore[misc]
                    )
                pending = [f.executor for f in failures]
        except BaseException:
            # The superstep fails for good: what its effects returned, in the executors
            # that completed it and in the attempts that failed, goes with the next cut
            # (the run's halt), see _journals.
            if cuts is not None:
                for target in targets:
                    report = reports.get(target)
                    made = (
                        report.effects
                        if report is not None
                        else self._attempts.of(scope, superstep, target)
                    )
                    if made:
                        self._journals.attempted(target, superstep, made)
            raise
        return reports

    def _dispatch(
        self,
        superstep: int,
        targets: list[str],
        inbox: dict[str, list[Any]],
        *,
        want_snapshot: bool,
        reports: dict[str, StepReport],
        on_answer: Callable[[str, bytes, int], None] | None,
        on_sent: Callable[[], None] | None,
        given: dict[str, BaseException] | None = None,
    ) -> list[StepFailure]:
        telemetry, hosts = self._telemetry, self._hosts
        outcomes: list[Outcome]
        if given is not None:
            outcomes = [(target, None, given[target]) for target in targets]
        else:
            futures: dict[str, HostFuture] = {}
            suffix, frame, attempts = self.request_suffix, self._effect_frame, self._attempts
            started = time.monotonic()
            for target in targets:
                request = StepRequest(
                    superstep,
                    inbox[target],
                    want_snapshot,
                    suffix,
                    telemetry.step_frame(target),
                    attempts.frame(frame, target, superstep),
                )
                futures[target] = hosts.call(target, "step", request.packed())
            if self._local_hosts is None:
                self._local_hosts = group_wait(futures.values()) is None
            if on_sent is not None:
                on_sent()
            outcomes = collect(futures, self.spec.timeouts, started, on_answer, self._stopping)
        failures: list[StepFailure] = []
        abandoned: list[str] = []
        for target, answer, error in outcomes:
            if error is not None:
                if isinstance(error, (TimedOut, Interrupted)):
                    hosts.hung(target)
                if isinstance(error, Interrupted):
                    abandoned.append(target)
                failures.append(StepFailure(target, error))
            else:
                assert answer is not None
                report = reports[target] = StepReport.unpacked(answer)
                telemetry.take_sends(report)
        if abandoned:
            # Cancelled with handlers that did not reach the barrier in time: the whole
            # superstep is rolled back by the caller, the stuck hosts replaced.
            raise RunCancelled(
                f"the run was cancelled in superstep {superstep} while {abandoned} were still "
                "in their handlers; they were abandoned and the superstep rolled back"
            )
        return failures


def _reason(error: BaseException) -> str:
    """Why a superstep failed, for its rollback event."""
    cause = error.__cause__ if isinstance(error, RunFailed) and error.__cause__ else error
    return f"{qualname(type(cause))}: {error}"
