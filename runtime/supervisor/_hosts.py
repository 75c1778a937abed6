"""The supervisor's host steps: borrowing hosts, loading programs, calling, giving back.

A mixin of :class:`~._supervisor.Driver`, kept apart because it is one concern:
the executor hosts a driver holds (borrowed from the pool, renewed for an
unrelated run when nothing ties them to the last one, each executor's
program loaded lazily by its first call, restored from its stored snapshot
before it first runs when a session resumes, unloaded and returned or abandoned
at the end). Supervisor thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actorflow.actors import HostFuture, HostPool, HostRef
from actorflow.errors import ExecutorFailed
from actorflow.runtime._checkpointing import Checkpointer
from actorflow.runtime._graph import GraphSpec
from actorflow.runtime._logging import Log, get_logger
from actorflow.runtime._pace import PACE
from actorflow.runtime._policy import Restarts
from actorflow.runtime._state import RunState

from ._cuts import qualname
from ._job import Fault
from ._last_good import LastGood

__all__ = ["HostSteps"]

_log = get_logger("actorflow.supervisor")  # the driver's logger: one name for the supervisor


class HostSteps:
    """Host handling for the driver (which provides the attributes declared here)."""

    spec: GraphSpec
    pool: HostPool
    session: str
    state: RunState
    hosts: dict[str, HostRef]
    faults: dict[tuple[str, int], Fault]
    completed: dict[str, tuple[list[Any], list[str]]]
    checkpointer: Checkpointer | None
    broken: str | None
    _restarts: Restarts
    _log: Log
    _last: LastGood
    _keep_state: bool
    _hung: set[str]
    _unloaded: set[str]
    _unrestored: dict[str, list[tuple[str, bytes | None]]]
    """Executor id -> the stored snapshot its host has yet to restore (resumed, not run)."""

    if TYPE_CHECKING:

        def _restore_request(self, chunks: list[tuple[str, bytes | None]]) -> bytes: ...

    def renew(self, session: str) -> None:
        """Start over on the same hosts, for an unrelated run (a recycled one-off session).

        Nothing of the last run survives: in-flight state, restart counters, last good
        states and injected faults are dropped, and each executor's next call reloads
        its program, so every run gets fresh instances built from the blueprints.

        The one call not made on the supervisor thread: its owner calls it between
        runs, while no job is queued, and the next job, queued after it through the
        actor's inbox, sees every write.
        """
        assert self.reusable, "only a driver without store, failure or hung host is renewed"
        self.session = session
        self.state = RunState()
        self.faults.clear()
        self.completed.clear()
        self._restarts.reset()
        self._last = LastGood(None)
        self.broken = None
        self._log = _log.bind(workflow=self.spec.name, session=session)
        self._load_programs(sorted(self.hosts), None)

    @property
    def reusable(self) -> bool:
        """Whether :meth:`renew` may hand these hosts to an unrelated run: no store
        (its lineage is the session's), nothing broken, no host abandoned mid-handler."""
        return self.checkpointer is None and self.broken is None and not self._hung

    def start_hosts(self, initial: dict[str, list[tuple[str, bytes | None]]] | None = None) -> None:
        """Borrow hosts for every executor. Each loads its program with its first call,
        restoring its ``initial`` snapshot (when it has one) before it first runs."""
        ids = sorted(self.spec.programs)
        self.pool.backend.check(self.spec.programs)
        hosts = self.pool.acquire(ids)
        self.hosts = dict(zip(ids, hosts, strict=True))
        self._load_programs(ids, initial)

    def _load_programs(
        self, ids: list[str], initial: dict[str, list[tuple[str, bytes | None]]] | None
    ) -> None:
        # A program is loaded by the first call its host gets in this run (one round
        # trip for both), so executors a run never reaches cost nothing; a resumed
        # one's state is decoded only when it first runs (resume checked that it fits).
        self._unloaded = set(ids)
        self._unrestored = {eid: initial[eid] for eid in ids if initial and eid in initial}
        if self._unrestored:
            self._last.prefetch(
                [d for chunks in self._unrestored.values() for d, c in chunks if c is None]
            )
        if self._keep_state:
            for eid in ids:
                program = self.spec.programs[eid]
                self._last.remember(
                    eid, self._unrestored.get(eid) or list(program.blueprint_chunks)
                )

    def restore_due(self, targets: list[str], run_id: str, superstep: int) -> None:
        """Restore the stored states of those ``targets`` that have not run since the
        session resumed (all at once: hosts on other processes restore in parallel).

        Raises:
            ExecutorFailed: a host could not restore its state (the cause chained); it
                stays due, and nothing of the superstep has run.
        """
        if not self._unrestored:
            return  # every superstep but the first few after a resume
        due = [t for t in targets if t in self._unrestored]
        futures = [
            (t, self._call(t, "restore", self._restore_request(self._unrestored[t]))) for t in due
        ]
        for target, future in futures:
            try:
                with PACE.released():  # waits on the host's restore()
                    future.get(timeout=60)
            except Exception as exc:
                raise ExecutorFailed(
                    f"executor {target!r} could not restore its stored state: "
                    f"{qualname(type(exc))}: {exc}",
                    executor=target,
                    error_type=qualname(type(exc)),
                    run_id=run_id,
                    superstep=superstep,
                ) from exc
            del self._unrestored[target]

    def _call(self, target: str, method: str, payload: bytes) -> HostFuture:
        """Call ``target``'s program, loading it first if this host does not have it yet."""
        host = self.hosts[target]
        assert method == "restore" or target not in self._unrestored, "restore it first"
        if target in self._unloaded:
            self._unloaded.discard(target)
            return host.load_call(self.spec.programs[target], method, payload)
        return host.call(method, payload)

    def release_hosts(self, *, wait: bool = True) -> None:
        """Unload every program and give the hosts back to the pool.

        With ``wait`` the programs (and their resources) are released when this
        returns; without (one-off runs), a pooled host keeps its finished program
        until its next borrower loads a fresh one over it.
        """
        owned, self.hosts = self.hosts, {}
        self._unloaded = set()
        self._unrestored = {}
        # A host stuck in a hung handler is abandoned, never pooled: the next
        # borrower would wait behind the handler.
        for target in self._hung & set(owned):
            self.pool.forget(owned.pop(target))
        self._hung.clear()
        hosts = list(owned.values())
        if not wait:
            # The next borrower's first call replaces the program; until then the old
            # instance is unreachable from anywhere.
            self.pool.release(hosts)
            return
        unloads = [host.unload() for host in hosts]
        healthy: list[HostRef] = []
        for host, future in zip(hosts, unloads, strict=True):
            try:
                future.get(timeout=30)
                healthy.append(host)
            except Exception:  # noqa: BLE001 - a host that cannot unload is stopped, not reused
                self.pool.forget(host)
        self.pool.release(healthy)
