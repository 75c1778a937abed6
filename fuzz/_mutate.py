"""Structure-aware mutation of msgpack (and actorflow wire) bytes.

Bytes are parsed into a tree (:class:`Map` keeps pairs, so duplicate and
unhashable keys survive; :class:`Ext` keeps an ext's payload parsed as a tree
when it is msgpack), one node is mutated, and the tree is packed again: most
mutants are well-formed msgpack that reach the checks behind the parser (types,
shapes, hashes, time zones, names), which flipping bits alone rarely does. Some
mutants are then damaged as bytes too (flips, truncation, splices).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import msgpack

__all__ = ["Ext", "Map", "mutate", "mutate_bytes", "pack_tree", "packb", "parse_tree"]


def packb(value: Any) -> bytes:
    """Plain msgpack (bin type for bytes), typed."""
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


# Ext codes whose payload is msgpack (see actorflow.actors.codec._encode); 4, 9, 10 are raw.
_NESTED_EXTS = frozenset({1, 2, 3, 5, 6, 7, 8, 11, 12})
_P = (1 << 61) - 1
_BOUNDARY_INTS = [
    0,
    1,
    -1,
    -2,
    24,
    31,
    9999,
    10000,
    1 << 31,
    -(1 << 31) - 1,
    (1 << 62) - 1,
    1 << 62,
    (1 << 63) - 1,
    -(1 << 63),
    (1 << 64) - 1,
    _P,
    -_P,
]
_ZONE_KEYS = [
    "UTC",
    "Europe/Paris",
    "Evil/Zone",
    "Nowhere",
    "tzdata",
    "Evil/Deeper/Zone",
    "../x",
    "/etc/passwd",
    "posixrules",
    "Europe",
    "Factory",
    "zone1970.tab",
    "a" * 300,
    "",
    "actorflow_planted/x",
    "evil",
]
_NAMES = [
    "fuzz.Point",
    "fuzz.Reading",
    "fuzz.Colour",
    "fuzz.Shade",
    "os.system",
    "builtins.eval",
    "",
]


@dataclass
class Map:
    pairs: list[list[Any]]


@dataclass
class Ext:
    code: int
    body: Any
    """A parsed tree for msgpack payloads, else the raw payload bytes."""


def parse_tree(data: bytes) -> Any:
    """Parse msgpack into a mutable tree (ValueError if it does not parse)."""

    def ext(code: int, payload: bytes) -> Ext:
        if code in _NESTED_EXTS:
            try:
                return Ext(code, parse_tree(payload))
            except Exception:  # noqa: BLE001 - an opaque payload stays bytes
                return Ext(code, payload)
        return Ext(code, payload)

    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=False,
        use_list=True,
        ext_hook=ext,
        object_pairs_hook=lambda pairs: Map([list(p) for p in pairs]),
    )


def pack_tree(node: Any) -> bytes:
    """Pack a tree back into msgpack bytes (ints beyond 64 bits are clamped)."""
    out: list[bytes] = []
    _pack_into(node, out, msgpack.Packer(use_bin_type=True, autoreset=True))
    return b"".join(out)


def _pack_into(node: Any, out: list[bytes], packer: msgpack.Packer) -> None:
    if isinstance(node, Map):
        out.append(packer.pack_map_header(len(node.pairs)))
        for key, value in node.pairs:
            _pack_into(key, out, packer)
            _pack_into(value, out, packer)
    elif isinstance(node, list):
        out.append(packer.pack_array_header(len(node)))
        for item in node:
            _pack_into(item, out, packer)
    elif isinstance(node, Ext):
        payload = node.body if isinstance(node.body, bytes) else pack_tree(node.body)
        out.append(packer.pack_ext_type(node.code, payload))
    elif isinstance(node, int) and not isinstance(node, bool):
        out.append(packer.pack(max(-(1 << 63), min(node, (1 << 64) - 1))))
    else:
        out.append(packer.pack(node))


def _nodes(root: Any, limit: int = 2000) -> list[tuple[Any, ...]]:
    """Paths to the nodes of a tree (a path is a tuple of steps into lists, pairs and exts).

    Breadth first, at most ``limit`` paths and 60 levels: enough to pick from.
    """
    found: list[tuple[Any, ...]] = []
    queue: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    at = 0
    while at < len(queue) and len(found) < limit:
        node, path = queue[at]
        at += 1
        found.append(path)
        if len(path) > 60:
            continue
        if isinstance(node, list):
            queue += [(item, (*path, i)) for i, item in enumerate(node[:50])]
        elif isinstance(node, Map):
            for i, (key, value) in enumerate(node.pairs[:50]):
                queue += [(key, (*path, ("k", i))), (value, (*path, ("v", i)))]
        elif isinstance(node, Ext) and not isinstance(node.body, bytes):
            queue.append((node.body, (*path, "ext")))
    return found


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        if step == "ext":
            node = node.body
        elif isinstance(step, tuple):
            node = node.pairs[step[1]][0 if step[0] == "k" else 1]
        else:
            node = node[step]
    return node


def _set(root: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = _get(root, path[:-1])
    step = path[-1]
    if step == "ext":
        parent.body = value
    elif isinstance(step, tuple):
        parent.pairs[step[1]][0 if step[0] == "k" else 1] = value
    else:
        parent[step] = value
    return root


def _colliding(rng: random.Random) -> list[Any]:
    n = 20000 if rng.random() < 0.02 else rng.choice([40, 100, 400, 2000])
    kind = rng.randrange(4)
    multiples = [(k + 1) * _P * (1 << 64) for k in range(n)]
    if kind == 0:
        return [
            Ext(4, m.to_bytes((m.bit_length() + 8) // 8, "big", signed=True)) for m in multiples
        ]
    if kind == 1:
        return [Ext(10, str(m).encode()) for m in multiples]
    if kind == 2:
        return [Ext(9, ((k + 1) * _P).to_bytes(16, "big")) for k in range(n)]
    return [
        Ext(1, [Ext(4, m.to_bytes((m.bit_length() + 8) // 8, "big", signed=True))])
        for m in multiples
    ]


def _replacement(rng: random.Random, node: Any) -> Any:
    """Something to put where ``node`` was."""
    choice = rng.randrange(16)
    if choice == 0:
        return rng.choice(_BOUNDARY_INTS) + rng.randrange(-1, 2)
    if choice == 1:
        return rng.choice([None, True, False, 0.5, float("nan"), "", b"", [], Map([])])
    if choice == 2:
        return rng.choice(["x", "\u00e9" * rng.randrange(40), "a" * rng.randrange(1, 5000)])
    if choice == 3:
        return rng.randbytes(rng.randrange(40))
    if choice == 4:  # nesting
        wrapped = node
        for _ in range(rng.choice([2, 9, 50, 120])):
            wrapped = Ext(1, [wrapped]) if rng.random() < 0.5 else [wrapped]
        return wrapped
    if choice == 5:
        return Ext(rng.choice([2, 3]), _colliding(rng))
    if choice == 6:
        return Map([[key, 0] for key in _colliding(rng)])
    if choice == 7:
        return Ext(
            rng.choice([5, 7]),
            [2024, 1, 2, 3, 4, 5, 6, 0, rng.choice(_ZONE_KEYS)][: rng.choice([9, 6])],
        )
    if choice == 8:
        return Ext(
            12, [rng.choice(_NAMES), Map([[rng.choice(["x", "y", "sensor", "seen", "zz"]), node]])]
        )
    if choice == 9:
        return Ext(11, [rng.choice(_NAMES), rng.choice(["RED", "BLUE", ["LIGHT", "DARK"], [], 1])])
    if choice == 10:
        return Ext(
            rng.choice([-1, 0, 4, 9, 10, 13, 127, -128]),
            rng.randbytes(rng.choice([0, 1, 4, 8, 12, 16, 17])),
        )
    if choice == 11:
        return Ext(rng.randrange(1, 13), node)
    if choice == 12:
        return Ext(
            10, rng.choice([b"1e999999999", b"NaN123", b"\xff", b"1" * 5000, b"-sNaN", b"Infinity"])
        )
    if choice == 13:
        return Ext(4, rng.choice([b"", b"\x00", b"\x00\x01", b"\x80" + b"\x00" * 8, b"\x01" * 9]))
    if choice == 14:
        return [node] * rng.choice([2, 3, 100])
    return Ext(
        rng.choice([6, 8]), [rng.choice(_BOUNDARY_INTS) for _ in range(rng.choice([2, 3, 4]))]
    )


def mutate_tree(tree: Any, rng: random.Random) -> Any:
    """Apply 1-3 structural mutations to ``tree`` (which it changes) and return it."""
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = _nodes(tree)
        path = rng.choice(paths)
        node = _get(tree, path)
        action = rng.randrange(8)
        if action < 4:
            tree = _set(tree, path, _replacement(rng, node))
        elif action == 4 and isinstance(node, list) and node:
            del node[rng.randrange(len(node))]
        elif action == 5 and isinstance(node, list) and node:
            node.insert(rng.randrange(len(node) + 1), rng.choice(node))
        elif action == 6 and isinstance(node, Map) and node.pairs:
            node.pairs.append(list(rng.choice(node.pairs)))  # a duplicate key
        elif action == 7 and isinstance(node, Ext):
            node.code = rng.choice([-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 100])
        else:
            tree = _set(tree, path, _replacement(rng, node))
    return tree


def mutate_bytes(data: bytes, rng: random.Random, others: list[bytes] | None = None) -> bytes:
    """Byte-level damage: bit flips, truncation, insertion, a splice, a forged length."""
    buf = bytearray(data)
    action = rng.randrange(6)
    if not buf or action == 0:
        buf += rng.randbytes(rng.randrange(1, 8))
    elif action == 1:
        for _ in range(rng.choice([1, 1, 2, 4])):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif action == 2:
        del buf[rng.randrange(len(buf)) :]
    elif action == 3:
        at = rng.randrange(len(buf))
        buf[at:at] = rng.randbytes(rng.randrange(1, 6))
    elif action == 4 and others:
        other = rng.choice(others)
        cut = rng.randrange(len(buf))
        buf = buf[:cut] + other[rng.randrange(len(other) + 1) :]
    elif action == 5 and rng.random() < 0.2:  # nesting past every limit, as bytes
        buf = (
            bytearray(
                rng.choice([b"\x91", b"\xc7\x00\x01"][:1]) * rng.choice([1023, 1024, 1025, 5000])
            )
            + buf
        )
    else:
        at = rng.randrange(len(buf))
        buf[at : at + 4] = rng.choice(
            [b"\xff\xff\xff\xff", b"\xdd\x7f\xff\xff", b"\xc6\xff\xff\xff"]
        )
    return bytes(buf)


def mutate(data: bytes, rng: random.Random, others: list[bytes] | None = None) -> bytes:
    """A mutant of valid msgpack ``data``: structural, bytes-level, or both."""
    if rng.random() < 0.75:
        try:
            tree = parse_tree(data)
        except Exception:  # noqa: BLE001 - not msgpack: damage bytes only
            return mutate_bytes(data, rng, others)
        mutated = pack_tree(mutate_tree(tree, rng))
        return mutate_bytes(mutated, rng, others) if rng.random() < 0.15 else mutated
    return mutate_bytes(data, rng, others)
