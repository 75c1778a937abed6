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

from actorflow.actors._host import HostedFactory
from actorflow.errors import MissingExtra

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


def ray_module(init: Mapping[str, Any] | None = None) -> Any:
    """The ray module, imported (and Ray started with ``init`` if it is not) on first use.

    Ray reads :data:`LOOPBACK_ENV` when it is imported: a local Ray (no ``address``)
    stays on loopback only if this is the first import of Ray in the process.
    """
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
    """The ray module if Ray is running in this process, else None (never starts it)."""
    ray = sys.modules.get("ray")
    return ray if ray is not None and ray.is_initialized() else None


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
