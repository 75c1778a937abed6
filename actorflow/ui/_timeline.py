"""A session's timeline: its runs, supersteps, failures, restarts, rollbacks, outputs,
requests and answers, in order, each with the checkpoint that holds it.

Built from the session's records alone: each record carries the history entries of
what happened since its lineage's previous cut (``Checkpoint.history``, the entries
``store.session_history`` returns), so one listing gives both the supersteps and the
history, and they cannot disagree. Values are decoded by the safe decoder; an entry
that cannot be read is shown as an error in its place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import actorflow.runtime as rt
from actorflow.errors import ActorflowError
from actorflow.storage import Checkpoint, CheckpointKind, HistoryEntry

from ._values import decoded_or_note, failure, show

__all__ = ["LIMIT", "Failure", "Item", "RunView", "Timeline", "timeline"]

LIMIT = 500
"""Newest items shown in a timeline (the runs table covers every run)."""

_CUT_TITLES = {
    CheckpointKind.ENTRY: "entry checkpoint: the input is queued",
    CheckpointKind.STEP: "checkpoint after superstep {n}",
    CheckpointKind.RESPONSE: "response checkpoint: answers are queued",
    CheckpointKind.FINAL: "final checkpoint after superstep {n}: the run went idle",
    CheckpointKind.HALT: "halt checkpoint: the run ended in superstep {n}",
    CheckpointKind.PARTIAL: "partial record of superstep {n} (its barrier was not reached)",
}


@dataclass
class Item:
    """One line of the timeline."""

    kind: str
    """A history kind (``run_started``, ``executor_failed``, ...), ``checkpoint`` or
    ``unreadable`` (an entry that cannot be read)."""
    title: str
    time: float
    checkpoint_id: str
    """The record that holds it (for ``checkpoint``: the record itself)."""
    detail: str = ""
    """A value or a reason, as text."""
    traceback: str = ""
    run_id: str = ""
    superstep: int | None = None
    seq: int | None = None


@dataclass
class Failure:
    """Why a run failed."""

    run_id: str
    executor: str
    error_type: str
    error: str
    """The executor's own error (its last failure in the run), else the run's."""
    summary: str
    """The run's failure as the runtime reported it (policy and restarts included)."""
    restarts: int
    """Restarts the run used before it gave up."""
    traceback: str
    """The last frames of the executor's last failure in the run ('' if none was kept)."""
    checkpoint_id: str
    """The halt checkpoint that holds the failure."""
    time: float


@dataclass
class RunView:
    """One run of the session, as its history tells it."""

    run_id: str
    started: float
    input: str
    """The input as text ('' for a run without one)."""
    has_input: bool
    status: str = "unfinished"
    """completed, waiting (idle with pending requests), failed, cancelled, or
    unfinished (no end was recorded: running, or its process stopped)."""
    outputs: list[str] = field(default_factory=list)
    restarts: int = 0
    failure: Failure | None = None
    first_checkpoint: str = ""
    last_checkpoint: str = ""


@dataclass
class Timeline:
    """A session's timeline and runs."""

    items: list[Item]
    """Oldest first, the newest :data:`LIMIT` of them."""
    runs: list[RunView]
    """Oldest first."""
    hidden: int
    """Older items not shown."""
    errors: list[str]

    @property
    def failure(self) -> Failure | None:
        """Why the newest run failed, if it did."""
        return self.runs[-1].failure if self.runs else None


def _status(status: rt.RunStatus) -> str:
    return {
        rt.RunStatus.COMPLETED: "completed",
        rt.RunStatus.IDLE_WITH_PENDING_REQUESTS: "waiting",
        rt.RunStatus.FAILED: "failed",
        rt.RunStatus.CANCELLED: "cancelled",
    }[status]


class _Builder:
    """Walks the records once, oldest first, and keeps the runs it meets."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.runs: dict[str, RunView] = {}
        self.errors: list[str] = []
        self.last_failure: dict[tuple[str, str], rt.ExecutorFailedEvent] = {}
        """(run, executor) -> its newest failure."""

    def run_of(self, event: rt.Event, checkpoint_id: str) -> RunView:
        run = self.runs.get(event.run_id)
        if run is None:  # its start is older than what is stored (retention)
            run = RunView(event.run_id, event.time, "", has_input=False)
            self.runs[event.run_id] = run
        if not run.first_checkpoint:
            run.first_checkpoint = checkpoint_id
        run.last_checkpoint = checkpoint_id
        return run

    def entry(self, entry: HistoryEntry) -> None:
        cid = entry.checkpoint_id
        try:
            event = rt.event_of(entry, decode_value=decoded_or_note)
        except ActorflowError as exc:
            self.errors.append(f"history entry {entry.seq} of {cid}: {failure(exc)}")
            self.items.append(
                Item(
                    "unreadable",
                    f"entry {entry.seq} ({entry.kind}) cannot be read",
                    entry.time,
                    cid,
                    detail=failure(exc),
                    seq=entry.seq,
                )
            )
            return
        item = Item(
            entry.kind,
            "",
            event.time,
            cid,
            run_id=event.run_id,
            superstep=event.superstep,
            seq=event.seq,
        )
        if isinstance(event, rt.RunStartedEvent):
            has_input = event.input is not None
            shown = show(event.input) if has_input else ""
            self.runs.setdefault(event.run_id, RunView(event.run_id, event.time, shown, has_input))
            item.title = "run started" + (" with its input" if has_input else " without input")
            item.detail = shown if has_input else "it continues what is in flight or queued"
        run = self.run_of(event, cid)
        if isinstance(event, rt.OutputEvent):
            run.outputs.append(show(event.value))
            item.title = f"output from {event.executor}"
            item.detail = run.outputs[-1]
        elif isinstance(event, rt.RequestEvent):
            item.title = (
                f"{event.executor} asks {event.request_id} (answer type {event.response_type})"
            )
            item.detail = show(event.value)
        elif isinstance(event, rt.RequestAnsweredEvent):
            item.title = f"answer to {event.request_id} queued for {event.executor}"
            item.detail = show(event.value)
        elif isinstance(event, rt.ExecutorFailedEvent):
            item.title = f"{event.executor} failed: {event.error_type}: {event.error}"
            item.traceback = event.traceback
            self.last_failure[(event.run_id, event.executor)] = event
        elif isinstance(event, rt.RunRestartedEvent):
            run.restarts += 1
            item.title = f"restart {event.attempt} of {event.executor}"
            item.detail = f"after {event.error_type}: {event.error}; backoff {event.backoff:.3g} s"
        elif isinstance(event, rt.SuperstepRolledBackEvent):
            item.title = f"superstep {event.superstep} rolled back ({', '.join(event.executors)})"
            item.detail = event.reason
        elif isinstance(event, rt.RunCompletedEvent):
            run.status = _status(event.status)
            item.title = "run waiting for answers" if run.status == "waiting" else "run completed"
        elif isinstance(event, rt.RunFailedEvent):
            run.status = "failed"
            executor = event.executor or ""
            cause = self.last_failure.get((event.run_id, executor))
            run.failure = Failure(
                event.run_id,
                executor,
                cause.error_type if cause else event.error_type,
                cause.error if cause else event.error,
                event.error,
                run.restarts,
                cause.traceback if cause else "",
                cid,
                event.time,
            )
            where = f"{executor}: " if executor else ""
            item.title = f"run failed: {where}{event.error_type}"
            item.detail = event.error
        elif isinstance(event, rt.RunCancelledEvent):
            run.status = "cancelled"
            item.title = "run cancelled"
        self.items.append(item)

    def checkpoint(self, cp: Checkpoint) -> None:
        title = _CUT_TITLES[cp.kind].format(n=cp.superstep)
        self.items.append(
            Item(
                "checkpoint",
                title,
                cp.created_at,
                cp.id,
                superstep=cp.superstep,
                detail=cp.kind.value,
            )
        )


def timeline(cps: list[Checkpoint]) -> Timeline:
    """The timeline of a session whose records, oldest first, are ``cps``: each
    record's history entries (by seq), then the record itself."""
    builder = _Builder()
    for cp in cps:
        for entry in sorted(cp.history, key=lambda e: e.seq):
            builder.entry(entry)
        builder.checkpoint(cp)
    hidden = max(0, len(builder.items) - LIMIT)
    runs = list(builder.runs.values())  # in the order each run first appears
    return Timeline(builder.items[hidden:], runs, hidden, builder.errors)
