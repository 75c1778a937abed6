"""actorflow.actors.ray: the Ray backend, every executor host a Ray actor process.

The driver side: :class:`RayBackend` (``_backend``: placement, spawning, checks)
composed of the pickled programs it ships (``_programs``) and the idle workers it
keeps (``_reserve``), both shared with the handle on each worker (``_host``:
:class:`RayHost` and its futures). Ray itself is imported and started by
``_runtime`` on first use, never when actorflow is imported. The worker side is
``_worker``, the only code a Ray worker runs.

Imports point one way: ``_backend`` -> ``_host`` -> (``_programs``, ``_reserve``)
-> ``_runtime`` -> ``_worker``.
"""

from ._backend import RayBackend

__all__ = ["RayBackend"]
