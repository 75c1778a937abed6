"""The ``actorflow`` command (also ``python -m actorflow``)."""

from ._main import main, open_store

__all__ = ["main", "open_store"]
