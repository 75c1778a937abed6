"""Forged runtime fields: resume, ``show`` and ``verify`` treat them alike, as CheckpointCorrupt."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

import actorflow as af
from actorflow.cli import main
from actorflow.errors import CheckpointCorrupt
from actorflow.runtime.checkpoints._state import MAX_SUPERSTEP, decode_runtime
from actorflow.storage import Checkpoint, new_checkpoint_id
from actorflow.storage.conformance import FileStoreFactory
from tests.test_cli import build


def _good() -> dict[str, Any]:
    return {
        "superstep": 3,
        "inbox": {"b": [["a", -1, b"\x01"], ["a", 0, [b"\x02"]], ["x", -2, ["r", b"q", b"a"]]]},
        "fan_in": {"0": {"a": [b"\x03"]}},
        "pending": {"r1": ["a", b"\x04", "int"]},
        "answered": ["r0"],
        "graph": {"start": "a", "executors": {"a": {"type": "m.A", "handlers": ["int"]}}},
    }


def _forged(change: str) -> dict[str, Any]:
    body = _good()
    forgeries: dict[str, Callable[[], object]] = {
        "non-numeric fan-in key": lambda: body.update(fan_in={"x": {}}),
        "fan-in key with a leading zero": lambda: body.update(fan_in={"01": {}}),
        "superstep 2**64-1": lambda: body.update(superstep=(1 << 64) - 1),
        "negative superstep": lambda: body.update(superstep=-1),
        "bool superstep": lambda: body.update(superstep=True),
        "unknown entry": lambda: body.update(extra=1),
        "missing entry": lambda: body.pop("answered"),
        "int key": lambda: body.update({1: 2}),  # type: ignore[dict-item]  # forged on purpose
        "fan-in group with one payload": lambda: body["inbox"]["b"].append(["a", 0, b"\x01"]),
        "single with a list payload": lambda: body["inbox"]["b"].append(["a", -1, [b"\x01"]]),
        "response with two parts": lambda: body["inbox"]["b"].append(["a", -2, ["r", b"q"]]),
        "unknown group": lambda: body["inbox"]["b"].append(["a", -3, b"\x01"]),
        "pending with an int": lambda: body["pending"].update(r2=["a", 1, "int"]),
        "answered int": lambda: body.update(answered=[1]),
        "graph executor without type": lambda: body["graph"]["executors"].update(b={}),
        "graph not a map": lambda: body.update(graph=[]),
    }
    forgeries[change]()
    return body


def test_the_written_structure_decodes() -> None:
    """What the writer writes (the reference shape above) is accepted as it is."""
    assert decode_runtime(msgpack.packb(_good())) == _good()
    body = _good()
    body["superstep"] = MAX_SUPERSTEP
    assert decode_runtime(msgpack.packb(body))["superstep"] == MAX_SUPERSTEP


_CHANGES = [
    "non-numeric fan-in key",
    "fan-in key with a leading zero",
    "superstep 2**64-1",
    "negative superstep",
    "bool superstep",
    "unknown entry",
    "missing entry",
    "int key",
    "fan-in group with one payload",
    "single with a list payload",
    "response with two parts",
    "unknown group",
    "pending with an int",
    "answered int",
    "graph executor without type",
    "graph not a map",
]


@pytest.mark.parametrize("change", _CHANGES)
def test_forged_runtime_fields_are_corrupt(change: str) -> None:
    """Anything but the written structure is CheckpointCorrupt, never ValueError/OverflowError."""
    with pytest.raises(CheckpointCorrupt, match="runtime record is malformed"):
        decode_runtime(msgpack.packb(_forged(change)))


def _forge_latest(store: af.SQLiteStore, change: dict[str, Any]) -> Checkpoint:
    """Save a copy of the latest record with ``change`` applied to its runtime field."""
    latest = store.latest(session="s1")
    assert latest is not None
    body = msgpack.unpackb(latest.runtime, strict_map_key=False)
    body.update(change)
    forged = dataclasses.replace(
        latest, id=new_checkpoint_id(), parent_id=latest.id, runtime=msgpack.packb(body)
    )
    store.save(forged, {})
    return forged


@pytest.mark.parametrize(
    "change", [{"fan_in": {"x": {}}}, {"superstep": (1 << 64) - 1}], ids=["fan-in", "superstep"]
)
def test_resume_show_and_verify_agree_on_a_forged_runtime(
    tmp_path: Path, change: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Resume raises CheckpointCorrupt; ``show`` says so without a traceback; ``verify`` fails."""
    path = str(tmp_path / "s.db")
    with af.SQLiteStore(path) as store, build() as wf:
        with wf.session("s1", store=store) as s:
            s.run(0)
        forged = _forge_latest(store, change)
        with pytest.raises(CheckpointCorrupt), wf.resume(store, session="s1"):
            pass
    assert main(["checkpoints", "show", path, forged.id]) == 2
    captured = capsys.readouterr()
    assert "runtime record is malformed" in captured.err and "Traceback" not in captured.err
    assert main(["checkpoints", "verify", path]) == 1
    out = capsys.readouterr().out.splitlines()
    assert forged.id in out[0] and "runtime" in out[0]
    assert out[-1].startswith("1 problem(s) in ")


def test_verify_counts_damaged_records_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged record: verify prints it and ``N problem(s) in M checkpoint(s)``, exit 1."""
    path = str(tmp_path / "s.db")
    with af.SQLiteStore(path) as store, build() as wf, wf.session("s1", store=store) as s:
        s.run(0)
        total = len(store.list())
    db = sqlite3.connect(path)
    db.execute("UPDATE checkpoints SET record = x'00' WHERE id = (SELECT max(id) FROM checkpoints)")
    db.commit()
    db.close()
    assert main(["checkpoints", "verify", path]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"1 problem(s) in {total} checkpoint(s)"
    folder = tmp_path / "f"
    with af.FileStore(folder) as files, build() as wf, wf.session("s1", store=files) as s:
        s.run(0)
        total = len(files.list())
        newest = files.list()[-1].id
    FileStoreFactory(str(folder)).corrupt_record(newest, lambda record: record[:-1])
    assert main(["checkpoints", "verify", str(folder)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1].endswith(f"in {total} checkpoint(s)") and not out[-1].startswith("0 ")
