"""The supervisor's recovery steps: restarting a failed executor, rolling back a superstep.

A mixin of :class:`~._supervisor.Driver`, kept apart because it is one concern:
putting executors back to their last good state (the last barrier's snapshot)
after a handler raised, timed out or its actor died, or after a superstep failed
as a whole. Supervisor thread only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pykka

import actorflow.runtime._events as ev
from actorflow.actors import HostFuture, HostPool, HostRef
from actorflow.errors import ExecutorFailed, RunCancelled, UnroutableMessage, _UnroutableRunFailure
from actorflow.runtime._logging import Log
from actorflow.runtime._pace import unpaced
from actorflow.runtime._policy import Restarts
from actorflow.runtime._wire import pack, restore_digests

from ._barrier import TimedOut
from ._cuts import qualname
from ._job import RunJob
from ._last_good import LastGood

__all__ = ["RecoverySteps", "StepFailure"]


class StepFailure(Exception):
    """One executor's part of a superstep failed: which one, and with what."""

    def __init__(self, executor: str, error: BaseException) -> None:
        super().__init__(executor)
        self.executor = executor
        self.error = error


class RecoverySteps:
    """Recovery for the driver (which provides the attributes declared here)."""

    hosts: dict[str, HostRef]
    pool: HostPool
    broken: str | None
    _last: LastGood
    _restarts: Restarts
    _keep_state: bool
    _hung: set[str]
    _unloaded: set[str]
    _unrestored: dict[str, list[tuple[str, bytes | None]]]
    _log: Log

    if TYPE_CHECKING:

        def _call(self, target: str, method: str, payload: bytes) -> HostFuture: ...

    @unpaced  # waits on a backoff, new hosts and restores
    def _recover(self, job: RunJob, superstep: int, failure: StepFailure) -> None:
        target, error = failure.executor, failure.error
        now = time.time()
        job.emit(
            ev.ExecutorFailedEvent(
                job.run_id, superstep, now, target, qualname(type(error)), str(error)
            )
        )
        decision = self._restarts.decide(target, error, self._last.knows(target), time.monotonic())
        if isinstance(decision, str):
            # An unroutable send fails the run as both ExecutorFailed and UnroutableMessage.
            failed = (
                _UnroutableRunFailure if isinstance(error, UnroutableMessage) else ExecutorFailed
            )
            raise failed(
                f"executor {target!r} failed in superstep {superstep} of run {job.run_id}: "
                f"{qualname(type(error))}: {error}; {decision}",
                executor=target,
                error_type=qualname(type(error)),
                run_id=job.run_id,
                superstep=superstep,
            ) from error
        policy, attempt = decision
        delay = policy.backoff.delay(attempt)
        replace = (
            isinstance(error, (TimedOut, pykka.ActorDeadError)) or not self.hosts[target].alive
        )
        # The message itself says what happened and what is done about it: a plain
        # ``logging.basicConfig`` shows only the message, never the structured fields.
        self._log.warning(
            f"restarting executor {target!r} (attempt {attempt}): it failed in superstep "
            f"{superstep} with {qualname(type(error))}: {error}; "
            + ("replacing its actor, " if replace else "")
            + f"restoring its last good state and running superstep {superstep} again"
            + (f" after {delay:g} s" if delay > 0 else ""),
            run=job.run_id,
            superstep=superstep,
            executor=target,
            attempt=attempt,
            error=f"{qualname(type(error))}: {error}",
        )
        if delay > 0 and job.cancel.wait(delay):
            raise RunCancelled(f"run {job.run_id} was cancelled while restarting {target!r}")
        if replace:
            self._replace_host(target)
        self._load_state(target, self._last.snapshot_of(target))
        job.emit(
            ev.RunRestartedEvent(
                job.run_id,
                superstep,
                time.time(),
                target,
                attempt,
                qualname(type(error)),
                str(error),
            )
        )

    @unpaced  # waits on new hosts and restores
    def _roll_back(self, targets: list[str], superstep: int, *, cancelled: bool = False) -> None:
        """Restore ``targets`` to their state at the last barrier, or mark the driver broken."""
        if not (self._keep_state and self._last.exact(targets)):
            what = "was interrupted by a cancel" if cancelled else "failed"
            self.broken = (
                f"superstep {superstep} {what} and the state before it was never snapshotted "
                "(no store checkpointing every superstep, no restart policy)"
            )
            return
        try:
            for target in targets:
                if target in self._unrestored:
                    continue  # it never ran since the resume: its host holds nothing yet
                if target in self._hung or not self.hosts[target].alive:
                    self._replace_host(target)
                self._load_state(target, self._last.snapshot_of(target))
        except Exception as exc:  # noqa: BLE001 - a failed rollback leaves the session broken
            self.broken = f"rolling back superstep {superstep} failed: {exc}"

    def _replace_host(self, target: str) -> None:
        # A hung handler cannot be killed in Python: the old host is abandoned
        # (stopped without waiting; a process backend kills it) and its late answer
        # goes to a future nobody reads.
        self.pool.forget(self.hosts[target])
        self.hosts[target] = self.pool.acquire([target])[0]
        self._unloaded.add(target)
        self._hung.discard(target)

    @unpaced  # waits on the host's restore()
    def _load_state(self, target: str, chunks: list[tuple[str, bytes | None]]) -> None:
        self._call(target, "restore", self._restore_request(chunks)).get(timeout=60)

    def _restore_request(self, chunks: list[tuple[str, bytes | None]]) -> bytes:
        # The digests travel along: the runner then never re-hashes or re-sends a
        # chunk this driver (or the store) already holds.
        return pack([restore_digests([d for d, _ in chunks]), *self._last.resolve(chunks)])
