"""Structured logging that respects the application's configuration.

actorflow emits through structlog bound loggers (workflow, session, run,
superstep, executor are bound as context) that hand their events to the
standard library logger ``actorflow.*``. The library never configures logging:
like any library it attaches only a ``NullHandler``, so nothing is printed
unless the application configures ``logging`` (or structlog's
``ProcessorFormatter``) to show the ``actorflow`` logger.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["get_logger"]

logging.getLogger("actorflow").addHandler(logging.NullHandler())


def get_logger(name: str) -> Any:
    """A structlog bound logger writing to the stdlib logger ``name``."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_log_level,
            structlog.stdlib.render_to_log_kwargs,
        ],
    )
