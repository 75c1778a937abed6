"""Sends that every condition declined: an event and a log line each, at the barrier."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import actorflow.runtime._events as ev
from actorflow.runtime._logging import Log
from actorflow.runtime.graph import a_label

from ._job import RunJob

__all__ = ["report_drops"]


def report_drops(
    job: RunJob, superstep: int, now: float, executor: str, drops: Sequence[Any], *, log: Log
) -> None:
    """Emit a ``MessageDroppedEvent`` and log (INFO) each of ``executor``'s drops.

    ``drops`` is a step report's ``dropped`` field: ``[type name, [targets]]`` each.
    """
    log = log.bind(run=job.run_id, superstep=superstep, executor=executor)
    for type_name, targets in drops:
        job.emit(
            ev.MessageDroppedEvent(job.run_id, superstep, now, executor, type_name, tuple(targets))
        )
        # The message says it all: a plain ``logging.basicConfig`` shows only the message.
        log.info(
            f"executor {executor!r} sent {a_label(type_name)} that every condition declined "
            f"(targets handling it: {', '.join(repr(t) for t in targets)}): no executor "
            "received it",
            type=type_name,
            targets=list(targets),
        )
