"""Damage to FileStore segments that knows their frames (see ``actorflow.storage.file._segment``).

A frame is a prefix (magic, id length, pack length, crc32 of both lengths and the
id), the id, then a pack. The crc32 only proves that a prefix reads as it was
written, so these mutations mostly recompute it: a forged length then reaches the
scanner's checks of where a frame ends, which a flipped bit (caught by the crc32)
never does. Lengths are forged to the places that hide frames: past the end of the
file, onto a later frame's start, into the next frame's prefix, id or pack header,
short of the frame's own end.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SegmentFrame", "damage_frame", "frames_of"]

_PREFIX = struct.Struct(">8sIQI")
_LENGTHS = struct.Struct(">IQ")
_MAGIC = b"AFSEGF01"


@dataclass(frozen=True)
class SegmentFrame:
    """Where one frame of a healthy segment is."""

    start: int
    ident: bytes
    pack_length: int

    @property
    def base(self) -> int:
        """Where its pack starts."""
        return self.start + _PREFIX.size + len(self.ident)

    @property
    def end(self) -> int:
        return self.base + self.pack_length


def frames_of(data: bytes) -> list[SegmentFrame]:
    """The frames of a segment's bytes, up to the first that is not whole."""
    frames: list[SegmentFrame] = []
    at = 0
    while at + _PREFIX.size <= len(data):
        magic, id_length, pack_length, _ = _PREFIX.unpack_from(data, at)
        ident = data[at + _PREFIX.size : at + _PREFIX.size + id_length]
        frame = SegmentFrame(at, ident, pack_length)
        if magic != _MAGIC or frame.end > len(data):
            break
        frames.append(frame)
        at = frame.end
    return frames


def prefix(ident: bytes, pack_length: int, *, id_length: int | None = None) -> bytes:
    """A frame prefix and id whose crc32 checks out (``id_length`` may lie about the id)."""
    lengths = _LENGTHS.pack(len(ident) if id_length is None else id_length, pack_length)
    return _PREFIX.pack(_MAGIC, *_LENGTHS.unpack(lengths), zlib.crc32(lengths + ident)) + ident


def _forged_length(frames: list[SegmentFrame], k: int, size: int, rng: random.Random) -> int:
    frame, after = frames[k], frames[k + 1]
    later = rng.choice(frames[k + 1 :])
    choices = [
        1 << 40,
        (1 << 64) - 1,
        1 << 32,
        size - frame.base,  # to the end of the file: swallows every later frame
        size - frame.base + rng.choice([1, 16, 17, rng.randrange(1, 1 << 20)]),  # past it
        later.end - frame.base,  # onto the start of the frame after ``later``
        after.start + rng.randrange(1, _PREFIX.size + len(after.ident)) - frame.base,
        after.base + rng.randrange(0, 64) - frame.base,  # into the next pack's header
        rng.randrange(after.start, size) - frame.base,
        frame.pack_length - rng.choice([1, 15, 16, 17, rng.randrange(1, frame.pack_length + 1)]),
        0,
        rng.randrange(size),
    ]
    return min(max(rng.choice(choices), 0), (1 << 64) - 1)


def damage_frame(
    data: bytes, k: int, ids: list[bytes], rng: random.Random, pack: Callable[[bytes], bytes]
) -> tuple[bytes, str]:
    """Frame ``k`` of a healthy segment (never its last: see below) damaged in one way;
    returns the segment's new bytes and what was done (``length``, ``id-length``, ``id``,
    ``prefix-bit``, ``pack``).

    ``ids``: the ids of every frame of the store (for a forged id that repeats one);
    ``pack``: a mutation of a pack's bytes (its header forged, its record damaged).
    The last frame is left alone: its length forged to run past the end of the file
    is a torn tail, a save that never returned, by design (as a file cut short is).
    """
    frames = frames_of(data)
    frame = frames[k]
    head, rest = data[: frame.start], data[frame.end :]
    body = data[frame.base : frame.end]
    action = rng.randrange(10)
    if action < 5:  # the pack length, crc32 recomputed
        new = prefix(frame.ident, _forged_length(frames, k, len(data), rng))
        return head + new + body + rest, "length"
    if action == 5:  # the id length moved, the pack length moved back (or not)
        shift = rng.randrange(-len(frame.ident), 41)
        ident = (frame.ident + body)[: max(len(frame.ident) + shift, 0)]
        length = frame.pack_length - shift if rng.random() < 0.7 else frame.pack_length
        cut = max(shift, 0)
        return head + prefix(ident, max(length, 0)) + body[cut:] + rest, "id-length"
    if action == 6:  # another id: one the store holds, a new one, or no id at all
        ident = rng.choice(
            [rng.choice(ids), frame.ident[:-1] + b"0", frame.ident + b"x", b"", b"../x", b"a\x00b"]
        )
        return head + prefix(ident, frame.pack_length) + body + rest, "id"
    if action == 7:  # a bit of the prefix, crc32 not recomputed
        at = frame.start + rng.randrange(_PREFIX.size)
        flipped = bytes([data[at] ^ (1 << rng.randrange(8))])
        return data[:at] + flipped + data[at + 1 :], "prefix-bit"
    # The pack itself (header forged, record damaged), the frame's length following
    # it or not.
    new_body = pack(body)
    length = len(new_body) if rng.random() < 0.8 else frame.pack_length
    return head + prefix(frame.ident, length) + new_body + rest, "pack"
