"""What a workflow's sessions run on: the graph, the policies, the actor pools.

A :class:`~actorflow.Workflow` owns one :class:`Engine` and hands it to every
session it opens. Sessions take from it the graph spec, the restart policies,
the host pool of their backend and a supervisor actor, and give back what they
borrowed; an idle one-off session is kept warm in it for the next one-off run.
Sessions never see the workflow itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar

import pykka

from actorflow._forks import forget_in_children
from actorflow.actors import ActorBackend, HostPool
from actorflow.errors import SessionClosed
from actorflow.runtime._graph import GraphSpec
from actorflow.runtime._policy import RestartPolicy
from actorflow.runtime.supervisor import SupervisorActor

__all__ = ["Engine"]

MAX_WARM_SESSIONS = 8
"""Idle one-off sessions an engine keeps (each holds a supervisor and a host per executor)."""

_MAX_IDLE_SUPERVISORS = 16
"""Idle supervisor actors an engine keeps for its next sessions."""


class _Closable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=_Closable)
"""The sessions an engine keeps warm."""


class Engine(Generic[S]):
    """The graph, the policies and the warm actors of one workflow. Thread-safe.

    ``close()`` stops the pools, the idle supervisors and the warm sessions; sessions
    still open keep their actors until they close, and give back to a closed engine
    only to have them stopped.
    """

    def __init__(
        self,
        spec: GraphSpec,
        *,
        restart: RestartPolicy | None,
        restart_overrides: Mapping[str, RestartPolicy],
        backend: ActorBackend,
    ) -> None:
        self.spec = spec
        """The graph every session runs."""
        self.restart = restart
        """The restart policy of a session that names none."""
        self.restart_overrides = dict(restart_overrides)
        """Per-executor restart policies (``set_restart``); they apply in every session."""
        self.backend = backend
        """Where executors are hosted unless a session says otherwise."""
        self.pool = self._new_pool(backend)
        """The warm hosts of :attr:`backend`."""
        self._other_pools: list[tuple[ActorBackend, HostPool]] = []
        self._supervisors: list[pykka.ActorRef[SupervisorActor]] = []
        self._warm: list[S] = []
        self._lock = threading.Lock()
        self._closed = False
        forget_in_children(self)

    def forget_parent(self) -> None:
        """In a forked child (its only thread): the idle supervisors and warm sessions are
        the parent's, whose threads do not exist here (the host pools forget theirs)."""
        self._lock = threading.Lock()
        self._supervisors = []
        self._warm = []

    @property
    def name(self) -> str:
        """The workflow name."""
        return self.spec.name

    def check_open(self) -> None:
        """Raise :class:`SessionClosed` if the engine (its workflow) was closed."""
        if self._closed:
            raise SessionClosed(f"workflow {self.name!r} is closed; build it again")

    # --- actors ---------------------------------------------------------------------

    def pool_for(self, backend: ActorBackend | None) -> HostPool:
        """The pool of ``backend``'s hosts (:attr:`pool` for None), made on first use."""
        if backend is None or backend is self.backend:
            return self.pool
        with self._lock:
            for known, pool in self._other_pools:
                if known is backend:
                    return pool
            pool = self._new_pool(backend)
            self._other_pools.append((backend, pool))
            return pool

    def acquire_supervisor(self) -> pykka.ActorRef[SupervisorActor]:
        """An idle supervisor actor, or a new one (starting one takes a few hundred us)."""
        with self._lock:
            while self._supervisors:
                ref = self._supervisors.pop()
                if ref.is_alive():
                    return ref
        return SupervisorActor.start()

    def release_supervisor(self, ref: pykka.ActorRef[SupervisorActor]) -> None:
        """Take back a supervisor actor whose session is done with it (stopped if unwanted)."""
        with self._lock:
            if not self._closed and len(self._supervisors) < _MAX_IDLE_SUPERVISORS:
                self._supervisors.append(ref)
                return
        ref.stop(block=False)

    # --- warm sessions --------------------------------------------------------------

    def take_warm(self) -> S | None:
        """An idle one-off session kept by :meth:`keep_warm`, if any (the caller renews it)."""
        with self._lock:
            return self._warm.pop() if self._warm else None

    def keep_warm(self, session: S) -> bool:
        """Keep an idle one-off session for the next one-off run; False if there is no room.

        The caller hands over a session whose run completed cleanly; on False, it
        closes the session itself.
        """
        with self._lock:
            if not self._closed and len(self._warm) < MAX_WARM_SESSIONS:
                self._warm.append(session)
                return True
        return False

    # --- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Stop the warm sessions, the host pools and the idle supervisors."""
        with self._lock:
            self._closed = True
            supervisors, self._supervisors = self._supervisors, []
            warm, self._warm = self._warm, []
            others, self._other_pools = self._other_pools, []
        for session in warm:
            session.close()
        self.pool.close()
        for _backend, pool in others:
            pool.close()
        for ref in supervisors:
            ref.stop(block=False)

    def _new_pool(self, backend: ActorBackend) -> HostPool:
        return HostPool(backend, max_idle=max(4 * len(self.spec.programs), 16))
