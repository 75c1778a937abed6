"""Ray itself, for the Ray backend's driver side: imported and started on first use.

Kept apart from :mod:`._backend` (the backend) and :mod:`._host` (the handle on
one worker), which both need it: ``import ray`` happens here, on the first
:func:`ray_module` call, never when actorflow is imported. Also the remote
classes the backend starts (built once per process) and the labels that name a
program in errors.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from actorflow._forks import forget_in_children
from actorflow.actors._host import HostedFactory
from actorflow.errors import BackendError, MissingExtra

from ._worker import Worker, check_programs

__all__ = [
    "LOOPBACK_ENV",
    "actor_class",
    "check_task",
    "class_of",
    "kill",
    "label",
    "ray_module",
    "require_ray",
    "running",
]

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Set to ``"0"`` before a local ``ray.init``: Ray then binds and advertises 127.0.0.1 only."""

_remote: dict[str, Any] = {}
_remote_lock = threading.Lock()


class _RayOfParent:
    """Whether this process was forked from one where Ray ran (a ``ForgetsParent``).

    Ray's threads and connections (its core worker, gRPC channels) stay in the
    process that started it, and a call through their copies in a forked child waits
    forever: such a child never uses Ray.
    """

    def __init__(self) -> None:
        self.pid: int | None = None
        """The parent's process id, if Ray ran there at the fork."""

    def forget_parent(self) -> None:
        """In the child, right after the fork (its only thread): reads one attribute."""
        if self.pid is None and _ray_initialized():
            self.pid = os.getppid()


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


_PARENT = _RayOfParent()
forget_in_children(_PARENT)


def ray_module(init: Mapping[str, Any] | None = None) -> Any:
    """The ray module, imported (and Ray started with ``init`` if it is not) on first use.

    Ray reads :data:`LOOPBACK_ENV` when it is imported: a local Ray (no ``address``)
    stays on loopback only if this is the first import of Ray in the process.

    Raises:
        MissingExtra: Ray is not installed.
        BackendError: this process was forked from one where Ray ran (see
            :class:`_RayOfParent`): refused at once rather than hanging.
    """
    if _PARENT.pid is not None:
        raise BackendError(
            f"this process was forked from process {_PARENT.pid} after Ray started "
            "there, and Ray does not survive a fork (its connections stay in that "
            "process; a RayBackend here would wait forever): start worker processes "
            "with the 'spawn' or 'forkserver' method (multiprocessing.set_start_method"
            "('spawn')), or start Ray only in the processes that use it, after they fork"
        )
    if "ray" not in sys.modules and (init or {}).get("address") is None:
        os.environ.setdefault(LOOPBACK_ENV, "0")
    try:
        import ray  # noqa: PLC0415 - Ray is imported on first use, never by `import actorflow`
    except ModuleNotFoundError as exc:
        raise MissingExtra("RayBackend", "ray", exc.name or "ray") from exc

    if not ray.is_initialized():
        with _remote_lock:
            if not ray.is_initialized():
                _start(ray, init or {})
    return ray


def require_ray() -> None:
    """Raise unless Ray can be imported in this process; never imports it.

    Raises:
        MissingExtra: Ray is not installed (the message names ``actorflow[ray]``).
    """
    if "ray" in sys.modules:
        return
    try:
        found = importlib.util.find_spec("ray")
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise MissingExtra("RayBackend", "ray", "ray")


def running() -> Any:
    """The ray module if Ray is running in this process, else None (never starts it).

    None in a child forked from a process where Ray ran: the copy of Ray it holds is
    not running here (a worker handle of the parent is then let go, not killed).
    """
    return sys.modules["ray"] if _PARENT.pid is None and _ray_initialized() else None


def kill(handle: Any) -> None:
    """Kill a worker; nothing to do once Ray is shut down (its workers went with it)."""
    ray = running()
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


def actor_class(ray: Any) -> Any:
    """The worker's Ray actor class (Ray's restarts and retries off)."""
    with _remote_lock:
        cls = _remote.get("actor")
        if cls is None:
            cls = _remote["actor"] = ray.remote(max_restarts=0, max_task_retries=0)(Worker)
    return cls


def check_task(ray: Any) -> Any:
    """The Ray task that unpickles programs on a worker (see ``check_programs``)."""
    with _remote_lock:
        task = _remote.get("check")
        if task is None:
            task = _remote["check"] = ray.remote(max_retries=0)(check_programs)
    return task


def class_of(factory: HostedFactory) -> type:
    """The executor class a program factory builds (the factory's own type otherwise)."""
    cls = getattr(factory, "cls", None)
    return cls if isinstance(cls, type) else type(factory)


def label(factory: HostedFactory) -> str:
    """How errors name a program: its executor id and class."""
    cls = class_of(factory)
    executor = getattr(factory, "executor_id", None)
    name = f"{cls.__module__}.{cls.__qualname__}"
    return name if executor is None else f"executor {executor!r} ({name})"
