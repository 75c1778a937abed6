"""The Ray backend: every executor host is a Ray actor, a process of its own.

Only the host protocol crosses the process boundary: a
:class:`~actorflow.actors._host.Call` and friends (:class:`~actorflow.actors.ProgramSlot`),
answered with bytes. A program (the
:class:`~._host.Hosted` factory: executor class, blueprint bytes, out-edges) is
pickled once on the driver with Ray's cloudpickle (classes of ``__main__`` and
of modules registered with ``ray.cloudpickle.register_pickle_by_value`` travel
by value, others by reference and must be importable on the worker), sent to a
worker once, and cached there by digest; a warm worker reloads it for free.
Message types registered with ``@actorflow.message`` in by-value code travel
with it and are registered on the worker, so it can decode them.

Ray's own actor restarts stay off (``max_restarts=0``): a restarted Ray actor
re-runs ``__init__`` and has lost its state. A dead worker (a crash, ``kill -9``,
a lost node) fails its call with :class:`~actorflow.errors.HostLost`, and the
supervisor restores the executor from its last good state on a new worker. A
worker that outlives its time limit is killed (``ray.kill``), which a thread
cannot be.

``import ray`` happens on first use (the first ``spawn``), never at import.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from typing import Any

from actorflow.actors._backend import HostRef, ThreadBackend
from actorflow.actors._host import HostedFactory
from actorflow.errors import WorkerImportFailed

from ._host import RayHost
from ._programs import Programs
from ._reserve import Reserve
from ._runtime import (
    LOOPBACK_ENV,
    actor_class,
    check_task,
    kill,
    label,
    ray_module,
    require_ray,
)

__all__ = ["RayBackend"]

_OPTION_KEYS = frozenset(
    {
        "num_cpus",
        "num_gpus",
        "memory",
        "resources",
        "accelerator_type",
        "runtime_env",
        "scheduling_strategy",
        "label_selector",
        "name",
        "namespace",
    }
)
"""Ray actor options a backend passes through. Restart, retry and lifetime options are
the supervisor's business and refused: see the module docstring."""


def _checked_options(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(options) - _OPTION_KEYS)
    if unknown:
        raise ValueError(
            f"RayBackend {where}: unsupported Ray actor option(s) {unknown}; use "
            f"{sorted(_OPTION_KEYS)}. Restarts and retries stay off: actorflow's "
            "RestartPolicy restores a failed executor from its last good state"
        )
    return dict(options)


def _reserves(options: Mapping[str, Any]) -> bool:
    """Whether workers with these options hold resources for their whole life."""
    return bool(
        options.get("num_cpus") or options.get("num_gpus") or options.get("memory")
    ) or bool(options.get("resources"))


_ON_DRIVER = "threads of the driver process"
"""The placement of executors hosted on the driver (no Ray options key is a str)."""


def _freeze(value: Any) -> Hashable:
    """A hashable key for a JSON-like options value."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value if isinstance(value, Hashable) else repr(value)


class RayBackend:
    """Hosts every executor in a Ray actor (a worker process, on any node of the cluster).

    Pass it to ``WorkflowBuilder.build(backend=...)`` or ``Workflow.session(...,
    backend=...)``. The supervisor stays in the process that opened the session.

    Args:
        options: Ray actor options for every executor's worker (graph-wide
            defaults): ``num_cpus``, ``num_gpus``, ``memory``, ``resources``
            (custom), ``runtime_env``, ``scheduling_strategy``, ... Ray's default
            reserves no CPU for a live actor, so any number of executors fit; a
            ``num_cpus`` reserves cores for the worker's whole life (a worker that
            cannot be placed waits until one is free).
        executors: per-executor options, by executor id, merged over ``options``
            (a GPU-bound executor: ``{"embed": {"num_gpus": 1}}``).
        init: keyword arguments for ``ray.init`` if Ray is not initialised when the
            first worker starts (an ``address`` connects to a cluster). Without an
            address a local Ray is started, on 127.0.0.1 only (see
            :attr:`LOOPBACK_ENV`).
        reserve: idle workers this backend keeps for reuse after their workflow
            let them go (a worker process costs ~0.5 s to start).
        spares: workers kept started ahead, per placement, so that a lost or
            killed worker is replaced by one that is already running (a new
            process takes ~1 s to start and import). Each costs a process (~90 MB);
            none are kept for placements that reserve CPUs, GPUs, memory or custom
            resources (a spare would hold them).
        on_driver: executors hosted on threads of the driver process, as on
            ``ThreadBackend``, instead of in Ray workers: light executors (a source,
            a gather, a router) whose work is smaller than a Ray round trip (~0.5-2
            ms), which each of their supersteps would otherwise cost. They speak
            the same bytes and keep the same isolation; they share the driver's GIL
            and die with it.

    Raises:
        MissingExtra: Ray is not installed (``pip install 'actorflow[ray]'``);
            checked here without importing Ray, which is imported on first use.
        ValueError: an option Ray does not take here (restart and retry options
            are refused: actorflow's ``RestartPolicy`` owns failures), or Ray
            options for an executor hosted on the driver.
    """

    LOOPBACK_ENV = LOOPBACK_ENV
    """The environment variable that keeps a local Ray on 127.0.0.1 (set to ``"0"``)."""

    def __init__(
        self,
        *,
        options: Mapping[str, Any] | None = None,
        executors: Mapping[str, Mapping[str, Any]] | None = None,
        init: Mapping[str, Any] | None = None,
        reserve: int = 16,
        spares: int = 1,
        on_driver: Collection[str] = (),
    ) -> None:
        require_ray()
        self._options = _checked_options(options or {}, "options")
        self._executors = {
            eid: {**self._options, **_checked_options(opts, f"executor {eid!r}")}
            for eid, opts in (executors or {}).items()
        }
        self._on_driver = frozenset(on_driver)
        both = sorted(self._on_driver & set(self._executors))
        if both:
            raise ValueError(
                f"RayBackend: {both} are hosted on the driver (on_driver) and also given "
                "Ray actor options (executors): drop one of the two"
            )
        self._threads = ThreadBackend()
        self._init = dict(init or {})
        self._reserve_size = reserve
        self._spares = spares
        self._programs = Programs(self._init)
        self._reserve = Reserve(reserve)

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped inside a sub-workflow's program: the settings travel, the live state does not.
        settings = {
            "options": self._options,
            "executors": self._executors,
            "init": self._init,
            "reserve": self._reserve_size,
            "spares": self._spares,
            "on_driver": self._on_driver,
        }
        return (_rebuild, (settings,))

    def start(self, *, workers: int = 0) -> None:
        """Start (or connect to) Ray now, with this backend's ``init``, if it is not running,
        and start ``workers`` worker processes ahead, for executors with the graph-wide
        ``options``.

        Otherwise Ray starts when the first session starts its hosts, on the
        supervisor's thread; Ray installs its signal handlers only when started on the
        main thread, so a program that owns its Ray calls this first. A worker process
        takes ~1 s to start and import: a service that starts as many as its first
        workflow hosts in workers (and keeps one backend for all its workflows, whose
        reserve hands workers on) starts its first run without waiting for one. This
        returns once Ray is up and the workers run.
        """
        ray = ray_module(self._init)
        ready = self._start_workers(ray, None, workers)
        if ready:
            ray.get(ready, timeout=120)

    def _start_workers(self, ray: Any, executor: str | None, count: int) -> list[Any]:
        """Start ``count`` workers of ``executor``'s placement (None: the graph-wide
        options) in the background, parked as spares: ``known`` is the reference to
        their (empty) preload, so a spawn that takes one before it runs waits for it.
        Returns those references."""
        options = self.options_for(executor) if executor is not None else dict(self._options)
        key = self.placement(executor) if executor is not None else _freeze(options)
        actor = actor_class(ray).options(**options)
        ready = []
        for _ in range(count):
            worker = actor.remote()
            ready.append(worker.preload.remote([]))
            self._reserve.park(worker, key, spare=True, known=ready[-1])
        return ready

    # --- ActorBackend -------------------------------------------------------------

    @property
    def on_driver(self) -> frozenset[str]:
        """The executors hosted on threads of the driver process, not in Ray workers."""
        return self._on_driver

    def options_for(self, executor: str) -> dict[str, Any]:
        """The Ray actor options ``executor``'s worker is started with."""
        return dict(self._executors.get(executor, self._options))

    def placement(self, executor: str) -> Hashable:
        """Workers started with equal options are interchangeable (and driver threads)."""
        if executor in self._on_driver:
            return _ON_DRIVER
        return _freeze(self._executors.get(executor, self._options))

    def spawn(self, executor: str) -> HostRef:
        """Start (or take from the reserve) a worker for ``executor``; a thread for an
        executor hosted on the driver."""
        if executor in self._on_driver:
            return self._threads.spawn(executor)
        key = self.placement(executor)
        taken, left = self._reserve.take(key)
        missing = self._spares - left
        options = self.options_for(executor)
        if _reserves(options):
            missing = 0  # a spare would hold CPUs, GPUs or memory that running workers need
        ray = ray_module(self._init)
        actor = actor_class(ray).options(**options)
        for _ in range(missing):
            # Started now, in the background, with this placement's programs unpickled
            # ahead: the next spawn (a replacement after a crash, most likely) finds a
            # running process that restores at once.
            spare = actor.remote()
            preload = spare.preload.remote(self._programs.recent(key))
            self._reserve.park(spare, key, spare=True, known=preload)
        if taken is None:
            return RayHost(actor.remote(), key, programs=self._programs, reserve=self._reserve)
        handle, known = taken
        if not isinstance(known, tuple):
            # The spare's preload: waited for here, as the first call would wait for it.
            try:
                known = tuple(ray.get(known, timeout=120))
            except Exception:  # noqa: BLE001 - a spare that died is found out by its first call
                known = ()
        return RayHost(handle, key, programs=self._programs, reserve=self._reserve, known=known)

    def check(self, factories: Mapping[str, HostedFactory]) -> None:
        """Unpickle every program on a worker of its placement, once per class and placement.

        Raises:
            WorkerImportFailed: a worker cannot import a class a program needs.
        """
        todo: dict[Hashable, list[tuple[str, str, bytes]]] = {}
        for executor, factory in sorted(factories.items()):
            if executor in self._on_driver:
                continue  # the driver's own code: nothing to check
            placement = self.placement(executor)
            blob = self._programs.to_check(placement, factory)
            if blob is not None:
                todo.setdefault(placement, []).append((executor, label(factory), blob))
        if not todo:
            return
        ray = ray_module(self._init)
        pending = []
        for placement, executors in todo.items():
            # A worker of the placement checks them: one parked already, or one started
            # now with the others its executors will need, all parked for the spawns
            # that follow. The processes start together, once: the first run on a
            # running cluster waits for one worker start (~0.7 s), not a check task's
            # process and then the workers' (~1.2 s).
            parked = self._reserve.peek(placement)
            if parked is None and not _reserves(self.options_for(executors[0][0])):
                self._start_workers(ray, executors[0][0], len(executors))
                parked = self._reserve.peek(placement)
            ref = parked.check.remote(executors) if parked is not None else None
            pending.append((executors, ref))
        for executors, ref in pending:
            try:
                try:
                    ray.get(
                        ref if ref is not None else self._check_task(ray, executors), timeout=120
                    )
                except ray.exceptions.RayActorError:  # the parked worker died: a task, then
                    ray.get(self._check_task(ray, executors), timeout=120)
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause
                if isinstance(cause, WorkerImportFailed):
                    raise WorkerImportFailed(str(cause), type_name=cause.type_name) from None
                raise
        for executor, factory in factories.items():
            if executor not in self._on_driver:
                self._programs.checked(self.placement(executor), factory)

    def _check_task(self, ray: Any, executors: list[tuple[str, str, bytes]]) -> Any:
        """A Ray task unpickling ``executors``' programs (in their runtime env)."""
        env = self.options_for(executors[0][0]).get("runtime_env")
        options: dict[str, Any] = {"num_cpus": 0}
        if env is not None:
            options["runtime_env"] = env
        return check_task(ray).options(**options).remote(executors)

    def shutdown(self) -> None:
        """Kill the reserve's idle workers (hosts lent to sessions stop with them)."""
        for handle in self._reserve.drain():
            kill(handle)


def _rebuild(settings: dict[str, Any]) -> RayBackend:
    return RayBackend(**settings)
