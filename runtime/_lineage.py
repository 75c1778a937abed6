"""Lineage tags: what keeps request ids unique for the life of a session id.

A request id is ``"<executor>:<superstep>:<n>"``: unique within one lineage, whose
superstep counter only grows. A session id can have several lineages, though:
``reset()`` starts a new one, ``wf.session(id, store=..., if_exists="fresh")``
starts afresh beside the old one, and resuming an older checkpoint (time travel)
branches off. Each lineage but a session's first carries a tag, a random 32-bit
hex string, and the ids of the requests it makes end in ``"#<tag>"``, so an answer
can never reach a request it was not meant for.

The tag travels in every checkpoint's ``runtime`` record (under ``"lineage"``,
with ``"lineages"``: the tags whose requests the lineage may hold, inherited from
the checkpoints it continues), so a resumed session keeps making ids of its own
lineage. An answer to an id whose tag is none of those names a request of an
abandoned lineage and is refused as such.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._wire import pack

__all__ = ["Lineage", "tag_of"]

_TAGGED = re.compile(r"#([0-9a-f]{8})\Z")


def tag_of(request_id: str) -> str:
    """The lineage tag at the end of a default request id ("" for a session's first lineage)."""
    found = _TAGGED.search(request_id)
    return found.group(1) if found else ""


@dataclass(frozen=True, slots=True)
class Lineage:
    """The tag a lineage puts on its request ids, and the tags of requests it may hold."""

    tag: str = ""
    tags: tuple[str, ...] = ("",)

    @property
    def suffix(self) -> str:
        """What the lineage appends to a default request id ("" for the first lineage)."""
        return f"#{self.tag}" if self.tag else ""

    @staticmethod
    def fresh() -> Lineage:
        """A new lineage that holds nothing older (after ``reset()``, or started afresh)."""
        tag = os.urandom(4).hex()
        return Lineage(tag, (tag,))

    def branch(self) -> Lineage:
        """A new lineage continuing this one's state (resuming an older checkpoint)."""
        tag = os.urandom(4).hex()
        return Lineage(tag, (*self.tags, tag))

    @staticmethod
    def of(extra: Mapping[str, Any]) -> Lineage:
        """The lineage recorded in a checkpoint's runtime fields (first lineage if none)."""
        tag = extra.get("lineage", "")
        tags = extra.get("lineages", [tag])
        if not isinstance(tag, str) or not all(isinstance(t, str) for t in tags):
            return Lineage()
        return Lineage(tag, tuple(tags))

    def entries(self) -> dict[str, bytes]:
        """Runtime fields to record in every checkpoint (none for a first lineage)."""
        if not self.tag and self.tags == ("",):
            return {}
        return {"lineage": pack(self.tag), "lineages": pack(list(self.tags))}

    def holds(self, request_id: str) -> bool:
        """Whether a request with this id may belong to this lineage."""
        return tag_of(request_id) in self.tags
