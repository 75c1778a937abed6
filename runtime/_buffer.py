"""What one superstep of one executor produces, before it is framed as bytes."""

from __future__ import annotations

from typing import Any

from actorflow.actors import encode
from actorflow.errors import EncodeError

from .graph import OutEdge, route, type_label

__all__ = ["StepBuffer"]


class StepBuffer:
    """What one superstep of one executor produced, before it is framed as bytes."""

    __slots__ = ("edges", "executor_id", "outputs", "requests", "sends", "suffix", "superstep")

    def __init__(
        self, executor_id: str, edges: tuple[OutEdge, ...], superstep: int, suffix: str = ""
    ) -> None:
        self.executor_id = executor_id
        self.suffix = suffix
        """Appended to default request ids: the lineage's tag (see ``_lineage``)."""
        self.edges = edges
        self.superstep = superstep
        self.sends: list[list[Any]] = []
        self.outputs: list[bytes] = []
        self.requests: list[list[Any]] = []

    def send(self, value: object, to: str | None) -> None:
        routes = route(self.executor_id, self.edges, value, to)
        if not routes:
            return
        payload = self._encode(value, "message")
        for target, group in routes:
            self.sends.append([target, group, payload])

    def output(self, value: object) -> None:
        self.outputs.append(self._encode(value, "output"))

    def request(self, value: object, response_type: type, request_id: str | None) -> str:
        if request_id is None:
            request_id = f"{self.executor_id}:{self.superstep}:{len(self.requests)}{self.suffix}"
        self.requests.append(
            [request_id, self._encode(value, "request"), type_label(response_type)]
        )
        return request_id

    def _encode(self, value: object, what: str) -> bytes:
        try:
            return encode(value)
        except EncodeError as exc:
            raise EncodeError(
                f"executor {self.executor_id!r} (superstep {self.superstep}) could not encode "
                f"its {what}: {exc}",
                type_name=exc.type_name,
                executor=self.executor_id,
            ) from None  # the message holds the codec's: chaining it would print it twice
