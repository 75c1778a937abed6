"""The cuts a driver writes: its consistent state at barriers, and finished parts.

A :class:`CutWriter` turns the driver's state at a barrier into a checkpoint
through its :class:`~actorflow.runtime.checkpoints._checkpointing.Checkpointer`, persists the
finished part of each executor while a superstep with sync durability is still
under way, and hands a crashed superstep's persisted parts back when the session
resumes. Supervisor thread only.
"""

from __future__ import annotations

import time
from typing import Any

import actorflow.runtime._events as ev
from actorflow.errors import CheckpointWriteFailed, ExecutorFailed, RunFailed
from actorflow.runtime._logging import Log
from actorflow.runtime._pace import PACE
from actorflow.runtime._policy import Durability
from actorflow.runtime._wire import StepReport, unpack
from actorflow.runtime.checkpoints import Checkpointer, RunState
from actorflow.runtime.telemetry import Telemetry

from ._failures import qualname
from ._history import HistoryLog
from ._hosts import Hosts
from ._job import RunJob
from ._journals import Journals
from ._last_good import LastGood

__all__ = ["CutWriter", "Parts"]

Parts = dict[str, tuple[list[Any], list[str]]]
"""Executor -> (report, snapshot digests) of a superstep's persisted finished parts."""


class CutWriter:
    """Writes one session's cuts to its store."""

    def __init__(
        self,
        checkpointer: Checkpointer,
        hosts: Hosts,
        last: LastGood,
        history: HistoryLog,
        journals: Journals,
        *,
        log: Log,
    ) -> None:
        self.checkpointer = checkpointer
        self._hosts = hosts
        self._last = last
        self._history = history
        self._journals = journals
        self._log = log
        self.completed: Parts = {}
        """The finished parts of the superstep a crashed process was running (resume)."""
        self.unwritten = False
        """The cut of the last barrier is still to be written: it is, as the next
        superstep starts (a store that lives in this process, see Checkpointer.overlaps)."""

    def due(self, superstep: int) -> bool:
        """Whether the barrier after ``superstep`` is checkpointed."""
        return self.checkpointer.due(superstep)

    def persists_parts(self, targets: list[str]) -> bool:
        """Whether each executor's finished part is persisted as it arrives: with sync
        durability, so a crash mid-superstep re-runs only the unfinished executors."""
        return self.checkpointer.policy.durability is Durability.SYNC and len(targets) > 1

    def may_defer(self, state: RunState) -> bool:
        """Whether the barrier's cut may be written while the next superstep starts:
        messages are in flight, the store overlaps, and every snapshot is in hand
        (asking a host for one would queue behind the next superstep and return its
        state after that superstep)."""
        return bool(state.inbox) and self.checkpointer.overlaps and not self._last.dirty

    def may_halt(self) -> bool:
        """Whether a ``halt`` cut can be written now without asking a host for its state:
        every executor's state at the barrier is in hand."""
        return not self._last.dirty

    def write(self, job: RunJob, kind: str, state: RunState, telemetry: Telemetry) -> None:
        """Write the ``kind`` cut of ``state``.

        Raises:
            ExecutorFailed: a snapshot the cut needs could not be taken.
            CheckpointWriteFailed: the store refused the cut (the run stops).
        """
        telemetry.checkpoint(kind, state.superstep, lambda: self._write(job, kind, state))

    def write_unwritten(
        self,
        job: RunJob,
        state: RunState,
        telemetry: Telemetry,
        barrier_inbox: dict[str, list[Any]] | None = None,
    ) -> None:
        """Write the last barrier's cut; ``barrier_inbox``: its in-flight messages, when
        the next superstep already took them out of the state."""
        self.unwritten = False
        if barrier_inbox is None:
            self.write(job, "step", state, telemetry)
            return
        running, state.inbox = state.inbox, barrier_inbox
        try:
            self.write(job, "step", state, telemetry)
        finally:
            state.inbox = running

    def write_first(
        self, job: RunJob, kind: str, state: RunState, start: str, telemetry: Telemetry
    ) -> None:
        """The ``entry`` / ``response`` cut; if it cannot be written, the input is unqueued."""
        try:
            self.write(job, kind, state, telemetry)
        except RunFailed:
            if kind == "entry":
                # A run not accepted durably was not accepted at all (LangGraph #8764).
                queued = state.inbox[start]
                queued.pop()
                if not queued:
                    del state.inbox[start]
            raise

    def _write(self, job: RunJob, kind: str, state: RunState) -> None:
        checkpointer, last = self.checkpointer, self._last
        if last.dirty:
            for target in sorted(last.dirty):
                try:
                    with PACE.released():  # waits on the host's snapshot()
                        snapshot = unpack(self._hosts.call(target, "snapshot", b"").get(timeout=60))
                except Exception as exc:
                    # As when a snapshot taken with a superstep fails: the run fails,
                    # with a RunFailedEvent, naming the executor and the cause.
                    raise ExecutorFailed(
                        f"executor {target!r} could not snapshot its state for the {kind} "
                        f"checkpoint after superstep {state.superstep}: "
                        f"{qualname(type(exc))}: {exc}; fix its snapshot() (or its state, "
                        "which must be encodable)",
                        executor=target,
                        error_type=qualname(type(exc)),
                        run_id=job.run_id,
                        superstep=state.superstep,
                    ) from exc
                last.remember(target, snapshot)
        history = self._history.take()
        effects, statements = self._journals.take()
        try:
            checkpoint_id = checkpointer.write(
                kind=kind,
                superstep=state.superstep,
                state=state,
                snapshots=last.digests,
                chunks=last.chunks,
                metadata=job.metadata,
                history=history,
                next_seq=self._history.next_seq,
                effects=effects,
                statements=statements,
            )
            if kind in ("final", "halt"):
                checkpointer.flush()  # a run is reported ended only once that is durable
        except Exception as exc:
            # Nothing of it was stored: the next cut carries these entries, after those
            # of earlier cuts a background write lost (older numbers first).
            self._history.put_back(checkpointer.unwritten() + history)
            lost_effects, lost_statements = checkpointer.unwritten_journal()
            self._journals.put_back(lost_effects + effects, lost_statements + statements)
            self._log.error(
                f"checkpoint write failed after superstep {state.superstep}: "
                f"{qualname(type(exc))}: {exc}; stopping the run",
                superstep=state.superstep,
                error=str(exc),
            )
            job.emit(
                ev.CheckpointFailedEvent(
                    job.run_id, state.superstep, time.time(), qualname(type(exc)), str(exc)
                )
            )
            raise CheckpointWriteFailed(
                f"checkpoint after superstep {state.superstep} could not be written: {exc}; "
                "the run stopped rather than continue unsaved",
                run_id=job.run_id,
                superstep=state.superstep,
            ) from exc
        job.emit(
            ev.CheckpointedEvent(
                job.run_id, state.superstep, time.time(), checkpoint_id, kind, checkpointer.queued
            )
        )

    def write_part(self, job: RunJob, superstep: int, target: str, answer: bytes) -> None:
        """Persist ``target``'s finished part of ``superstep`` (its report, ``answer``).

        Raises:
            CheckpointWriteFailed: the store refused it (the run stops).
        """
        report = StepReport.unpacked(answer)
        if report.snapshot is None:
            return
        chunks = [(d, c if c is not None else self._last.chunks.get(d)) for d, c in report.snapshot]
        try:
            self.checkpointer.write_partial(
                superstep,
                target,
                [
                    report.sends,
                    report.outputs,
                    report.requests,
                    report.effects or [],
                    report.statements or [],
                ],
                chunks,
            )
        except Exception as exc:
            job.emit(
                ev.CheckpointFailedEvent(
                    job.run_id, superstep, time.time(), qualname(type(exc)), str(exc)
                )
            )
            raise CheckpointWriteFailed(
                f"the finished part of {target!r} in superstep {superstep} could not be "
                f"persisted: {exc}; the run stopped rather than continue unsaved",
                run_id=job.run_id,
                superstep=superstep,
            ) from exc

    def take_completed(
        self, superstep: int, targets: list[str], state: RunState
    ) -> dict[str, StepReport]:
        """The parts of ``superstep`` a crashed process already finished and persisted,
        as reports; their executors' hosts now hold the state each part stored."""
        completed, self.completed = self.completed, {}
        reports: dict[str, StepReport] = {}
        for target, (report, digests) in completed.items():
            if target not in targets or superstep != state.superstep + 1:
                continue
            self._hosts.load_state(target, [(d, None) for d in digests])
            sends, outputs, requests, effects, statements = report
            # A persisted part keeps no drops: they are reported by the run that made them.
            reports[target] = StepReport(
                sends,
                outputs,
                requests,
                [[d, None] for d in digests],
                None,
                None,
                effects or None,
                statements or None,
            )
        return reports
