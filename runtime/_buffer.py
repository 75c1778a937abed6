"""What one superstep of one executor produces, before it is framed as bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actorflow.actors import encode
from actorflow.errors import EncodeError, MessageDropped

from .graph import OutEdge, a_label, passed_over, route, type_label

if TYPE_CHECKING:
    from ._effects import EffectJournal

__all__ = ["StepBuffer"]


class StepBuffer:
    """What one superstep of one executor produced, before it is framed as bytes."""

    __slots__ = (
        "dropped",
        "edges",
        "executor_id",
        "journal",
        "open_journal",
        "outputs",
        "requests",
        "sends",
        "strict",
        "suffix",
        "superstep",
    )

    def __init__(
        self,
        executor_id: str,
        edges: tuple[OutEdge, ...],
        superstep: int,
        suffix: str = "",
        *,
        strict: bool = False,
    ) -> None:
        self.executor_id = executor_id
        self.strict = strict
        """Whether a send every condition declines raises MessageDropped (else: reported)."""
        self.dropped: list[list[Any]] | None = None
        """``[type name, [targets passed over]]`` per declined send; None while none."""
        self.suffix = suffix
        """Appended to default request ids: the lineage's tag (see ``_lineage``)."""
        self.edges = edges
        self.superstep = superstep
        self.sends: list[list[Any]] = []
        self.outputs: list[bytes] = []
        self.requests: list[list[Any]] = []
        self.open_journal: Callable[[], EffectJournal] | None = None
        """Makes the step's effect journal (set by the runner before the first handler
        runs; None for a buffer made outside a superstep)."""
        self.journal: EffectJournal | None = None
        """The step's effects: None until a handler first needs the journal (see
        :meth:`effects`)."""

    def effects(self) -> EffectJournal:
        """The step's effect journal, made the first time a handler needs it.

        Made lazily because most steps make no effect: building a journal for each
        cost ~2.5 us of a W1 superstep's ~50 (``python -m bench.w1``).

        Raises:
            RuntimeError: the buffer was made outside a superstep (a test's own Context).
        """
        journal = self.journal
        if journal is None:
            if self.open_journal is None:
                raise RuntimeError(
                    f"executor {self.executor_id!r}: this context was made outside a "
                    "superstep (a test's own Context?); effects need the one a handler is given"
                )
            journal = self.journal = self.open_journal()
        return journal

    def send(self, value: object, to: str | None) -> None:
        routes = route(self.executor_id, self.edges, value, to)
        if not routes:
            self._drop(value, to)
            return
        payload = self._encode(value, "message")
        for target, group in routes:
            self.sends.append([target, group, payload])

    def _drop(self, value: object, to: str | None) -> None:
        """Record (or, strict, refuse) a value that every condition declined."""
        type_name = type_label(type(value))
        targets = passed_over(self.edges, value, to)
        if self.strict:
            raise MessageDropped(
                f"executor {self.executor_id!r} sent {a_label(type_name)} that no executor "
                f"received: every condition declined it (targets handling it: "
                f"{', '.join(repr(t) for t in targets)}), and the workflow was built with "
                "strict_routing=True; make a condition (or a switch Default) take it, or "
                "build without strict_routing if dropping it is intended"
            )
        if self.dropped is None:
            self.dropped = []
        self.dropped.append([type_name, targets])

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
