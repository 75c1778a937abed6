"""What a client's JSON becomes: a run's input, and the answers to pending requests.

JSON has no types, so a value takes the type its receiver expects: a run's input one
of the start executor's input types (a label the workflow's description lists), an
answer the request's ``response_type``. An object carrying ``"$type"`` names its
type itself. Only registered types are ever built (see ``actorflow.actors.from_json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actorflow.actors import from_json, type_named
from actorflow.errors import DecodeError, InvalidRequest, RequestError
from actorflow.runtime import PendingRequest, Workflow

__all__ = ["Inputs"]


class Inputs:
    """Turns JSON into the values a workflow's runs and requests take.

    Args:
        workflow: its description names the start executor's input types.
    """

    __slots__ = ("labels",)

    def __init__(self, workflow: Workflow) -> None:
        handlers = workflow.describe()["executors"][workflow.start_executor]["handlers"]
        labels: list[str] = []
        for entry in handlers:
            if not entry.startswith("response:"):
                labels.extend(label for label in entry.split("|") if label not in labels)
        self.labels: tuple[str, ...] = tuple(labels)
        """The start executor's input type labels (``str``, a message's wire name, ...)."""

    def input(self, data: Any) -> Any:
        """``data`` as a value of one of the start executor's input types: the first
        that fits, types this process knows by label first.

        Raises:
            InvalidRequest: ``data`` fits none of them; the message lists them.
        """
        known = [label for label in self.labels if type_named(label) is not None]
        problems: list[str] = []
        for label in known:
            try:
                return from_json(data, label)
            except DecodeError as exc:
                problems.append(f"as {label}: {exc}")
        if len(known) < len(self.labels) or not self.labels:
            try:
                return from_json(data)  # a label no class stands for ("object", "list[X]")
            except DecodeError as exc:
                problems.append(str(exc))
        raise InvalidRequest(
            f"input: the workflow's start executor takes {', '.join(self.labels)}; the input "
            f"fits none of them ({'; '.join(problems)}). Send a JSON object of the type's "
            'fields (or name it with "$type")'
        )

    def answers(self, resume: Any, pending: Sequence[PendingRequest]) -> dict[str, Any]:
        """The answers a ``command.resume`` gives: a map of request id to answer, or one
        answer when exactly one request is pending. Each answer becomes its request's
        response type.

        Raises:
            RequestError: nothing is pending (the request was answered already).
            InvalidRequest: the answer names no pending request (or is ambiguous between
                several), or an answer does not fit its type.
        """
        by_id = {p.request_id: p for p in pending}
        if not by_id:
            raise RequestError(
                "command.resume: the thread has no pending request (interrupt) to answer: it was "
                "answered already, or none was asked; read the thread's state for what it "
                "waits on, or start a run with an input"
            )
        if isinstance(resume, Mapping) and resume and set(resume) <= set(by_id):
            chosen = dict(resume)
        elif len(by_id) == 1:
            chosen = {next(iter(by_id)): resume}
        else:
            raise InvalidRequest(
                f"command.resume: {len(by_id)} requests are pending ({', '.join(sorted(by_id))}); "
                'answer with an object that maps request ids to answers, {"<id>": answer}'
            )
        values: dict[str, Any] = {}
        for request_id, data in chosen.items():
            label = by_id[request_id].response_type
            try:
                values[request_id] = from_json(data, label)
            except DecodeError as exc:
                hint = ""
                if data is resume and isinstance(resume, Mapping):
                    # Read as the answer itself, since it names no pending request: it
                    # may be meant as {id: answer} with an id that is not pending.
                    hint = (
                        f"; if it maps request ids to answers, {', '.join(map(repr, resume))} "
                        f"is no pending request: the one pending is {request_id!r}"
                    )
                raise InvalidRequest(
                    f"command.resume: the answer to request {request_id} must be a {label}: "
                    f"{exc}{hint}"
                ) from exc
        return values
