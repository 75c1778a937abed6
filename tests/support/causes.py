"""What an exception was caused by, for tests that look for a cause anywhere in the chain."""

from __future__ import annotations


def chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and its causes (``__cause__``, else ``__context__``), at most ten."""
    found: list[BaseException] = []
    while error is not None and len(found) < 10:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found
