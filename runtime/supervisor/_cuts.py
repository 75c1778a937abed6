"""The supervisor's checkpoint steps: cuts at barriers, and finished parts of a superstep.

A mixin of :class:`~._supervisor.Driver`, kept apart because it is one concern:
turning the driver's consistent state into records in the store, and reading a
crashed superstep's finished parts back. Supervisor thread only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import actorflow.runtime._events as ev
from actorflow.actors import HostFuture
from actorflow.errors import CheckpointWriteFailed, ExecutorFailed, RunFailed
from actorflow.runtime._checkpointing import Checkpointer
from actorflow.runtime._graph import GraphSpec
from actorflow.runtime._logging import Log
from actorflow.runtime._otel import RunTelemetry
from actorflow.runtime._pace import PACE
from actorflow.runtime._state import RunState
from actorflow.runtime._wire import unpack

from ._job import RunJob
from ._last_good import LastGood

__all__ = ["CheckpointSteps", "qualname"]


def qualname(tp: type) -> str:
    """A type's name for events and messages (module-qualified unless builtin)."""
    return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"


class CheckpointSteps:
    """Checkpoint writing for the driver (which provides the attributes declared here)."""

    spec: GraphSpec
    state: RunState
    checkpointer: Checkpointer | None
    completed: dict[str, tuple[list[Any], list[str]]]
    _unrestored: dict[str, list[tuple[str, bytes | None]]]
    _last: LastGood
    _log: Log
    _trace: RunTelemetry | None

    if TYPE_CHECKING:

        def _call(self, target: str, method: str, payload: bytes) -> HostFuture: ...

        def _load_state(self, target: str, chunks: list[tuple[str, bytes | None]]) -> None: ...

    def _checkpoint(self, job: RunJob, kind: str) -> None:
        if self._trace is not None:
            assert self.checkpointer is not None
            self._trace.checkpoint(self._write_cut, kind, self.checkpointer, self.state.superstep)
        else:
            self._write_cut(job, kind)

    def _write_cut(self, job: RunJob, kind: str) -> None:
        checkpointer = self.checkpointer
        assert checkpointer is not None
        last, state = self._last, self.state
        if last.dirty:
            for target in sorted(last.dirty):
                try:
                    with PACE.released():  # waits on the host's snapshot()
                        snapshot = unpack(self._call(target, "snapshot", b"").get(timeout=60))
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
        try:
            checkpoint_id = checkpointer.write(
                kind=kind,
                superstep=state.superstep,
                state=state,
                snapshots=last.digests,
                chunks=last.chunks,
                metadata=job.metadata,
            )
            if kind == "final":
                checkpointer.flush()  # a run is reported complete only once it is durable
        except Exception as exc:
            self._log.error(
                f"checkpoint write failed after superstep {self.state.superstep}: "
                f"{qualname(type(exc))}: {exc}; stopping the run",
                superstep=self.state.superstep,
                error=str(exc),
            )
            job.emit(
                ev.CheckpointFailedEvent(
                    job.run_id, self.state.superstep, time.time(), qualname(type(exc)), str(exc)
                )
            )
            raise CheckpointWriteFailed(
                f"checkpoint after superstep {self.state.superstep} could not be written: {exc}; "
                "the run stopped rather than continue unsaved",
                run_id=job.run_id,
                superstep=self.state.superstep,
            ) from exc
        job.emit(
            ev.CheckpointedEvent(
                job.run_id, state.superstep, time.time(), checkpoint_id, kind, checkpointer.queued
            )
        )

    def _persist_partial(self, job: RunJob, superstep: int, target: str, answer: bytes) -> None:
        checkpointer = self.checkpointer
        assert checkpointer is not None
        sends, outputs, requests, snapshot = unpack(answer)[:4]  # a traced report has a 5th
        if snapshot is None:
            return
        chunks = [(d, c if c is not None else self._last.chunks.get(d)) for d, c in snapshot]
        try:
            checkpointer.write_partial(superstep, target, [sends, outputs, requests], chunks)
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

    def _completed_reports(self, superstep: int, targets: list[str]) -> dict[str, list[Any]]:
        """Parts of this superstep a crashed process already finished and persisted."""
        completed, self.completed = self.completed, {}
        reports: dict[str, list[Any]] = {}
        for target, (report, digests) in completed.items():
            if target not in targets or superstep != self.state.superstep + 1:
                continue
            chunks: list[tuple[str, bytes | None]] = [(d, None) for d in digests]
            self._load_state(target, chunks)
            # Its host now holds the state its part stored, which supersedes the cut's:
            # left due, the cut's state would be restored over it before its next step.
            self._unrestored.pop(target, None)
            reports[target] = [*report, [[d, None] for d in digests]]
        return reports

    def _checkpoint_first(self, job: RunJob, kind: str) -> None:
        """The ``entry`` / ``response`` cut; if it cannot be written, the input is unqueued."""
        try:
            self._checkpoint(job, kind)
        except RunFailed:
            if kind == "entry":
                # A run not accepted durably was not accepted at all (LangGraph #8764).
                queued = self.state.inbox[self.spec.start]
                queued.pop()
                if not queued:
                    del self.state.inbox[self.spec.start]
            raise
