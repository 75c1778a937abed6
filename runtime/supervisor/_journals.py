"""The effects and statements of completed supersteps, until a cut commits them.

A superstep's reports carry the effects its handlers made (results, journaled) and
the ``ctx.sql`` statements they queued. Both belong to the superstep only once it
completes: a failed attempt's are never taken (its retry reports them again, the
runner remembering the effect results). A superstep that fails for good leaves the
effect results it got, in every executor (:meth:`Journals.attempted`): the run's
``halt`` cut records them, and every later cut at the same barrier (a next run's
entry cut, say), so a replay finds them and a resume of any of those cuts does not
call them again; once the superstep completes, its reports hold them instead. They wait here until the next cut is
written, which commits all of them at once (a policy that checkpoints every third
superstep commits three supersteps' worth); a cut that fails to be written gives
them back, so the one after it commits them. Supervisor thread only.
"""

from __future__ import annotations

from typing import Any

from actorflow.runtime._wire import StepReport
from actorflow.storage import Statement

__all__ = ["Journals"]


class Journals:
    """One session's uncommitted effects and statements."""

    __slots__ = ("_attempted", "_effects", "_statements")

    def __init__(self) -> None:
        self._effects: list[list[Any]] = []
        """``[executor, superstep, name, n, result]`` per effect, in superstep order."""
        self._statements: list[Statement] = []
        self._attempted: dict[tuple[str, int], list[list[Any]]] = {}
        """(executor, superstep) -> the results of a superstep that failed for good, until
        it completes (its reports then hold them)."""

    def completed(self, executor: str, superstep: int, report: StepReport) -> None:
        """Take what ``executor``'s report of the completed ``superstep`` made."""
        if report.effects:
            self._effects.extend([executor, superstep, *made] for made in report.effects)
        if report.statements:
            self._statements.extend(
                Statement(sql, tuple(params), executor, superstep)
                for sql, params in report.statements
            )

    def attempted(self, executor: str, superstep: int, made: list[list[Any]]) -> None:
        """Keep the effect results (``[name, n, result]`` each) ``executor`` got in
        ``superstep``, which failed for good: every cut until it completes carries them."""
        self._attempted[(executor, superstep)] = made

    def settled(self, superstep: int) -> None:
        """``superstep`` completed: its reports hold what its failed attempts got."""
        if self._attempted:
            self._attempted = {k: v for k, v in self._attempted.items() if k[1] > superstep}

    def take(self) -> tuple[list[list[Any]], list[Statement]]:
        """Everything not yet committed (the caller's cut commits it, or puts it back),
        with the results of a superstep that failed, to run again: every cut at its
        barrier carries them, so a resume of any of those cuts hands them on."""
        taken = (self.unrecorded(), self._statements)
        self._effects, self._statements = [], []
        return taken

    def unrecorded(self) -> list[list[Any]]:
        """The effect results :meth:`take` would hand the next cut, left in place: what
        a run that failed without a ``halt`` cut got and no cut records."""
        effects = list(self._effects)
        for (executor, superstep), made in self._attempted.items():
            effects.extend([executor, superstep, *effect] for effect in made)
        return effects

    def put_back(self, effects: list[list[Any]], statements: list[Statement]) -> None:
        """Give back what a cut did not commit: it goes first into the next cut (the
        failed superstep's results are kept apart, and go with every cut anyway)."""
        attempted = self._attempted
        if attempted:
            effects = [e for e in effects if (e[0], e[1]) not in attempted]
        self._effects[:0] = effects
        self._statements[:0] = statements

    def clear(self) -> None:
        """Drop everything (the state it belongs to was dropped: ``reset``)."""
        self._effects, self._statements, self._attempted = [], [], {}
