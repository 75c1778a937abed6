"""Answers to pending requests: checked all together, then queued all together.

:class:`Answers` is a session's side of it: the lineage its answers are checked
against, and whether answers wait for the next run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actorflow.actors import encode
from actorflow.errors import EncodeError, RequestError
from actorflow.runtime._runner import RESPONSE_SOURCE
from actorflow.runtime._wire import RESPONSE
from actorflow.runtime.checkpoints import Lineage, RunState
from actorflow.runtime.graph import a_label, type_label

__all__ = ["Answers", "Queued", "queue_answers"]


Queued = list[tuple[str, str, bytes]]
"""Answers queued: ``(request id, executor that asked, the answer encoded)``, in order."""


def queue_answers(
    state: RunState, answers: Mapping[str, Any], lineage: Lineage | None = None
) -> Queued:
    """Deliver ``answers`` to the requesting executors' inboxes; returns what was queued.

    Every answer is checked before any is queued, so a bad one consumes nothing.

    Raises:
        RequestError: answers that are not a mapping, an unknown id, a second answer to
            the same request, a value of the wrong type, or one that cannot be encoded.
    """
    if not isinstance(answers, Mapping):  # an untyped caller's {id: answer} left out
        raise RequestError(
            "answers must be a mapping of request id to answer, got "
            f"{a_label(type_label(type(answers)))}; {_how_to_answer(state)}"
        )
    encoded: list[tuple[str, bytes]] = []
    for request_id, answer in answers.items():
        if not isinstance(request_id, str):
            raise RequestError(
                f"request ids are strings, got {request_id!r} as a key of the answers; "
                f"{_how_to_answer(state)}; nothing was consumed"
            )
        entry = state.pending.get(request_id)
        if entry is None:
            if request_id in state.answered:
                why = "was already answered"
            elif lineage is not None and not lineage.holds(request_id):
                why = (
                    "belongs to an abandoned lineage of this session (one left behind by "
                    "reset(), by starting the session afresh, or by resuming an older "
                    "checkpoint); it can no longer be answered, nothing was consumed"
                )
            else:
                why = "is not a pending request of this session"
            raise RequestError(
                f"request {request_id!r} {why}; pending: {sorted(state.pending) or 'none'}"
            )
        expected = entry[2]
        if expected not in ("object", type_label(type(answer))):
            raise RequestError(
                f"request {request_id!r} of executor {entry[0]!r} expects {a_label(expected)}, "
                f"got {a_label(type_label(type(answer)))}; nothing was consumed"
            )
        try:
            encoded.append((request_id, encode(answer)))
        except EncodeError as exc:
            raise RequestError(f"the answer to {request_id!r} cannot be encoded: {exc}") from None
    queued: Queued = []
    for request_id, payload in encoded:
        executor, request_payload, _ = state.pending.pop(request_id)
        state.answered.add(request_id)
        state.inbox.setdefault(executor, []).append(
            [RESPONSE_SOURCE, RESPONSE, [request_id, request_payload, payload]]
        )
        queued.append((request_id, executor, payload))
    return queued


class Answers:
    """A session's answers: checked against its lineage, queued for its next run.

    Used under the session's turn (see ``_turn``), so never by two threads at once.
    """

    __slots__ = ("_lineage", "_queued")

    def __init__(self, lineage: Lineage) -> None:
        self._lineage = lineage
        self._queued: Queued = []

    @property
    def lineage(self) -> Lineage:
        """The lineage whose requests the session may answer (see ``actorflow.runtime.checkpoints._lineage``)."""
        return self._lineage

    def queue(self, state: RunState, answers: Mapping[str, Any]) -> None:
        """Check every answer, then queue them all into ``state`` (see :func:`queue_answers`).

        Raises:
            RequestError: as :func:`queue_answers`; nothing is consumed.
        """
        self._queued += queue_answers(state, answers, self._lineage)

    def take(self) -> Queued:
        """The answers queued since the last take (a run without input takes them: its
        first checkpoint is then a ``response`` one, and its history records them)."""
        queued, self._queued = self._queued, []
        return queued

    def follow(self, lineage: Lineage) -> None:
        """Check later answers against ``lineage`` (after ``reset()``: a new one)."""
        self._lineage = lineage

    def drop(self) -> None:
        """Forget that answers were queued (a recycled one-off session starts clean)."""
        self._queued = []


def _how_to_answer(state: RunState) -> str:
    """The shape of an answer, with a request id that waits (and every one that does)."""
    pending = sorted(state.pending)
    example = pending[0] if pending else "<request id>"
    return f"answer with {{{example!r}: answer}} (pending: {pending or 'none'})"
