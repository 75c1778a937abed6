"""Recovery: restarting a failed executor, rolling back a failed superstep.

:class:`Recovery` puts executors back to their last good state (the last
barrier's snapshot) after a handler raised, timed out or its actor died, or after
a superstep failed as a whole. It owns the restart counters; it acts on the hosts
and reads the last good states it is given. Supervisor thread only.
"""

from __future__ import annotations

import time

import pykka

import actorflow.runtime._events as ev
from actorflow.errors import (
    ExecutorFailed,
    MessageDropped,
    RunCancelled,
    UnroutableMessage,
    _DroppedRunFailure,
    _UnroutableRunFailure,
)
from actorflow.runtime._logging import Log
from actorflow.runtime._pace import unpaced
from actorflow.runtime._policy import RestartPolicy, Restarts

from ._barrier import TimedOut
from ._failures import StepFailure, error_type_of, qualname, short_traceback
from ._hosts import Hosts
from ._job import RunJob
from ._last_good import LastGood

__all__ = ["Recovery"]


class Recovery:
    """Restarts and rollbacks of one driver's executors."""

    def __init__(
        self,
        hosts: Hosts,
        last: LastGood,
        restart: RestartPolicy | None,
        restart_overrides: dict[str, RestartPolicy],
        *,
        keep_state: bool,
        log: Log,
    ) -> None:
        self._hosts = hosts
        self._last = last
        self._restarts = Restarts(restart, restart_overrides)
        self._keep_state = keep_state
        self._log = log

    @property
    def active(self) -> bool:
        """Whether a restart policy applies to some executor (its state is then kept)."""
        return self._restarts.active

    def renew(self, log: Log) -> None:
        """Start over for an unrelated run: no restart counted yet, logging as ``log``."""
        self._restarts.reset()
        self._log = log

    @unpaced  # waits on a backoff, new hosts and restores
    def recover(self, job: RunJob, superstep: int, failure: StepFailure) -> None:
        """Restore ``failure.executor`` to its last good state, to run the superstep again.

        Raises:
            ExecutorFailed: the restart policy gives up (the run fails, cause chained).
            RunCancelled: the run was cancelled during the backoff.
        """
        target, error = failure.executor, failure.error
        error_type = error_type_of(error)
        now = time.time()
        job.emit(
            ev.ExecutorFailedEvent(
                job.run_id,
                superstep,
                now,
                target,
                error_type,
                str(error),
                short_traceback(error),
            )
        )
        decision = self._restarts.decide(target, error, self._last.knows(target), time.monotonic())
        if isinstance(decision, str):
            # An unroutable send fails the run as both ExecutorFailed and UnroutableMessage.
            failed: type[ExecutorFailed] = ExecutorFailed
            if isinstance(error, MessageDropped):
                failed = _DroppedRunFailure
            elif isinstance(error, UnroutableMessage):
                failed = _UnroutableRunFailure
            said = f"{error_type}: {error}"
            if error_type != qualname(type(error)):
                said = f"a run it ran failed ({error})"
            raise failed(
                f"executor {target!r} failed in superstep {superstep} of run {job.run_id}: "
                f"{said}; {decision}",
                executor=target,
                error_type=error_type,
                run_id=job.run_id,
                superstep=superstep,
            ) from error
        policy, attempt = decision
        delay = policy.backoff.delay(attempt)
        replace = isinstance(error, (TimedOut, pykka.ActorDeadError)) or not self._hosts.alive(
            target
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
            self._hosts.replace(target)
        self._hosts.load_state(target, self._last.snapshot_of(target))
        job.emit(
            ev.RunRestartedEvent(
                job.run_id,
                superstep,
                time.time(),
                target,
                attempt,
                qualname(type(error)),
                str(error),
                delay,
            )
        )

    @unpaced  # waits on new hosts and restores
    def roll_back(
        self, targets: list[str], superstep: int, *, cancelled: bool = False
    ) -> str | None:
        """Restore ``targets`` to their state at the last barrier.

        Returns:
            None, or why the driver cannot run again (the state before the superstep
            was never snapshotted, or restoring it failed).
        """
        if not (self._keep_state and self._last.exact(targets)):
            what = "was interrupted by a cancel" if cancelled else "failed"
            return (
                f"superstep {superstep} {what} and the state before it was never snapshotted "
                "(no store checkpointing every superstep, no restart policy)"
            )
        hosts = self._hosts
        try:
            for target in targets:
                if hosts.unrestored(target):
                    continue  # it never ran since the resume: its host holds nothing yet
                if hosts.is_hung(target) or not hosts.alive(target):
                    hosts.replace(target)
                hosts.load_state(target, self._last.snapshot_of(target))
        except Exception as exc:  # noqa: BLE001 - a failed rollback leaves the session broken
            return f"rolling back superstep {superstep} failed: {exc}"
        return None
