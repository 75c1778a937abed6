"""The effect results the failed attempts at a superstep got, until it completes.

A handler that fails after its effects carries their results back with its exception
(``runtime._effects.carry``: every result its host knows for the superstep, earlier
attempts' too); a resumed session starts with those its halted run recorded
(:meth:`~actorflow.runtime.checkpoints.Restored.failed_attempt`). Each next attempt at
the superstep is handed them in its step request (a fresh host, after a death or on
another process, remembers nothing), so no result is lost between attempts; if the
superstep fails for good they go with the run's ``halt`` cut (``_journals``).
Results are kept per scope: a fork or a reset makes new keys, and calls anew.
Supervisor thread only.
"""

from __future__ import annotations

from typing import Any

from actorflow.runtime.checkpoints import FailedAttempt

__all__ = ["Attempts"]


class Attempts:
    """One driver's results of failed attempts at its current superstep."""

    __slots__ = ("_results", "_scope", "_superstep")

    def __init__(self) -> None:
        self._scope = ""
        self._superstep = -1
        self._results: dict[str, dict[tuple[str, int], bytes]] = {}
        """Executor -> (name, n) -> encoded result."""

    def resume(self, attempt: FailedAttempt | None) -> None:
        """Start from what a halted run recorded of the superstep it failed in."""
        self.clear()
        if attempt is not None:
            self._scope, self._superstep = attempt.scope, attempt.superstep
            for executor, made in attempt.results.items():
                self.failed(attempt.scope, attempt.superstep, executor, made)

    def failed(self, scope: str, superstep: int, executor: str, made: list[list[Any]]) -> None:
        """Add what ``executor``'s failed attempt carried (``[name, n, result]`` each)."""
        if (scope, superstep) != (self._scope, self._superstep):
            self._scope, self._superstep, self._results = scope, superstep, {}
        if made:
            known = self._results.setdefault(executor, {})
            known.update(((name, n), result) for name, n, result in made)

    def of(self, scope: str, superstep: int, executor: str) -> list[list[Any]] | None:
        """``[name, n, result]`` of each result ``executor``'s attempts at ``superstep``
        got in ``scope``, or None."""
        if (scope, superstep) != (self._scope, self._superstep):
            return None
        known = self._results.get(executor)
        return [[name, n, result] for (name, n), result in known.items()] if known else None

    def frame(self, frame: list[Any], executor: str, superstep: int) -> list[Any]:
        """The effect frame of ``executor``'s step request (``frame``, the run's), with
        the results its earlier attempts got handed in (see ``runtime._wire``)."""
        if not self._results:
            return frame
        handed = self.of(frame[0], superstep, executor)
        return frame if handed is None else [*frame[:4], handed]

    def clear(self) -> None:
        """Forget everything (the superstep completed)."""
        if self._results:
            self._results = {}
        self._superstep = -1
