"""Chunked encoding of executor snapshots, for incremental checkpoints.

A snapshot (attribute name -> value) becomes a list of byte chunks that the store
keeps content-addressed, so a chunk that did not change is not stored again:

- chunk 0, the manifest: ``[STATE_FORMAT, [[name, kind, n_chunks, n_items], ...]]``,
  one entry per attribute in the snapshot's order;
- chunk 1, when some attribute is ``KIND_INLINE``: a msgpack array of those values,
  in manifest order (small attributes travel together);
- then, in manifest order, each ``KIND_CHUNK`` attribute's encoding (an attribute
  whose encoding reaches ATTR_CHUNK_BYTES gets a chunk of its own, so that a small
  attribute changing does not rewrite it), and each ``KIND_LIST`` attribute's
  element groups: a top-level ``list`` longer than LIST_CHUNK is cut into groups of
  LIST_CHUNK elements, each encoded as a list. Appending to it changes only its last
  group and the manifest.

Each chunk is the :func:`~actorflow.actors.encode` of a value, so every guarantee of
the codec (registered types only, DecodeError on bad bytes) holds for snapshots.
``n_items`` is the list length for ``KIND_LIST`` and 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actorflow.errors import DecodeError, EncodeError

from ._decode import decode
from ._encode import array_header, encode, encode_at
from ._registry import qualified_name

STATE_FORMAT = 1
"""Version of the manifest layout; decode_state rejects any other."""

LIST_CHUNK = 256
"""Elements per group when a top-level list attribute is split."""

ATTR_CHUNK_BYTES = 4096
"""An attribute whose encoding is at least this long gets a chunk of its own."""

KIND_INLINE = 0
KIND_CHUNK = 1
KIND_LIST = 2


def encode_state(state: Mapping[str, object]) -> list[bytes]:
    """Encode an executor snapshot into content-addressable chunks.

    Deterministic: the same snapshot (same values, same attribute order) gives
    byte-identical chunks, in any process.

    Args:
        state: attribute name -> value. Not modified, not retained.

    Returns:
        The chunks, manifest first (layout in the module docstring); the caller owns them.

    Raises:
        EncodeError: a name is not a str, or a value cannot be encoded; the message
            names where, as in ``state['cache'][3]``.
    """
    entries: list[list[object]] = []
    inline: list[bytes] = []
    data: list[bytes] = []
    for name, value in state.items():
        if type(name) is not str:
            raise EncodeError(
                f"snapshot attribute names must be str, got {name!r}",
                type_name=qualified_name(type(name)),
            )
        label = f"state[{name!r}]"
        if type(value) is list and len(value) > LIST_CHUNK:
            try:
                groups = [
                    encode(value[start : start + LIST_CHUNK])
                    for start in range(0, len(value), LIST_CHUNK)
                ]
            except EncodeError:
                encode_at(value, label)  # raises again, with the path in the whole list
                raise
            entries.append([name, KIND_LIST, len(groups), len(value)])
            data += groups
            continue
        encoded = encode_at(value, label)
        if len(encoded) >= ATTR_CHUNK_BYTES:
            entries.append([name, KIND_CHUNK, 1, 0])
            data.append(encoded)
        else:
            entries.append([name, KIND_INLINE, 0, 0])
            inline.append(encoded)
    chunks = [encode([STATE_FORMAT, entries])]
    if inline:
        chunks.append(array_header(len(inline)) + b"".join(inline))
    chunks += data
    return chunks


def decode_state(chunks: Sequence[bytes]) -> dict[str, Any]:
    """Decode chunks written by :func:`encode_state` back into the snapshot.

    Args:
        chunks: the chunks, in the order encode_state returned them.

    Returns:
        A new dict, attribute name -> value, in the original order; the caller owns it.

    Raises:
        DecodeError: the chunks are missing, extra, reordered, corrupt, or of another
            format version; or a value in them cannot be decoded (see :func:`decode`).
    """
    entries = _manifest(chunks)
    n_inline = sum(1 for entry in entries if entry[1] == KIND_INLINE)
    inline: list[Any] = []
    position = 1
    if n_inline:
        inline = _group(chunks, position)
        position += 1
        if len(inline) != n_inline:
            raise DecodeError("the snapshot's inline chunk does not match its manifest")
    state: dict[str, Any] = {}
    next_inline = iter(inline)
    for name, kind, n_chunks, n_items in entries:
        if name in state:
            raise DecodeError(f"the snapshot manifest names {name!r} twice")
        if kind == KIND_INLINE:
            state[name] = next(next_inline)
        elif kind == KIND_CHUNK:
            state[name] = _chunk(chunks, position)
        else:
            items: list[Any] = []
            for index in range(position, position + n_chunks):
                items += _group(chunks, index)
            if len(items) != n_items:
                raise DecodeError(f"state[{name!r}] has {len(items)} items, expected {n_items}")
            state[name] = items
        position += n_chunks
    if position != len(chunks):
        raise DecodeError(f"the snapshot has {len(chunks)} chunks, its manifest {position}")
    return state


def state_names(chunks: Sequence[bytes]) -> list[str]:
    """The attribute names of a snapshot, in order, read from its manifest chunk alone.

    Raises:
        DecodeError: the manifest is missing, corrupt or of another format version.
    """
    return [entry[0] for entry in _manifest(chunks)]


def check_state(chunks: Sequence[bytes], trusted: Sequence[bool]) -> list[str]:
    """Check a snapshot's chunks as :func:`decode_state` would, without keeping its values.

    The manifest is read and checked, and so is the number of chunks it implies;
    every chunk not ``trusted`` (for example, one byte-identical to a chunk the
    caller encoded itself) is decoded, so it gets every check of :func:`decode`,
    and dropped. What only assembling the state checks (each list group holds a
    list, the item counts) is left to :func:`decode_state`.

    Args:
        chunks: the chunks, manifest first.
        trusted: one flag per chunk: True to skip decoding it.

    Returns:
        The attribute names, in order.

    Raises:
        DecodeError: the manifest is corrupt or of another format version, the chunk
            count does not match it, or an untrusted chunk does not decode.
    """
    entries = _manifest(chunks)
    inline = any(entry[1] == KIND_INLINE for entry in entries)
    expected = 1 + inline + sum(entry[2] for entry in entries)
    if expected != len(chunks):
        raise DecodeError(f"the snapshot has {len(chunks)} chunks, its manifest {expected}")
    for chunk, skip in zip(chunks[1:], trusted[1:], strict=True):
        if not skip:
            decode(chunk)
    return [entry[0] for entry in entries]


def _manifest(chunks: Sequence[bytes]) -> list[list[Any]]:
    """The checked manifest entries of a snapshot's chunks."""
    given: object = chunks  # checked at run time too: one bytes object is a common mistake
    if isinstance(given, bytes | bytearray | str) or not isinstance(given, Sequence):
        raise DecodeError("decode_state expects the sequence of chunks from encode_state")
    if not chunks:
        raise DecodeError("a snapshot has at least its manifest chunk; got no chunks")
    manifest = decode(chunks[0])
    if type(manifest) is not list or len(manifest) != 2 or type(manifest[1]) is not list:
        raise DecodeError("malformed snapshot manifest")
    version, entries = manifest
    # The type first: comparing a Decimal sNaN raises, and a huge int has no repr.
    if type(version) is not int or version != STATE_FORMAT:
        shown = (
            version if type(version) is int and abs(version) < 1 << 64 else type(version).__name__
        )
        raise DecodeError(
            f"unsupported snapshot format {shown!r} (this build reads {STATE_FORMAT})"
        )
    if not all(_valid_entry(entry) for entry in entries):
        raise DecodeError("malformed snapshot manifest entry")
    checked: list[list[Any]] = entries
    return checked


def _valid_entry(entry: object) -> bool:
    if type(entry) is not list or len(entry) != 4:
        return False
    name, kind, n_chunks, n_items = entry
    if type(name) is not str or type(n_chunks) is not int or type(n_items) is not int:
        return False
    expected = {KIND_INLINE: n_chunks == 0, KIND_CHUNK: n_chunks == 1, KIND_LIST: n_chunks >= 1}
    return type(kind) is int and expected.get(kind, False) and n_items >= 0


def _chunk(chunks: Sequence[bytes], index: int) -> Any:
    if index >= len(chunks):
        raise DecodeError(f"the snapshot's manifest refers to chunk {index}, which is missing")
    return decode(chunks[index])


def _group(chunks: Sequence[bytes], index: int) -> list[Any]:
    value = _chunk(chunks, index)
    if type(value) is not list:
        raise DecodeError(f"snapshot chunk {index} should hold a list and does not")
    return value
