"""The executor hosts a driver holds: borrowed, loaded, called, restored, given back.

A :class:`Hosts` borrows one host per executor from the pool, loads each
executor's program lazily by its first call, restores a resumed executor's stored
snapshot before it first runs, replaces a host that died or hung, and unloads and
returns (or abandons) them at the end. Supervisor thread only.
"""

from __future__ import annotations

from collections.abc import Callable

from actorflow.actors import HostedFactory, HostFuture, HostPool, HostRef, OnAnswer, relay_answer
from actorflow.errors import ExecutorFailed
from actorflow.runtime._graph import GraphSpec
from actorflow.runtime._pace import PACE, unpaced
from actorflow.runtime._wire import pack, restore_digests

from ._failures import qualname
from ._last_good import Chunks, LastGood

__all__ = ["HostWrapper", "Hosts"]

HostWrapper = Callable[[HostRef, HostedFactory], HostRef]
"""``wrapper(host, program)``: what calls to the host of one executor go through,
given the host and the program it runs for that executor."""


class Hosts:
    """One host per executor, and what each still owes (its program, its stored state)."""

    def __init__(
        self, spec: GraphSpec, pool: HostPool, last: LastGood, *, keep_state: bool
    ) -> None:
        self._spec = spec
        self._pool = pool
        self._last = last
        self._keep_state = keep_state
        """Whether every executor's blueprint is its last good state until it runs."""
        self._owned: dict[str, HostRef] = {}
        """Executor id -> the host borrowed from the pool."""
        self._through: dict[str, HostRef] = {}
        """Executor id -> what its calls go through: its host, or a wrapper of it."""
        self._wrappers: dict[str, list[HostWrapper]] = {}
        """Executor id -> its wrappers, innermost first."""
        self._unloaded: set[str] = set()
        """Executors whose host has yet to load their program (by their first call)."""
        self._unrestored: dict[str, Chunks] = {}
        """Executor id -> the stored snapshot its host has yet to restore (resumed, not run)."""
        self._hung: set[str] = set()
        """Executors whose host was abandoned mid-handler (timed out or cancelled)."""

    # --- borrowing ----------------------------------------------------------------

    def start(self, initial: dict[str, Chunks] | None = None) -> None:
        """Borrow hosts for every executor. Each loads its program with its first call,
        restoring its ``initial`` snapshot (when it has one) before it first runs."""
        ids = sorted(self._spec.programs)
        self._pool.backend.check(self._spec.programs)
        for eid, host in zip(ids, self._pool.acquire(ids), strict=True):
            self._own(eid, host)
        self._load_programs(ids, initial)

    def reload(self) -> None:
        """Have every executor's next call load a fresh program (an unrelated run)."""
        self._load_programs(sorted(self._owned), None)

    def wrap(self, executor: str, wrapper: HostWrapper) -> None:
        """Send every later call to ``executor``'s host through ``wrapper(host, program)``,
        on this host and on any that replaces it (testing tools: fault injection). A
        later wrapper wraps the earlier ones; a wrapper given again changes nothing."""
        if executor not in self._spec.programs:
            raise KeyError(f"no executor {executor!r} in workflow {self._spec.name!r}")
        wrappers = self._wrappers.setdefault(executor, [])
        if wrapper in wrappers:
            return
        wrappers.append(wrapper)
        through = self._through.get(executor)
        if through is not None:
            self._through[executor] = wrapper(through, self._spec.programs[executor])

    def _own(self, executor: str, host: HostRef) -> None:
        self._owned[executor] = host
        for wrapper in self._wrappers.get(executor, ()):
            host = wrapper(host, self._spec.programs[executor])
        self._through[executor] = host

    def _load_programs(self, ids: list[str], initial: dict[str, Chunks] | None) -> None:
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
                program = self._spec.programs[eid]
                self._last.remember(
                    eid, self._unrestored.get(eid) or list(program.blueprint_chunks)
                )

    # --- calling ------------------------------------------------------------------

    def call(self, target: str, method: str, payload: bytes) -> HostFuture:
        """Call ``target``'s program, loading it first if this host does not have it yet."""
        host = self._through[target]
        assert method == "restore" or target not in self._unrestored, "restore it first"
        if target in self._unloaded:
            self._unloaded.discard(target)
            return host.load_call(self._spec.programs[target], method, payload)
        return host.call(method, payload)

    def relay(self, target: str, method: str, payload: bytes, then: OnAnswer) -> None:
        """:meth:`call` whose answer goes to ``then`` (see ``HostRef.relay``)."""
        host = self._through[target]
        assert target not in self._unrestored, "restore it first"
        if target in self._unloaded:
            self._unloaded.discard(target)
            relay_answer(host.load_call(self._spec.programs[target], method, payload), then)
            return
        host.relay(method, payload, then)

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
            (t, self.call(t, "restore", self._restore_request(self._unrestored[t]))) for t in due
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

    def unrestored(self, target: str) -> bool:
        """Whether ``target`` has not run since the resume (its host holds no state yet)."""
        return target in self._unrestored

    @unpaced  # waits on the host's restore()
    def load_state(self, target: str, chunks: Chunks) -> None:
        """Put ``target``'s state back to ``chunks``; it is then due for nothing else."""
        self.call(target, "restore", self._restore_request(chunks)).get(timeout=60)
        # The state it now holds supersedes a stored one still due: left due, that one
        # would be restored over it before its next step.
        self._unrestored.pop(target, None)

    def _restore_request(self, chunks: Chunks) -> bytes:
        # The digests travel along: the runner then never re-hashes or re-sends a
        # chunk this driver (or the store) already holds.
        return pack([restore_digests([d for d, _ in chunks]), *self._last.resolve(chunks)])

    # --- failures -----------------------------------------------------------------

    def hung(self, target: str) -> None:
        """Note that ``target``'s host is stuck in a handler: it is never reused."""
        self._hung.add(target)

    def is_hung(self, target: str) -> bool:
        """Whether ``target``'s host was abandoned mid-handler."""
        return target in self._hung

    @property
    def any_hung(self) -> bool:
        """Whether some host was abandoned mid-handler."""
        return bool(self._hung)

    def alive(self, target: str) -> bool:
        """Whether ``target``'s host can still take calls."""
        return self._through[target].alive

    def replace(self, target: str) -> None:
        """Give ``target`` a new host, its next call loading the program again."""
        # A hung handler cannot be killed in Python: the old host is abandoned
        # (stopped without waiting; a process backend kills it) and its late answer
        # goes to a future nobody reads.
        self._pool.forget(self._owned[target])
        self._own(target, self._pool.acquire([target])[0])
        self._unloaded.add(target)
        self._hung.discard(target)

    # --- giving back --------------------------------------------------------------

    def release(self, *, wait: bool = True) -> None:
        """Unload every program and give the hosts back to the pool.

        With ``wait`` the programs (and their resources) are released when this
        returns; without (one-off runs), a pooled host keeps its finished program
        until its next borrower loads a fresh one over it.
        """
        owned, self._owned, self._through = self._owned, {}, {}
        self._unloaded = set()
        self._unrestored = {}
        # A host stuck in a hung handler is abandoned, never pooled: the next
        # borrower would wait behind the handler.
        for target in self._hung & set(owned):
            self._pool.forget(owned.pop(target))
        self._hung.clear()
        hosts = list(owned.values())
        if not wait:
            # The next borrower's first call replaces the program; until then the old
            # instance is unreachable from anywhere.
            self._pool.release(hosts)
            return
        unloads = [host.unload() for host in hosts]
        healthy: list[HostRef] = []
        for host, future in zip(hosts, unloads, strict=True):
            try:
                future.get(timeout=30)
                healthy.append(host)
            except Exception:  # noqa: BLE001 - a host that cannot unload is stopped, not reused
                self._pool.forget(host)
        self._pool.release(healthy)
