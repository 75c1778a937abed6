"""Reading server-sent events from an httpx response, as a client would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Sse:
    """One server-sent event."""

    event: str
    data: Any
    id: int | str | None
    """A history event's seq (the last event of its group), else ``"N:k"`` (see
    ``actorflow.serve._stream``)."""


def read_sse(response: httpx.Response) -> Iterator[Sse]:
    """The events of ``response`` (a streaming one) as they arrive."""
    event, data = "", ""
    seq: int | str | None = None
    for line in response.iter_lines():
        if not line:
            if event or data:
                yield Sse(event, json.loads(data) if data else None, seq)
            event, data, seq = "", "", None
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif line.startswith("id:"):
            given = line[3:].strip()
            seq = int(given) if given.isdigit() else given
