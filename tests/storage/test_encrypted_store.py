"""EncryptedStore: what the kit cannot see (wrong keys, tampering, swaps, rotation, what
reaches the disk); the kit itself runs on it in test_wrapped_conformance."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.errors import CheckpointCorrupt
from actorflow.storage import (
    CheckpointKind,
    CheckpointStore,
    EncryptedStore,
    FileStore,
    MemoryStore,
    SQLiteStore,
    StoreWrapper,
    blob_digest,
    decode_checkpoint,
    encode_checkpoint,
)
from actorflow.storage.conformance import MemoryStoreFactory, make_checkpoint

OLD, NEW = os.urandom(32), os.urandom(32)
MARKER = b"plaintext-marker-7f3a"


def _sealed_key_id(sealed: bytes) -> str:
    """The key id a sealed value names (its 5th byte is the id's length)."""
    return sealed[4 : 4 + sealed[3]].decode()


def test_a_wrong_key_is_corrupt_never_garbage() -> None:
    """Records, blobs and history sealed with one key do not open with another key of the
    same id, nor with a keyring lacking their key id: CheckpointCorrupt, naming the key."""
    inner = MemoryStore()
    checkpoint, blobs = make_checkpoint(history=[0])
    EncryptedStore(inner, keys={"k": OLD}, close_inner=False).save(checkpoint, blobs)
    digest = next(iter(blobs))
    wrong = EncryptedStore(inner, keys={"k": NEW}, close_inner=False)
    for read in (
        lambda: wrong.load(checkpoint.id),
        wrong.list,
        lambda: wrong.session_history(checkpoint.session),
        lambda: wrong.load_blob(digest),
    ):
        with pytest.raises(CheckpointCorrupt, match="authentication under key 'k'"):
            read()
    stranger = EncryptedStore(inner, keys={"other": OLD}, close_inner=False)
    with pytest.raises(CheckpointCorrupt, match="key 'k', which this EncryptedStore does not hold"):
        stranger.load(checkpoint.id)
    assert any(checkpoint.id in p for p in wrong.verify())


def test_a_sealed_store_opened_plain_says_so_not_that_it_is_damaged(tmp_path: Path) -> None:
    """Opened without its keys, encrypted data is refused as sealed (nothing to start
    afresh from, nothing to restore): the message says how to open it."""

    class Count(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[None]) -> None:
            ctx.output(n)

    path = tmp_path / "s.db"
    with af.WorkflowBuilder("count", start=Count("c")).build() as wf:
        with (
            EncryptedStore(SQLiteStore(path), keys={"k": OLD}) as store,
            wf.session("s", store=store) as s,
        ):
            s.run(1)
        with SQLiteStore(path) as plain, pytest.raises(af.CheckpointSealed) as refused:
            wf.resume(plain, session="s")
        assert "EncryptedStore(" in str(refused.value) and "afresh" not in str(refused.value)
        with (
            EncryptedStore(SQLiteStore(path), keys={"k": OLD}) as store,
            wf.resume(store, session="s") as s,
        ):
            assert s.run(2).outputs == [2]


def _replace_record(factory: MemoryStoreFactory, checkpoint_id: str, **changes: object) -> None:
    """Re-encode the inner record with ``changes``: a tamper its frame digest cannot see."""

    def tamper(data: bytes) -> bytes:
        return encode_checkpoint(dataclasses.replace(decode_checkpoint(data), **changes))  # type: ignore[arg-type]

    factory.corrupt_record(checkpoint_id, tamper)


@pytest.mark.parametrize(
    "field", ["superstep", "kind", "session", "parent_id", "created_at", "runtime", "history"]
)
def test_a_tampered_record_is_corrupt(field: str) -> None:
    """A visible field changed, the sealed bytes flipped, or a history entry re-timed, in a
    record that still passes the inner store's own checks: CheckpointCorrupt naming it."""
    factory = MemoryStoreFactory()
    store = EncryptedStore(factory(), keys={"k": OLD})
    parent, parent_blobs = make_checkpoint()
    store.save(parent, parent_blobs)
    checkpoint, blobs = make_checkpoint(parent=parent, history=[0, 1])
    store.save(checkpoint, blobs)
    inner = factory().load(checkpoint.id)
    sealed = bytearray(inner.runtime)
    sealed[-20] ^= 1
    tampers: dict[str, dict[str, object]] = {
        "superstep": {"superstep": 7},
        "kind": {"kind": CheckpointKind.FINAL},
        "session": {"session": "another"},
        "parent_id": {"parent_id": None},
        "created_at": {"created_at": inner.created_at + 1},
        "runtime": {"runtime": bytes(sealed)},
        "history": {"history": (dataclasses.replace(inner.history[0], time=1.0),)},
    }
    _replace_record(factory, checkpoint.id, **tampers[field])
    with pytest.raises(CheckpointCorrupt, match=checkpoint.id):
        store.load(checkpoint.id)
    assert store.load(parent.id) == parent


def test_a_record_moved_to_another_id_is_corrupt() -> None:
    """The sealed part of one record copied into another: CheckpointCorrupt (bound to the id)."""
    factory = MemoryStoreFactory()
    store = EncryptedStore(factory(), keys={"k": OLD})
    first, first_blobs = make_checkpoint(chunks={"e": [b"same"]})
    second, _ = make_checkpoint(chunks={"e": [b"same"]})
    store.save(first, first_blobs)
    store.save(second, {})
    stolen = factory().load(first.id).runtime
    _replace_record(factory, second.id, runtime=stolen)
    with pytest.raises(CheckpointCorrupt, match=second.id):
        store.load(second.id)


def test_a_tampered_blob_is_corrupt() -> None:
    """A sealed blob changed in the inner store: CheckpointCorrupt naming the caller's digest."""
    factory = MemoryStoreFactory()
    store = EncryptedStore(factory(), keys={"k": OLD})
    checkpoint, blobs = make_checkpoint(chunks={"e": [MARKER]})
    store.save(checkpoint, blobs)
    digest = blob_digest(MARKER)
    at = store.stored_digest(digest)
    assert at is not None and at != digest
    factory.corrupt_blob(at, lambda data: data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CheckpointCorrupt, match=digest):
        store.load_blob(digest)
    assert any(digest in p for p in store.verify())


class _Swapping(StoreWrapper):
    """An inner store that hands out another blob's bytes for one digest, as a store whose
    own checks an attacker defeated would (fault injection with a wrapper)."""

    def __init__(self, inner: CheckpointStore) -> None:
        super().__init__(inner)
        self.swap: dict[str, str] = {}

    def load_blob(self, digest: str) -> bytes:
        return super().load_blob(self.swap.get(digest, digest))


def test_swapped_blobs_are_corrupt() -> None:
    """A sealed blob returned for another blob's digest fails its authentication: each
    ciphertext is bound to its plaintext digest."""
    inner = _Swapping(MemoryStore())
    store = EncryptedStore(inner, keys={"k": OLD})
    checkpoint, blobs = make_checkpoint(chunks={"e": [b"first", b"second"]})
    store.save(checkpoint, blobs)
    first, second = blob_digest(b"first"), blob_digest(b"second")
    inner.swap = {store.stored_digest(first) or "": store.stored_digest(second) or ""}
    with pytest.raises(CheckpointCorrupt, match=first):
        store.load_blob(first)
    assert store.load_blob(second) == b"second"


def test_rotation_reads_old_records_and_seals_new_ones_with_the_newest_key() -> None:
    """Adding a key: records sealed before stay readable, new records and blobs use the
    newest key; dropping the old key makes the old records unreadable (corrupt)."""
    inner = MemoryStore()
    before = EncryptedStore(inner, keys={"old": OLD}, close_inner=False)
    old, old_blobs = make_checkpoint(chunks={"e": [b"kept", b"old state"]})
    before.save(old, old_blobs)
    rotated = EncryptedStore(inner, keys={"old": OLD, "new": NEW}, close_inner=False)
    assert rotated.key_id == "new"
    assert rotated.load(old.id) == old
    new, new_blobs = make_checkpoint(parent=old, chunks={"e": [b"kept", b"new state"]})
    del new_blobs[blob_digest(b"kept")]  # unchanged: the runtime does not send it again
    rotated.save(new, new_blobs)
    assert rotated.history(new.id) == [new, old]
    assert _sealed_key_id(inner.load(old.id).runtime) == "old"
    assert _sealed_key_id(inner.load(new.id).runtime) == "new"
    new_at = rotated.stored_digest(blob_digest(b"new state"))
    kept_at = rotated.stored_digest(blob_digest(b"kept"))
    assert new_at is not None and kept_at is not None
    assert _sealed_key_id(inner.load_blob(new_at)) == "new"
    assert _sealed_key_id(inner.load_blob(kept_at)) == "old"  # shared, not sealed again
    assert rotated.load_blob(blob_digest(b"kept")) == b"kept"
    assert rotated.verify() == []
    with pytest.raises(CheckpointCorrupt, match="'old'"):
        EncryptedStore(inner, keys={"new": NEW}, close_inner=False).load(old.id)


def test_equal_blobs_are_stored_once() -> None:
    """Deduplication holds: equal blobs of two sessions are one inner blob (under one key),
    at an address that is not their plaintext digest."""
    inner = MemoryStore()
    store = EncryptedStore(inner, keys={"k": OLD})
    for session in ("a", "b"):
        checkpoint, blobs = make_checkpoint(session=session, chunks={"e": [b"shared"]})
        store.save(checkpoint, blobs)
    records = inner.list()
    assert records[0].executors == records[1].executors
    assert blob_digest(b"shared") not in records[0].blob_digests()
    assert store.has_blobs([blob_digest(b"shared")]) == {blob_digest(b"shared")}


def _everything_saved(store: CheckpointStore) -> None:
    checkpoint, blobs = make_checkpoint(
        session="s",
        chunks={"e": [MARKER + b" in a blob"]},
        runtime=MARKER + b" in the runtime",
        metadata={"note": MARKER.decode() + " in the metadata"},
        history=[0],
    )
    checkpoint = dataclasses.replace(
        checkpoint,
        history=(dataclasses.replace(checkpoint.history[0], data=MARKER + b" in history"),),
    )
    store.save(checkpoint, blobs)
    assert store.load(checkpoint.id) == checkpoint
    store.close()


def _files(root: Path) -> Iterator[bytes]:
    for path in root.rglob("*"):
        if path.is_file():
            yield path.read_bytes()


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_no_plaintext_reaches_the_disk(kind: str, tmp_path: Path) -> None:
    """A marker in the runtime bytes, the metadata, a history entry and a blob appears in
    no file of the store, nor does the blob's plaintext digest; unencrypted, it does."""
    digest = blob_digest(MARKER + b" in a blob")
    for sealed, folder in ((True, tmp_path / "sealed"), (False, tmp_path / "plain")):
        folder.mkdir()
        inner = FileStore(folder / "store") if kind == "file" else SQLiteStore(folder / "db")
        _everything_saved(EncryptedStore(inner, keys={"k": OLD}) if sealed else inner)
        found = [
            marker in data
            for data in _files(folder)
            for marker in (MARKER, digest.encode(), bytes.fromhex(digest))
        ]
        assert any(found) is not sealed, f"sealed={sealed}"


def test_a_workflow_resumes_from_an_encrypted_store(tmp_path: Path) -> None:
    """A session checkpoints into an EncryptedStore over SQLite and resumes from it."""
    wf = af.WorkflowBuilder("sums", start=_Add("add")).build()
    with wf, EncryptedStore(SQLiteStore(tmp_path / "runs.db"), keys={"k": OLD}) as store:
        with wf.session("s", store=store) as session:
            assert session.run(2).outputs == [2]
        with wf.resume(store, session="s") as session:
            assert session.run(5).outputs == [7]
        assert store.verify() == []


def test_without_cryptography_the_error_says_what_to_install() -> None:
    """Making an EncryptedStore without cryptography raises ImportError naming the extra;
    importing actorflow never imports cryptography."""
    code = (
        "import sys; sys.modules['cryptography'] = None\n"
        "import actorflow as af\n"
        "from actorflow.storage import EncryptedStore, MemoryStore\n"
        "try:\n"
        "    EncryptedStore(MemoryStore(), keys={'k': bytes(32)})\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == (
        "EncryptedStore needs the cryptography package: pip install 'actorflow[encryption]'"
    )


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        ({}, ValueError),
        ({"k": b"short"}, ValueError),
        ({"": OLD}, ValueError),
        ({"k": "text"}, TypeError),
    ],
)
def test_malformed_keys_are_refused(keys: dict[str, bytes], error: type[Exception]) -> None:
    """No key, a key that is not 16, 24 or 32 bytes, an empty id, a key that is not bytes."""
    with pytest.raises(error):
        EncryptedStore(MemoryStore(), keys=keys)


class _Add(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.total = 0

    @af.handler
    def on_number(self, value: int, ctx: af.Context[None]) -> None:
        self.total += value
        ctx.output(self.total)


@pytest.mark.parametrize(
    ("inner", "keys", "said"),
    [
        (None, {"k": OLD}, "wraps a checkpoint store"),
        ("runs.db", {"k": OLD}, "wraps a checkpoint store"),
        (MemoryStore(), [("k", OLD)], "takes a mapping of key id to key"),
        (MemoryStore(), None, "takes a mapping of key id to key"),
    ],
)
def test_a_store_or_keys_of_the_wrong_kind_are_refused_saying_what_it_takes(
    inner: Any, keys: Any, said: str
) -> None:
    with pytest.raises(TypeError, match=said):
        EncryptedStore(inner, keys=keys)
