"""OpenTelemetry for actorflow: span names, attribute prefix, and where spans go.

Install the extra ``actorflow[otel]`` (the OpenTelemetry API only) and let the
application choose the SDK and exporter. actorflow never configures OpenTelemetry:
its spans go to the global tracer provider and its metrics to the global meter
provider, unless :func:`set_providers` names others for actorflow alone. With no
provider set (or OpenTelemetry not even imported) a run makes no span at all and
costs nothing measurable.

Spans (attributes ``actorflow.workflow``, ``.session``, ``.run``, ``.superstep``,
``.executor`` and a few more, all under :data:`PREFIX`):

=============================== ==========================================================
``workflow.run``                 a run; child of the caller's current span (also when the
                                 caller streams); a resumed session's first run links to
                                 the run that wrote its checkpoint (also across processes)
``workflow.superstep``           one superstep; child of the run
``executor.process <id>``        an executor handling its batch, on its own thread (or
                                 process); child of the superstep; current while the
                                 handlers run, so a handler's spans and a sub-workflow's
                                 run nest under it; links to the ``message.send`` spans
                                 of what it received
``message.send``                 one ``ctx.send``; child of the sender's process span
``checkpoint.write``             one checkpoint: ``.checkpoint.kind``, ``.bytes``,
                                 ``.store``, ``.id``
``executor.restart``             a failed executor restored and re-run
``superstep.rollback``           a failed superstep undone
=============================== ==========================================================

Every span ends, whether the run completes, fails, is cancelled, or its stream is
abandoned. Metrics (meter ``actorflow``): ``actorflow.supersteps``,
``actorflow.checkpoint.bytes``, ``actorflow.checkpoint.duration``, ``actorflow.restarts``,
``actorflow.requests.pending``, ``actorflow.run.duration``.

>>> from actorflow import otel
>>> otel.SPAN_RUN, otel.SPAN_PROCESS, otel.SPAN_SEND
('workflow.run', 'executor.process', 'message.send')
"""

from __future__ import annotations

from actorflow.runtime import (
    PREFIX,
    SPAN_CHECKPOINT,
    SPAN_PROCESS,
    SPAN_RESTART,
    SPAN_ROLLBACK,
    SPAN_RUN,
    SPAN_SEND,
    SPAN_SUPERSTEP,
    TRACE_KEY,
    set_providers,
)

__all__ = [
    "PREFIX",
    "SPAN_CHECKPOINT",
    "SPAN_PROCESS",
    "SPAN_RESTART",
    "SPAN_ROLLBACK",
    "SPAN_RUN",
    "SPAN_SEND",
    "SPAN_SUPERSTEP",
    "TRACE_KEY",
    "set_providers",
]
