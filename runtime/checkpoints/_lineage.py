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

Effect keys (see ``runtime._effects``) need more: a session id used anew (its old
session deleted, or the id used in another store or without one) starts a first
lineage again, with the same supersteps. So a session started from nothing gets an
*origin*, a random id its every cut records (``"origin"``), and the effects' scope
(:func:`effect_scope`) holds it: the keys of one use of a session id are never those
of another. Request ids do not hold it (they stay ``"<executor>:<superstep>:<n>"``):
an answer reaches only a session that has the request pending.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actorflow.runtime._wire import pack

__all__ = ["Lineage", "effect_scope", "superstep_of", "tag_of"]

_TAGGED = re.compile(r"#([0-9a-f]{8})\Z")
_STEP = re.compile(r":(\d+):\d+(?:#[0-9a-f]{8})?\Z")


def tag_of(request_id: str) -> str:
    """The lineage tag at the end of a default request id ("" for a session's first lineage)."""
    found = _TAGGED.search(request_id)
    return found.group(1) if found else ""


def superstep_of(request_id: str) -> int | None:
    """The superstep a default request id was made in (None for an explicit id)."""
    found = _STEP.search(request_id)
    return int(found.group(1)) if found else None


@dataclass(frozen=True, slots=True)
class Lineage:
    """The tag a lineage puts on its request ids, and the tags of requests it may hold.

    ``left`` maps an ancestor's tag to the superstep at which this lineage branched
    off it (time travel): that ancestor's requests made later belong to the branch
    left behind.
    """

    tag: str = ""
    tags: tuple[str, ...] = ("",)
    left: tuple[tuple[str, int], ...] = ()
    origin: str = ""
    """The random id of this use of the session id ("" in sessions stored before
    origins existed, and in a sub-workflow's private session, scoped by its parent)."""

    @property
    def suffix(self) -> str:
        """What the lineage appends to a default request id ("" for the first lineage)."""
        return f"#{self.tag}" if self.tag else ""

    def effect_scope(self, session: str) -> str:
        """What makes the effect keys of ``session`` in this lineage its own."""
        return effect_scope(session, self.origin, self.suffix)

    @staticmethod
    def first() -> Lineage:
        """The first lineage of a session started from nothing, with a new origin."""
        return Lineage(origin=_origin())

    @staticmethod
    def fresh() -> Lineage:
        """A new lineage that holds nothing older (after ``reset()``, or started afresh)."""
        tag = os.urandom(4).hex()
        return Lineage(tag, (tag,), origin=_origin())

    def forked(self) -> Lineage:
        """This lineage continued under another session id (``as_session=``): the same
        tags (its pending requests keep their ids), a new origin (its own keys)."""
        return Lineage(self.tag, self.tags, self.left, _origin())

    def branch(self, superstep: int) -> Lineage:
        """A new lineage continuing this one's state at ``superstep`` (time travel)."""
        tag = os.urandom(4).hex()
        left = dict(self.left)
        left.setdefault(self.tag, superstep)
        return Lineage(tag, (*self.tags, tag), tuple(sorted(left.items())), self.origin)

    @staticmethod
    def of(extra: Mapping[str, Any]) -> Lineage:
        """The lineage recorded in a checkpoint's runtime fields (first lineage if none)."""
        tag = extra.get("lineage", "")
        tags = extra.get("lineages", [tag])
        left = extra.get("left", {})
        origin = extra.get("origin", "")
        if (
            not isinstance(tag, str)
            or not isinstance(tags, list)
            or not all(isinstance(t, str) for t in tags)
            or not isinstance(left, dict)
            or not all(isinstance(k, str) and isinstance(v, int) for k, v in left.items())
            or not isinstance(origin, str)
        ):
            return Lineage()
        return Lineage(tag, tuple(tags), tuple(sorted(left.items())), origin)

    def entries(self) -> dict[str, bytes]:
        """Runtime fields to record in every checkpoint (only the origin, if any, for a
        first lineage)."""
        entries = {"origin": pack(self.origin)} if self.origin else {}
        if not self.tag and self.tags == ("",):
            return entries
        entries["lineage"] = pack(self.tag)
        entries["lineages"] = pack(list(self.tags))
        if self.left:
            entries["left"] = pack(dict(self.left))
        return entries

    def holds(self, request_id: str) -> bool:
        """Whether a request with this id may belong to this lineage."""
        tag = tag_of(request_id)
        if tag not in self.tags:
            return False
        branched = dict(self.left).get(tag)
        step = superstep_of(request_id)
        return branched is None or step is None or step <= branched


def effect_scope(session: str, origin: str, suffix: str) -> str:
    """The scope of effect keys: the session id, its origin and the lineage's tag
    (a session stored before origins existed keeps the keys it had: no origin part)."""
    if origin:
        return f"{session}\x00{origin}\x00{suffix}"
    return f"{session}\x00{suffix}"


def _origin() -> str:
    return os.urandom(8).hex()
