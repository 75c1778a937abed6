"""Fuzz targets: a decoder each, with valid seeds and a structure-aware mutator.

A target turns an input (bytes, so that a failing one can be saved and replayed)
into one call of the code under test. The contract is the same for all: return
or raise an ``ActorflowError``; anything else is a finding (see ``_guard``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from actorflow.actors import decode, decode_state, encode, encode_state
from actorflow.runtime.checkpoints._checkpointing import check_runtime_bytes
from actorflow.runtime.checkpoints._state import PackedEntries, RunState, decode_runtime
from actorflow.storage import decode_checkpoint, encode_checkpoint
from actorflow.storage._format import _frame_digest
from actorflow.storage.conformance import make_checkpoint

from ._mutate import mutate, mutate_bytes, packb
from ._values import random_value

__all__ = ["TARGETS", "Target"]


@dataclass(frozen=True)
class Target:
    """One decoder under fuzzing."""

    name: str
    seed: Callable[[random.Random], bytes]
    """A valid input."""
    mutate: Callable[[bytes, random.Random], bytes]
    """A mutant of a valid input."""
    check: Callable[[bytes], object]
    """The code under test, on one input."""


# --- wire ------------------------------------------------------------------------


def _wire_seed(rng: random.Random) -> bytes:
    return encode(random_value(rng))


def _wire_mutate(data: bytes, rng: random.Random) -> bytes:
    return mutate(data, rng)


# --- snapshots: an input is a msgpack array of the chunks ------------------------


def _snapshot_seed(rng: random.Random) -> bytes:
    state: dict[str, Any] = {f"a{i}": random_value(rng) for i in range(rng.randrange(1, 4))}
    if rng.random() < 0.3:
        state["big"] = list(range(rng.randrange(200, 700)))
    if rng.random() < 0.2:
        state["blob"] = rng.randbytes(5000)
    return packb(encode_state(state))


def _snapshot_mutate(data: bytes, rng: random.Random) -> bytes:
    chunks: list[bytes] = msgpack.unpackb(data)
    action = rng.randrange(5)
    if action == 0 and len(chunks) > 1:
        del chunks[rng.randrange(len(chunks))]
    elif action == 1:
        chunks.insert(rng.randrange(len(chunks) + 1), rng.choice(chunks))
    else:  # one chunk mutated as wire bytes (chunk 0 is the manifest)
        at = 0 if action == 2 else rng.randrange(len(chunks))
        chunks[at] = mutate(chunks[at], rng, chunks)
    return packb(chunks)


def _snapshot_check(data: bytes) -> object:
    # The list of chunks is the harness's own framing, not decoder input: a mutant
    # whose framing broke (a bytes-level fallback) has no chunks to give the decoder.
    try:
        chunks = msgpack.unpackb(data)
    except Exception:  # noqa: BLE001
        return None
    if type(chunks) is not list or not all(type(c) is bytes for c in chunks):
        return None
    return decode_state(chunks)


# --- records: the body is mutated and the frame signed again ---------------------


def _record_seed(rng: random.Random) -> bytes:
    runtime = runtime_seed(rng)
    metadata = {"user": "x", "n": rng.randrange(9), "tags": ["a", b"b"], "nested": {"k": 1.5}}
    cp, _ = make_checkpoint(runtime=runtime, metadata=metadata)
    return encode_checkpoint(cp)


def sign(version: int, body: bytes) -> bytes:
    """A record frame around ``body`` with a correct digest: past the integrity check."""
    return packb(["actorflow.checkpoint", version, _frame_digest(version, body), body])


def _record_mutate(data: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.2:
        return mutate_bytes(data, rng)
    _, version, _, body = msgpack.unpackb(data)
    if rng.random() < 0.05:
        version = rng.choice([0, 2, 3, -1, 1 << 40])
    return sign(version, mutate(body, rng))


def _record_check(data: bytes) -> object:
    cp = decode_checkpoint(data)
    return check_runtime_bytes(cp.runtime)


# --- the runtime field -----------------------------------------------------------


def runtime_seed(rng: random.Random) -> bytes:
    """A runtime field as the supervisor writes it (a cut's, or now and then a partial's)."""
    payload = [encode(random_value(rng)) for _ in range(3)]
    state = RunState(
        superstep=rng.randrange(50),
        inbox={
            "b": [
                ["a", -1, payload[0]],
                ["a", 0, payload[:2]],
                ["r", -2, ["q1", payload[1], payload[2]]],
            ]
        },
        fan_in={0: {"a": [payload[0]]}} if rng.random() < 0.5 else {},
        pending={"q2": ["a", payload[2], "int"]} if rng.random() < 0.5 else {},
        answered={"q0"} if rng.random() < 0.5 else set(),
    )
    graph = {
        "start": "a",
        "executors": {"a": {"type": "m.A", "handlers": ["int"]}},
        "edges": [["edge", "a", ["b"], False]],
        "fan_in": [],
    }
    if rng.random() < 0.2:
        return packb({"partial": "a", "report": [[["b", -1, payload[0]]], [payload[1]], []]})
    return state.to_bytes(PackedEntries({"graph": packb(graph)}))


def _runtime_mutate(data: bytes, rng: random.Random) -> bytes:
    return mutate(data, rng)


def _runtime_check(data: bytes) -> object:
    body = check_runtime_bytes(data)
    if "partial" not in body:
        decode_runtime(data)
        RunState.from_bytes(data, {})
    return body


TARGETS: dict[str, Target] = {
    "wire": Target("wire", _wire_seed, _wire_mutate, decode),
    "snapshot": Target("snapshot", _snapshot_seed, _snapshot_mutate, _snapshot_check),
    "record": Target("record", _record_seed, _record_mutate, _record_check),
    "runtime": Target("runtime", runtime_seed, _runtime_mutate, _runtime_check),
}
"""The decoder targets by name (the store targets are in :mod:`fuzz.stores`)."""
