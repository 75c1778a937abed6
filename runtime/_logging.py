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

__all__ = ["Log", "get_logger"]

logging.getLogger("actorflow").addHandler(logging.NullHandler())


class Log:
    """A structlog logger for one stdlib logger, with context bound lazily.

    The supervisor logs a few events per run; with the level off (the default),
    structlog would still bind context and run its processor chain to drop each
    one (~2 us apiece). Here ``bind`` only merges a dict, and an event below the
    stdlib logger's level costs one cached ``isEnabledFor``. An event at an enabled
    level that only the library's ``NullHandler`` would receive (logging not
    configured: WARNING is enabled by default) is dropped too: building its record
    cost ~60 us per executor restart, for output nobody sees.
    """

    __slots__ = ("_context", "_stdlib")

    def __init__(self, stdlib: logging.Logger, context: dict[str, Any]) -> None:
        self._stdlib = stdlib
        self._context = context

    def bind(self, **values: Any) -> Log:
        """A logger with ``values`` added to the context."""
        return Log(self._stdlib, {**self._context, **values})

    def info(self, event: str, **values: Any) -> None:
        """Log ``event`` at INFO with the bound context and ``values``."""
        self._emit(logging.INFO, "info", event, values)

    def warning(self, event: str, **values: Any) -> None:
        """Log ``event`` at WARNING with the bound context and ``values``."""
        self._emit(logging.WARNING, "warning", event, values)

    def error(self, event: str, **values: Any) -> None:
        """Log ``event`` at ERROR with the bound context and ``values``."""
        self._emit(logging.ERROR, "error", event, values)

    def _emit(self, level: int, method: str, event: str, values: dict[str, Any]) -> None:
        if not self._stdlib.isEnabledFor(level) or not _reaches_a_handler(self._stdlib, level):
            return
        bound = structlog.wrap_logger(
            self._stdlib,
            wrapper_class=structlog.stdlib.BoundLogger,
            processors=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.render_to_log_kwargs,
            ],
        )
        getattr(bound, method)(event, **self._context, **values)


def _reaches_a_handler(logger: logging.Logger, level: int) -> bool:
    """Whether a record at ``level`` would reach a handler other than a ``NullHandler``.

    Walks the handlers as ``Logger.callHandlers`` does. Checked at every event, since
    an application may configure logging at any time.
    """
    found = False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            found = True
            if level >= handler.level and not isinstance(handler, logging.NullHandler):
                return True
        if not current.propagate:
            break
        current = current.parent
    # No handler at all (someone removed the library's NullHandler): stdlib's last resort.
    last = logging.lastResort
    return not found and last is not None and level >= last.level


def get_logger(name: str) -> Log:
    """A logger writing structlog events to the stdlib logger ``name``."""
    return Log(logging.getLogger(name), {})
