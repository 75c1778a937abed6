"""Decoding a checkpoint never runs code: crafted records, blobs and runtime fields are
refused before anything runs, and a resume that cannot restore leaves no actor behind.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

import actorflow as af
from actorflow.actors import encode, encode_state
from actorflow.storage import (
    Checkpoint,
    CheckpointKind,
    blob_digest,
    new_checkpoint_id,
)
from tests.support import causes, graphs

# --- decoding never runs code ----------------------------------------------------------


class Detonator:
    """Pickles to a call that creates the sentinel file (pickle runs it on load)."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.sentinel),))


def _ext(code: int, body: Any) -> bytes:
    data: bytes = msgpack.packb(msgpack.ExtType(code, msgpack.packb(body)))
    return data


EXT_DATACLASS = 12  # actorflow.actors.codec._encode.EXT_DATACLASS: a registered type by wire name


def _os_system(sentinel: Path) -> bytes:
    """A codec value claiming to be a registered type named ``os.system``."""
    return _ext(EXT_DATACLASS, ["os.system", {"command": f"mkdir {sentinel}"}])


def _pack(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


CRAFTS: dict[str, Callable[[Checkpoint, Path], tuple[dict[str, Any], dict[str, bytes]]]] = {}


def craft(name: str) -> Callable[[Any], Any]:
    def register(fn: Any) -> Any:
        CRAFTS[name] = fn
        return fn

    return register


def _runtime_of(entry: Checkpoint) -> dict[str, Any]:
    found: dict[str, Any] = msgpack.unpackb(entry.runtime, raw=False, strict_map_key=False)
    return found


@craft("runtime-is-a-pickle")
def _runtime_pickle(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    return {"runtime": pickle.dumps(Detonator(sentinel))}, {}


@craft("runtime-names-os.system")
def _runtime_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    runtime = _runtime_of(entry)
    runtime["superstep"] = msgpack.ExtType(
        EXT_DATACLASS, msgpack.packb(["os.system", {"command": f"mkdir {sentinel}"}])
    )
    return {"runtime": _pack(runtime)}, {}


@craft("fan-in-buffer-names-os.system")
def _fan_in_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    runtime = _runtime_of(entry)
    runtime["fan_in"] = {
        "0": msgpack.ExtType(EXT_DATACLASS, msgpack.packb(["os.system", {"command": "x"}]))
    }
    return {"runtime": _pack(runtime)}, {}


@craft("queued-message-is-a-pickle")
def _inbox_pickle(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    runtime = _runtime_of(entry)
    runtime["inbox"] = {"a0": [["__input__", -1, pickle.dumps(Detonator(sentinel))]]}
    return {"runtime": _pack(runtime)}, {}


@craft("queued-message-names-os.system")
def _inbox_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    runtime = _runtime_of(entry)
    runtime["inbox"] = {"a0": [["__input__", -1, _os_system(sentinel)]]}
    return {"runtime": _pack(runtime)}, {}


@craft("snapshot-is-a-pickle")
def _blob_pickle(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    evil = pickle.dumps(Detonator(sentinel))
    executors = dict(entry.executors)
    executors["a1"] = (blob_digest(evil),)
    return {"executors": executors}, {blob_digest(evil): evil}


@craft("snapshot-names-os.system")
def _blob_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    manifest = encode([1, [["cmd", 0, 0, 0]]])  # one inline attribute
    inline = b"\x91" + _os_system(sentinel)  # a msgpack array holding the crafted value
    executors = dict(entry.executors)
    executors["a1"] = (blob_digest(manifest), blob_digest(inline))
    return {"executors": executors}, {blob_digest(manifest): manifest, blob_digest(inline): inline}


@craft("snapshot-value-names-os.system")
def _blob_value_ext(entry: Checkpoint, sentinel: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    # Every attribute GRelay has, so the state passes the attribute check and only
    # decoding its values (which a resume does for bytes it did not write) refuses it.
    manifest, _ = encode_state({"mul": 1, "add": 0, "count": 0, "seen": [], "ballast": []})
    inline = b"\x95" + encode(1) + encode(0) + encode(0) + _os_system(sentinel) + encode([])
    executors = dict(entry.executors)
    executors["a1"] = (blob_digest(manifest), blob_digest(inline))
    return {"executors": executors}, {blob_digest(manifest): manifest, blob_digest(inline): inline}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("variant", sorted(CRAFTS))
def test_a_crafted_checkpoint_is_refused_and_runs_nothing(variant: str, tmp_path: Path) -> None:
    """A checkpoint carrying a pickle or naming os.system raises DecodeError/CheckpointCorrupt and runs nothing."""
    sentinel = tmp_path / "sentinel"
    calls: list[tuple[str, int]] = []
    case = graphs.build("chain", 3)
    store, crafted = _crafted_store(case, variant, sentinel)
    graphs.HOOK = lambda executor, superstep: calls.append((executor, superstep))
    error: BaseException | None = None
    try:
        with case.workflow as wf, wf.resume(store, checkpoint_id=crafted.id) as resumed:
            resumed.run()
    except Exception as exc:
        error = exc
    finally:
        graphs.HOOK = None
    assert not sentinel.exists(), "decoding ran code"
    assert calls == [], "a handler ran on crafted data"
    refused = [
        e for e in causes.chain(error) if isinstance(e, af.DecodeError | af.CheckpointCorrupt)
    ]
    assert refused, f"expected DecodeError or CheckpointCorrupt, got {error!r}"


def _crafted_store(
    case: graphs.GraphCase, variant: str, sentinel: Path
) -> tuple[af.MemoryStore, Checkpoint]:
    """A store holding a real run of ``case`` and a crafted copy of its entry checkpoint."""
    store = af.MemoryStore()
    with case.workflow.session("s", store=store) as s:
        s.run(case.input)
    (entry,) = store.list(session="s", kind=CheckpointKind.ENTRY)
    changes, blobs = CRAFTS[variant](entry, sentinel)
    crafted = dataclasses.replace(
        entry, id=new_checkpoint_id(), parent_id=None, session="crafted", **changes
    )
    store.save(crafted, blobs)
    return store, crafted


@pytest.mark.timeout(30)
def test_close_after_a_resume_that_could_not_restore_leaves_no_actor_thread(
    tmp_path: Path,
) -> None:
    """A resume whose snapshot cannot be decoded fails before any actor starts; none is left."""
    before = set(threading.enumerate())
    case = graphs.build("chain", 3)
    store, crafted = _crafted_store(case, "snapshot-is-a-pickle", tmp_path / "sentinel")
    with pytest.raises(af.DecodeError, match="stored state cannot be decoded"):
        case.workflow.resume(store, checkpoint_id=crafted.id)
    assert store.current_lease(crafted.session) is None
    case.workflow.close()
    leftover = [t for t in threading.enumerate() if t not in before]
    deadline = time.monotonic() + 2
    for thread in leftover:
        thread.join(timeout=max(deadline - time.monotonic(), 0))
    assert [t.name for t in leftover if t.is_alive()] == []
