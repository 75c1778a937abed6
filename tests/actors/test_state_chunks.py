"""Chunked snapshot encoding: exact round trips, O(1) changed chunks per append, determinism."""

from __future__ import annotations

import copy
import datetime as dt
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorflow.actors import decode_state, encode, encode_state, message
from actorflow.actors.codec._chunks import ATTR_CHUNK_BYTES, LIST_CHUNK
from actorflow.errors import DecodeError, EncodeError


@message(name="test_state_chunks.Turn")
@dataclass
class Turn:
    role: str
    text: str


def _log(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "text": f"message {i:05d} ".ljust(80, ".")} for i in range(n)]


def sample_state() -> dict[str, Any]:
    return {
        "log": _log(1000),
        "turns": [Turn("user", str(i)) for i in range(LIST_CHUNK + 1)],
        "exactly_one_group": list(range(LIST_CHUNK)),
        "counter": 3,
        "pair": (1, "a"),
        "tags": {"b", "a"},
        "when": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        "blob": b"x" * (ATTR_CHUNK_BYTES + 1),
        "empty": [],
    }


def test_roundtrip_keeps_types_and_order() -> None:
    """decode_state(encode_state(s)) equals s, with value types and attribute order kept."""
    state = sample_state()
    result = decode_state(encode_state(state))
    assert result == state
    assert list(result) == list(state)
    assert type(result["pair"]) is tuple
    assert type(result["tags"]) is set
    assert type(result["turns"][0]) is Turn


def test_empty_state_is_one_manifest_chunk() -> None:
    """An empty snapshot encodes to just the manifest and decodes to an empty dict."""
    chunks = encode_state({})
    assert len(chunks) == 1
    assert decode_state(chunks) == {}


def test_long_lists_are_split_into_groups() -> None:
    """A top-level list longer than LIST_CHUNK becomes ceil(n / LIST_CHUNK) group chunks."""
    small = encode_state({"log": list(range(LIST_CHUNK))})
    split = encode_state({"log": list(range(3 * LIST_CHUNK + 1))})
    assert len(small) == 2  # manifest + the inline chunk
    assert len(split) == 1 + 4
    assert split[1] == encode(list(range(LIST_CHUNK)))


@settings(max_examples=40, deadline=None)
@given(st.integers(LIST_CHUNK - 2, 4 * LIST_CHUNK + 2))
def test_append_changes_only_last_group_and_manifest(n: int) -> None:
    """Appending one element changes two chunks at most: the manifest and the list's last group."""
    before: dict[str, Any] = {"counter": 1, "big": "y" * ATTR_CHUNK_BYTES, "log": _log(n)}
    after = {**before, "log": [*before["log"], {"id": n, "text": "new"}]}
    old, new = encode_state(before), encode_state(after)
    changed = [chunk for chunk in new if chunk not in set(old)]
    assert len(changed) <= 2
    if n + 1 > LIST_CHUNK:  # split (the log is the last attribute, so its groups come last)
        assert set(changed) == {new[0], new[-1]}
        assert new[1:-1] == old[1 : len(new) - 1]
    assert decode_state(new) == after


def test_small_attribute_change_keeps_big_chunks() -> None:
    """Changing a small attribute leaves the chunks of big attributes and list groups unchanged."""
    state = sample_state()
    old = encode_state(state)
    new = encode_state({**state, "counter": 4})
    assert len(set(new) - set(old)) == 1
    assert new[0] == old[0]  # same manifest: only the chunk of small attributes changed
    assert new[1] != old[1]


def test_encoding_is_deterministic_in_process() -> None:
    """The same state, or a deep copy of it, gives byte-identical chunks."""
    state = sample_state()
    assert encode_state(state) == encode_state(state)
    assert encode_state(state) == encode_state(copy.deepcopy(state))


_CHILD = """
import sys
from dataclasses import dataclass
from actorflow.actors import encode_state, message

@message(name="test_state_chunks.Turn")
@dataclass
class Turn:
    role: str
    text: str

state = {"tags": {f"tag{i}" for i in range(50)}, "mixed": {1, "a", (2, 3), b"z", None},
         "turns": [Turn("user", str(i)) for i in range(300)]}
sys.stdout.write(b"".join(encode_state(state)).hex())
"""


def test_encoding_is_deterministic_across_processes() -> None:
    """Sets encode in a canonical order: two processes with different hash seeds agree."""
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0]


def test_error_path_names_the_attribute() -> None:
    """An unencodable value raises EncodeError with its path under state[...]."""
    with pytest.raises(EncodeError, match=r"state\['cache'\]\['k'\]"):
        encode_state({"ok": 1, "cache": {"k": object()}})


def test_error_path_in_a_split_list_uses_the_full_index() -> None:
    """Inside a split list the path gives the element's index in the whole list."""
    log: list[Any] = list(range(LIST_CHUNK + 50))
    log[LIST_CHUNK + 3] = object()
    with pytest.raises(EncodeError, match=rf"state\['log'\]\[{LIST_CHUNK + 3}\]"):
        encode_state({"log": log})


def test_non_str_attribute_name_is_an_encode_error() -> None:
    """Snapshot attribute names must be str."""
    with pytest.raises(EncodeError, match="must be str"):
        encode_state({1: "x"})  # type: ignore[dict-item]  # the misuse under test


def _tampered(chunks: list[bytes]) -> list[list[bytes]]:
    return [
        [],
        chunks[:-1],
        [*chunks, chunks[-1]],
        [chunks[0], *reversed(chunks[1:])],
        [chunks[1], *chunks[1:]],
        [encode([2, []]), *chunks[1:]],
        [encode("not a manifest"), *chunks[1:]],
        [encode([1, [["log", 7, 1, 0]]])],
        [encode([1, [["a", 0, 0, 0], ["a", 0, 0, 0]]]), encode([1, 2])],
        [chunks[0][:-1], *chunks[1:]],
    ]


def test_tampered_chunks_raise_decode_error() -> None:
    """Missing, extra, reordered, truncated or malformed chunks raise DecodeError."""
    chunks = encode_state({"a": 1, "log": list(range(3 * LIST_CHUNK)), "big": "z" * 5000})
    for bad in _tampered(chunks):
        with pytest.raises(DecodeError):
            decode_state(bad)


@pytest.mark.parametrize("bad", [b"\x91\x01", "text", None], ids=repr)
def test_decode_state_rejects_non_sequences(bad: Any) -> None:
    """decode_state wants the list of chunks, not one bytes object (or anything else)."""
    with pytest.raises(DecodeError):
        decode_state(bad)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=4))
def test_random_chunks_only_raise_decode_error(chunks: list[bytes]) -> None:
    """Random chunk lists either decode or raise DecodeError, nothing else."""
    try:
        decode_state(chunks)
    except DecodeError:
        pass
