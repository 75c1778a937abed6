"""The Ray backend: every executor host is a Ray actor, a process of its own.

Only the host protocol crosses the process boundary: ``("call", method, bytes)``
and friends (:class:`~._host.ProgramSlot`), answered with bytes. A program (the
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

import concurrent.futures
import hashlib
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from actorflow.errors import HostLost, WorkerImportFailed

from ._host import HostedFactory
from ._ray_worker import CACHED_PROGRAMS, Shipped, Worker, check_programs
from ._registry import registered
from ._reply import Raised

__all__ = ["RayBackend"]

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Set to ``"0"`` before a local ``ray.init``: Ray then binds and advertises 127.0.0.1 only."""

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

    Raises:
        ValueError: an option Ray does not take here (restart and retry options
            are refused: actorflow's ``RestartPolicy`` owns failures).
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
    ) -> None:
        self._options = _checked_options(options or {}, "options")
        self._executors = {
            eid: {**self._options, **_checked_options(opts, f"executor {eid!r}")}
            for eid, opts in (executors or {}).items()
        }
        self._init = dict(init or {})
        self._reserve = reserve
        self._spares = spares
        self._lock = threading.Lock()
        self._parked: dict[Hashable, list[Any]] = {}
        self._blobs: OrderedDict[int, tuple[object, str, bytes]] = OrderedDict()
        self._checked: set[tuple[type, Hashable]] = set()

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped inside a sub-workflow's program: the settings travel, the live state does not.
        return (
            _rebuild,
            (self._options, self._executors, self._init, self._reserve, self._spares),
        )

    def start(self) -> None:
        """Start (or connect to) Ray now, with this backend's ``init``, if it is not running.

        Otherwise that happens when the first session starts its hosts, on the
        supervisor's thread; Ray installs its signal handlers only when started on
        the main thread, so a program that owns its Ray calls this first.
        """
        _ray(self._init)

    # --- ActorBackend -------------------------------------------------------------

    def options_for(self, executor: str) -> dict[str, Any]:
        """The Ray actor options ``executor``'s worker is started with."""
        return dict(self._executors.get(executor, self._options))

    def placement(self, executor: str) -> Hashable:
        """Workers started with equal options are interchangeable."""
        return _freeze(self._executors.get(executor, self._options))

    def spawn(self, executor: str) -> _RayHost:
        """Start (or take from the reserve) a worker for ``executor``."""
        key = self.placement(executor)
        with self._lock:
            parked = self._parked.get(key)
            handle = parked.pop(0) if parked else None  # the oldest: the most likely running
            missing = self._spares - len(parked or ())
        options = self.options_for(executor)
        if _reserves(options):
            missing = 0  # a spare would hold CPUs, GPUs or memory that running workers need
        ray = _ray(self._init)
        actor = _actor_class(ray).options(**options)
        if handle is None:
            handle = actor.remote()
        for _ in range(missing):
            # Started now, in the background: the next spawn of this placement (a
            # replacement after a crash, most likely) finds a running process.
            self._park(actor.remote(), key, spare=True)
        return _RayHost(self, handle, key)

    def check(self, factories: Mapping[str, HostedFactory]) -> None:
        """Unpickle every program on a worker of its placement, once per class and placement.

        Raises:
            WorkerImportFailed: a worker cannot import a class a program needs.
        """
        todo: dict[Hashable, list[tuple[str, str, bytes]]] = {}
        for executor, factory in sorted(factories.items()):
            key = (_class_of(factory), self.placement(executor))
            with self._lock:
                if key in self._checked:
                    continue
            _digest, blob = self._pickled(factory)
            todo.setdefault(key[1], []).append((executor, _label(factory), blob))
        if not todo:
            return
        ray = _ray(self._init)
        task = _check_task(ray)
        pending = []
        for executors in todo.values():
            env = self.options_for(executors[0][0]).get("runtime_env")
            options: dict[str, Any] = {"num_cpus": 0}
            if env is not None:
                options["runtime_env"] = env
            pending.append(task.options(**options).remote(executors))
        for ref in pending:
            try:
                ray.get(ref, timeout=120)
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause
                if isinstance(cause, WorkerImportFailed):
                    raise WorkerImportFailed(str(cause), type_name=cause.type_name) from None
                raise
        with self._lock:
            for executor, factory in factories.items():
                self._checked.add((_class_of(factory), self.placement(executor)))

    # --- internals ----------------------------------------------------------------

    def _pickled(self, factory: HostedFactory) -> tuple[str, bytes]:
        """(digest, bytes) of ``factory`` with the by-value message types it may need."""
        ident = id(factory)
        with self._lock:
            cached = self._blobs.get(ident)
            if cached is not None and cached[0] is factory:
                self._blobs.move_to_end(ident)
                return cached[1], cached[2]
        ray = _ray(self._init)
        blob = ray.cloudpickle.dumps(Shipped(factory, _by_value_messages(ray)))
        digest = hashlib.sha256(blob).hexdigest()
        with self._lock:
            # The factory is held, so its id is never reused while the entry lives.
            self._blobs[ident] = (factory, digest, blob)
            if len(self._blobs) > 512:
                self._blobs.popitem(last=False)
        return digest, blob

    def _park(self, handle: Any, key: Hashable, *, spare: bool = False) -> bool:
        """Keep an idle worker for the next spawn with this placement; False if full."""
        with self._lock:
            if not spare and sum(len(v) for v in self._parked.values()) >= self._reserve:
                return False
            self._parked.setdefault(key, []).append(handle)
            return True

    def shutdown(self) -> None:
        """Kill the reserve's idle workers (hosts lent to sessions stop with them)."""
        with self._lock:
            parked = [h for handles in self._parked.values() for h in handles]
            self._parked = {}
        for handle in parked:
            _kill(handle)


def _rebuild(
    options: dict[str, Any],
    executors: dict[str, dict[str, Any]],
    init: dict[str, Any],
    reserve: int,
    spares: int,
) -> RayBackend:
    return RayBackend(
        options=options, executors=executors, init=init, reserve=reserve, spares=spares
    )


class _RayHost:
    """A handle on one worker. Driver side; thread-safe."""

    __slots__ = ("_backend", "_handle", "_in_flight", "_key", "_known", "_lock", "_state")

    def __init__(self, backend: RayBackend, handle: Any, key: Hashable) -> None:
        self._backend = backend
        self._handle = handle
        self._key = key
        self._lock = threading.Lock()
        self._in_flight = 0
        self._state = "live"  # "live", "stopped" or "lost"
        self._known: OrderedDict[str, None] = OrderedDict()

    def call(self, method: str, payload: bytes) -> _RayFuture:
        return self._send(("call", method, payload))

    def load_call(self, factory: HostedFactory, method: str, payload: bytes) -> _RayFuture:
        digest, blob = self._backend._pickled(factory)
        with self._lock:
            # The worker's cache sees the same sequence of digests as this mirror.
            if digest in self._known:
                self._known.move_to_end(digest)
                shipped: bytes | None = None
            else:
                self._known[digest] = None
                if len(self._known) > CACHED_PROGRAMS:
                    self._known.popitem(last=False)
                shipped = blob
        return self._send(("load_call", (digest, shipped, _label(factory)), method, payload))

    def unload(self) -> _RayFuture:
        return self._send(("unload",))

    def _send(self, message: tuple[Any, ...]) -> _RayFuture:
        with self._lock:
            state = self._state
            if state == "live":
                self._in_flight += 1
        if state != "live":
            return _RayFuture.failed(self, HostLost(f"the Ray worker was {state}"))
        return _RayFuture(self, self._handle.handle.remote(message))

    def lost(self) -> None:
        """The worker died: never call it again, and kill what may remain of it."""
        with self._lock:
            if self._state == "lost":
                return
            self._state = "lost"
        _kill(self._handle)

    def stop(self) -> None:
        """Idle: unload and park the worker for reuse. Busy (a hung handler): kill it."""
        with self._lock:
            if self._state != "live":
                return
            self._state = "stopped"
            idle = self._in_flight == 0
        if idle and _running() is not None:
            self._handle.handle.remote(("unload",))
            if self._backend._park(self._handle, self._key):
                return
        _kill(self._handle)

    @property
    def alive(self) -> bool:
        return self._state == "live"

    def pid(self) -> int:
        """The worker's process id (for tests and tools that kill a worker on purpose)."""
        return int(_ray().get(self._handle.pid.remote(), timeout=60))


class _RayFuture:
    """A pending answer from a worker, a :class:`~._backend.HostFuture`.

    ``get`` waits with ``ray.get`` itself; a ``concurrent.futures`` twin (a thread
    hop per answer) is made only when someone asks for a callback.
    """

    __slots__ = ("_error", "_future", "_host", "_ref", "_settled")

    def __init__(self, host: _RayHost, ref: Any, error: BaseException | None = None) -> None:
        self._host = host
        self._ref = ref
        self._error = error
        self._future: concurrent.futures.Future[Any] | None = None
        self._settled = error is not None  # a call never sent is not in flight

    @classmethod
    def failed(cls, host: _RayHost, error: BaseException) -> _RayFuture:
        """A call that was never sent (the worker was stopped or lost)."""
        return cls(host, None, error)

    def get(self, *, timeout: float | None = None) -> Any:
        """The answer, or what the call raised (the handler's own exception; a dead
        worker as :class:`HostLost`); ``TimeoutError`` after ``timeout`` s."""
        if self._error is not None:
            raise self._error
        ray = _ray()
        try:
            value = ray.get(self._ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise  # a TimeoutError: the wait timed out, the call goes on
        except Exception as exc:  # noqa: BLE001 - every failure of the call is translated, raised
            self._settle()
            raise self._translate(ray, exc) from None
        self._settle()
        if type(value) is Raised:  # the program's failure, handed back as an answer
            raise value.error
        return value

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        if self._error is not None:
            callback()
            return
        future = self._future
        if future is None:
            future = self._future = self._ref.future()

        def landed(_future: concurrent.futures.Future[Any]) -> None:
            self._settle()
            callback()

        future.add_done_callback(landed)

    def _settle(self) -> None:
        """The call is over: the worker no longer counts it (once, from any thread)."""
        host = self._host
        with host._lock:
            if self._settled:
                return
            self._settled = True
            host._in_flight -= 1

    def _translate(self, ray: Any, exc: Exception) -> BaseException:
        if isinstance(exc, ray.exceptions.RayTaskError):
            cause = exc.cause
            if isinstance(cause, BaseException):
                return cause
        if isinstance(exc, ray.exceptions.RayError):
            self._host.lost()
            error = HostLost(f"the Ray worker died: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return error
        return exc


def _by_value_messages(ray: Any) -> list[tuple[str, type]]:
    by_value = set(ray.cloudpickle.list_registry_pickle_by_value())
    return [
        (name, cls)
        for name, cls in registered()
        if cls.__module__ == "__main__" or cls.__module__ in by_value
    ]


def _class_of(factory: HostedFactory) -> type:
    cls = getattr(factory, "cls", None)
    return cls if isinstance(cls, type) else type(factory)


def _label(factory: HostedFactory) -> str:
    cls = _class_of(factory)
    executor = getattr(factory, "executor_id", None)
    name = f"{cls.__module__}.{cls.__qualname__}"
    return name if executor is None else f"executor {executor!r} ({name})"


_remote: dict[str, Any] = {}
_remote_lock = threading.Lock()


def _ray(init: Mapping[str, Any] | None = None) -> Any:
    """The ray module, imported (and Ray started with ``init`` if it is not) on first use.

    Ray reads :data:`LOOPBACK_ENV` when it is imported: a local Ray (no ``address``)
    stays on loopback only if this is the first import of Ray in the process.
    """
    if "ray" not in sys.modules and (init or {}).get("address") is None:
        os.environ.setdefault(LOOPBACK_ENV, "0")
    import ray  # noqa: PLC0415 - Ray is imported on first use, never by `import actorflow`

    if not ray.is_initialized():
        with _remote_lock:
            if not ray.is_initialized():
                _start(ray, init or {})
    return ray


def _running() -> Any:
    """The ray module if Ray is running in this process, else None (never starts it)."""
    ray = sys.modules.get("ray")
    return ray if ray is not None and ray.is_initialized() else None


def _kill(handle: Any) -> None:
    """Kill a worker; nothing to do once Ray is shut down (its workers went with it)."""
    ray = _running()
    if ray is not None:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - a worker already gone is what we wanted
            pass


def _start(ray: Any, init: Mapping[str, Any]) -> None:
    kwargs = dict(init)
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("configure_logging", False)
    ray.init(**kwargs)


def _actor_class(ray: Any) -> Any:
    with _remote_lock:
        cls = _remote.get("actor")
        if cls is None:
            cls = _remote["actor"] = ray.remote(max_restarts=0, max_task_retries=0)(Worker)
    return cls


def _check_task(ray: Any) -> Any:
    with _remote_lock:
        task = _remote.get("check")
        if task is None:
            task = _remote["check"] = ray.remote(max_retries=0)(check_programs)
    return task
