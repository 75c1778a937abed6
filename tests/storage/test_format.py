"""The checkpoint record, its encoding, ids and digests (actorflow.storage._format)."""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import pickle
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorflow.errors import CheckpointCorrupt, EncodeError, UnsupportedFormat
from actorflow.storage import (
    FORMAT_VERSION,
    Checkpoint,
    CheckpointKind,
    HistoryEntry,
    blob_digest,
    decode_checkpoint,
    encode_checkpoint,
    new_checkpoint_id,
)
from actorflow.storage._format import RECORD_ID_SPAN, record_id

DIGEST = blob_digest(b"chunk")


def make(**overrides: Any) -> Checkpoint:
    fields: dict[str, Any] = {
        "id": new_checkpoint_id(),
        "parent_id": new_checkpoint_id(),
        "session": "s",
        "workflow": "w",
        "graph_signature": "ab" * 32,
        "superstep": 3,
        "kind": CheckpointKind.STEP,
        "created_at": 1700000000.5,
        "executors": {"e": (DIGEST,)},
        "runtime": b"\x90",
        "metadata": {"k": [1, {"n": b"x"}]},
    }
    fields.update(overrides)
    return Checkpoint(**fields)


def frame(version: int, body: bytes) -> bytes:
    """Build a record frame by hand, as docs/storage.md specifies it."""
    magic = "actorflow.checkpoint"
    digest = hashlib.sha256(f"{magic}:{version}:".encode() + body).digest()
    packed: bytes = msgpack.packb([magic, version, digest, body], use_bin_type=True)
    return packed


def body_of(cp: Checkpoint, **changes: Any) -> bytes:
    """The msgpack body of ``cp`` with fields replaced by raw values."""
    fields: dict[str, Any] = msgpack.unpackb(msgpack.unpackb(encode_checkpoint(cp))[3])
    fields.update(changes)
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    st.builds(
        make,
        metadata=st.dictionaries(st.text(max_size=8), plain, max_size=5),
        session=st.text(),
        superstep=st.integers(0, 2**63 - 1),
        runtime=st.binary(),
        kind=st.sampled_from(CheckpointKind),
        created_at=st.floats(allow_nan=False),
    )
)
def test_roundtrip_is_exact(cp: Checkpoint) -> None:
    """Any record with plain metadata decodes equal to itself, with the same encoding."""
    decoded = decode_checkpoint(encode_checkpoint(cp))
    assert decoded == cp
    assert encode_checkpoint(decoded) == encode_checkpoint(cp)


def test_every_bit_flip_is_detected() -> None:
    """Flipping any single bit of an encoded record raises CheckpointCorrupt."""
    data = encode_checkpoint(make())
    for i in range(len(data)):
        for bit in range(8):
            damaged = data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1 :]
            with pytest.raises(CheckpointCorrupt):
                decode_checkpoint(damaged)


def test_every_truncation_and_extension_is_detected() -> None:
    """A record cut at any length, or with bytes appended, raises CheckpointCorrupt."""
    data = encode_checkpoint(make())
    for n in range(len(data)):
        with pytest.raises(CheckpointCorrupt):
            decode_checkpoint(data[:n])
    with pytest.raises(CheckpointCorrupt):
        decode_checkpoint(data + b"\x00")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_corrupt(data: bytes) -> None:
    """Arbitrary bytes raise CheckpointCorrupt: never another error, None or a dict."""
    with pytest.raises(CheckpointCorrupt):
        decode_checkpoint(data)


def test_non_bytes_raise_corrupt() -> None:
    """A value that is not bytes at all is reported as corrupt, not as a TypeError."""
    with pytest.raises(CheckpointCorrupt):
        decode_checkpoint("not bytes")  # type: ignore[arg-type]  # checking the runtime guard


def test_intact_record_of_other_version_is_unsupported() -> None:
    """A well-formed frame with an unknown version raises UnsupportedFormat."""
    with pytest.raises(UnsupportedFormat, match=f"version {FORMAT_VERSION + 1}"):
        decode_checkpoint(frame(FORMAT_VERSION + 1, b"whatever a future version writes"))


def test_format_2_records_still_decode_without_history() -> None:
    """A record of format 2 (no history field, what earlier versions wrote) reads back
    as the same record with an empty history."""
    cp = make()
    fields: dict[str, Any] = msgpack.unpackb(body_of(cp))
    del fields["history"]
    old = frame(2, msgpack.packb(fields, use_bin_type=True))
    assert decode_checkpoint(old) == cp
    assert record_id(old[:RECORD_ID_SPAN]) == cp.id


def test_history_entries_round_trip_in_the_record() -> None:
    """A record's history entries are encoded with it and come back equal, each naming
    the record; a record of another format version is refused as corrupt if it carries
    a field its version does not have."""
    ident = new_checkpoint_id()
    entries = (
        HistoryEntry(4, "run_started", 1.5, b"\x80", ident),
        HistoryEntry(9, "output", 2.5, b"\x01", ident),
    )
    cp = make(id=ident, history=entries)
    back = decode_checkpoint(encode_checkpoint(cp))
    assert back.history == entries
    assert all(e.checkpoint_id == ident for e in back.history)
    with pytest.raises(CheckpointCorrupt):
        decode_checkpoint(frame(2, body_of(cp)))


@pytest.mark.parametrize(
    ("entries", "error"),
    [
        (
            [HistoryEntry(2, "output", 1.0, b"", "r"), HistoryEntry(2, "output", 1.0, b"", "r")],
            ValueError,
        ),
        ([(1, "output", 1.0, b"")], TypeError),
    ],
)
def test_history_entries_are_checked(entries: list[Any], error: type[Exception]) -> None:
    """Entries must be HistoryEntry values ascending strictly by seq."""
    with pytest.raises(error):
        make(id="r", history=tuple(entries))


def test_history_entries_name_the_record_that_holds_them() -> None:
    """An entry naming another record (a record copied under a new id) names this one."""
    copied = make(id="copy", history=(HistoryEntry(1, "output", 1.0, b"", "original"),))
    assert [e.checkpoint_id for e in copied.history] == ["copy"]
    assert dataclasses.replace(copied, id="again").history[0].checkpoint_id == "again"


@pytest.mark.parametrize(
    "bad",
    [[[-1, "output", 1.0, b""]], [[1, "", 1.0, b""]], [[1, "output", "now", b""]], [[1, "o"]], [7]],
)
def test_damaged_history_entries_are_corrupt(bad: list[Any]) -> None:
    """A history field that is not a list of [seq, kind, time, data] is corruption."""
    with pytest.raises(CheckpointCorrupt):
        decode_checkpoint(frame(FORMAT_VERSION, body_of(make(), history=bad)))


def test_handmade_frame_of_current_version_decodes() -> None:
    """The frame layout in docs/storage.md is the real one."""
    cp = make()
    assert decode_checkpoint(frame(FORMAT_VERSION, body_of(cp))) == cp


@pytest.mark.parametrize("runtime_size", [0, 150, 300, 70_000])
def test_encoding_is_the_documented_frame_byte_for_byte(runtime_size: int) -> None:
    """encode_checkpoint writes exactly what msgpack writes for the frame and body,
    whichever bin header (8, 16 or 32 bit) the body's size needs."""
    cp = make(runtime=b"r" * runtime_size, metadata={})
    data = encode_checkpoint(cp)
    assert data == frame(FORMAT_VERSION, body_of(cp))
    # Encoding on another thread (its own packer) gives the same bytes.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(encode_checkpoint, cp).result() == data


def test_each_record_encodes_its_own_executors_in_their_order() -> None:
    """Records encoded one after another each carry their own executors, in their order."""
    one, two = blob_digest(b"1"), blob_digest(b"2")
    variants: list[dict[str, tuple[str, ...]]] = [
        {"a": (one,), "b": (two,)},
        {"a": (one,), "b": (two,)},
        {"b": (two,), "a": (one,)},
        {"a": (two,), "b": (two,)},
        {"a": (one, two)},
        {},
    ]
    for executors in variants * 2:
        decoded = decode_checkpoint(encode_checkpoint(make(executors=executors)))
        assert list(decoded.executors.items()) == list(executors.items())


def test_runtime_built_records_are_ordinary_checkpoints() -> None:
    """A record built by the runtime's fast constructor is a Checkpoint like any other:
    equal, frozen, replaceable, picklable and encoded the same."""
    cp = make()
    fast = Checkpoint._from_runtime(
        id=cp.id,
        parent_id=cp.parent_id,
        session=cp.session,
        workflow=cp.workflow,
        graph_signature=cp.graph_signature,
        superstep=cp.superstep,
        kind=cp.kind,
        created_at=cp.created_at,
        executors=dict(cp.executors),
        runtime=cp.runtime,
        metadata=cp.metadata,
    )
    assert type(fast) is Checkpoint and fast == cp
    assert fast.metadata is not cp.metadata
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.superstep = 4  # type: ignore[misc]  # checking that it is frozen
    assert dataclasses.replace(fast, superstep=4).superstep == 4
    assert pickle.loads(pickle.dumps(fast)) == cp
    assert encode_checkpoint(fast) == encode_checkpoint(cp)


def test_encode_refuses_other_format_version() -> None:
    """Only FORMAT_VERSION can be written."""
    with pytest.raises(UnsupportedFormat):
        encode_checkpoint(make(format_version=FORMAT_VERSION + 1))


@pytest.mark.parametrize(
    "changes",
    [
        {"superstep": "3"},
        {"superstep": True},
        {"kind": "nap"},
        {"kind": 1},
        {"executors": {"e": ["not-a-digest"]}},
        {"executors": {"e": DIGEST}},
        {"created_at": 5},
        {"metadata": [1]},
        {"runtime": "text"},
        {"parent_id": 7},
        {"metadata": {"t": msgpack.Timestamp(1)}},
        {"metadata": {"x": msgpack.ExtType(5, b"\x00")}},
        {"extra": 1},
    ],
)
def test_tampered_body_with_valid_digest_is_corrupt(changes: dict[str, Any]) -> None:
    """A body with wrong fields or ext types, even under a valid digest, is corrupt."""
    with pytest.raises(CheckpointCorrupt):
        decode_checkpoint(frame(FORMAT_VERSION, body_of(make(), **changes)))


def test_decoding_imports_and_calls_nothing() -> None:
    """Type-looking metadata stays plain data; no module is imported by decoding."""
    assert "this" not in sys.modules  # the module that prints the Zen when imported
    cp = make(metadata={"__module__": "this", "__class__": "Zen", "py/object": "this.Zen"})
    decoded = decode_checkpoint(encode_checkpoint(cp))
    assert decoded.metadata == dict(cp.metadata)
    assert "this" not in sys.modules


def test_decoded_records_share_nothing() -> None:
    """Two decodes of the same bytes share no container."""
    data = encode_checkpoint(make())
    a, b = decode_checkpoint(data), decode_checkpoint(data)
    assert a == b
    assert a.metadata is not b.metadata
    assert a.metadata["k"] is not b.metadata["k"]
    assert a.executors is not b.executors


def test_checkpoint_copies_what_it_is_given() -> None:
    """A record does not alias the caller's containers."""
    metadata: dict[str, Any] = {"items": [1, (2, 3)]}
    executors = {"e": [DIGEST]}
    runtime = bytearray(b"\x90")
    cp = make(metadata=metadata, executors=executors, runtime=runtime)
    metadata["items"].append(4)
    metadata["new"] = 1
    executors["e"].append(DIGEST)
    runtime[0] = 0
    assert cp.metadata == {"items": [1, [2, 3]]}
    assert cp.executors == {"e": (DIGEST,)}
    assert cp.runtime == b"\x90"


def test_checkpoint_is_frozen() -> None:
    """Fields of a record cannot be reassigned."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        make().superstep = 4  # type: ignore[misc]  # asserting the runtime refusal


@pytest.mark.parametrize(
    "metadata",
    [
        {"s": {1, 2}},
        {"o": object()},
        {"d": {1: "int key"}},
        {"big": 2**64},
        {"t": msgpack.ExtType(1, b"")},
    ],
)
def test_checkpoint_refuses_non_plain_metadata(metadata: dict[str, Any]) -> None:
    """Metadata that plain msgpack cannot carry is refused when the record is made."""
    with pytest.raises(EncodeError):
        make(metadata=metadata)


@pytest.mark.parametrize(
    "overrides",
    [
        {"executors": {"e": ("ABC",)}},
        {"executors": {"e": (DIGEST.upper(),)}},
        {"kind": "later"},
        {"superstep": -1},
    ],
)
def test_checkpoint_refuses_bad_values(overrides: dict[str, Any]) -> None:
    """Malformed digests, kinds and supersteps are refused at construction."""
    with pytest.raises(ValueError):
        make(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [{"id": 1}, {"superstep": 1.0}, {"runtime": "x"}, {"executors": {"e": DIGEST}}],
)
def test_checkpoint_refuses_wrong_types(overrides: dict[str, Any]) -> None:
    """Fields of the wrong type are refused at construction."""
    with pytest.raises(TypeError):
        make(**overrides)


def test_kind_accepts_its_string_value() -> None:
    """kind may be given as its string value and is stored as a CheckpointKind."""
    cp = make(kind="final")
    assert cp.kind is CheckpointKind.FINAL
    assert [k.value for k in CheckpointKind] == [
        "entry",
        "step",
        "response",
        "final",
        "halt",
        "partial",
    ]


def test_blob_digest_is_sha256_hex() -> None:
    """blob_digest is the lowercase hex sha256 of the bytes."""
    assert blob_digest(b"abc") == hashlib.sha256(b"abc").hexdigest()


def test_ids_sort_in_creation_order_and_are_file_safe() -> None:
    """Ids made one after another strictly increase and use only [0-9a-f-]."""
    ids = [new_checkpoint_id() for _ in range(20_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{16}-[0-9a-f]{4}-[0-9a-f]{8}", i) for i in ids)


def test_ids_from_threads_are_unique_and_ordered_per_thread() -> None:
    """Concurrent threads get distinct ids, each thread's in increasing order."""
    barrier = threading.Barrier(4, timeout=30)

    def burst() -> list[str]:
        barrier.wait()
        return [new_checkpoint_id() for _ in range(5_000)]

    with ThreadPoolExecutor(4) as pool:
        bursts = [f.result(timeout=30) for f in [pool.submit(burst) for _ in range(4)]]
    assert all(b == sorted(b) for b in bursts)
    assert len({i for b in bursts for i in b}) == 20_000


def test_ids_order_across_processes() -> None:
    """An id made in another process after one made here sorts after it."""
    before = new_checkpoint_id()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        theirs = pool.apply_async(new_checkpoint_id).get(timeout=30)
    after = new_checkpoint_id()
    assert before < theirs < after


@pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX-only")
@pytest.mark.filterwarnings(
    "ignore:.*multi-threaded.*fork:DeprecationWarning"
)  # 3.12+: harmless here
def test_forked_children_draw_different_id_suffixes() -> None:
    """The random suffix is reseeded in a forked child, so two children forked from
    one parent never repeat each other's suffixes (nor the parent's)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        theirs = [pool.apply_async(_suffixes).get(timeout=30) for _ in range(2)]
    ours = _suffixes()
    assert len({*theirs[0], *theirs[1], *ours}) == 3 * len(ours)


def _suffixes() -> list[str]:
    return [new_checkpoint_id().rsplit("-", 1)[1] for _ in range(4)]


def test_ids_survive_a_clock_step_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the wall clock goes backwards, ids keep increasing."""
    first = new_checkpoint_id()
    monkeypatch.setattr(time, "time_ns", lambda: 1)
    later = [new_checkpoint_id() for _ in range(3)]
    assert [first, *later] == sorted([first, *later])
    assert len(set(later)) == 3
