"""A FileStore folder with damaged, forged or odd contents: always an actorflow error."""

from __future__ import annotations

import errno
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from actorflow.errors import CheckpointCorrupt, CheckpointError
from actorflow.storage import FileStore
from actorflow.storage.conformance import make_checkpoint
from actorflow.storage.file._pack import MAGIC

_PREFIX = struct.Struct(">8sII")


def _store_with_two(path: Path) -> tuple[FileStore, list[str], list[str]]:
    """A store holding two records; returns it, their ids and the second's blob digests."""
    store = FileStore(path, layout=2)  # packs: their headers are what is forged
    first, blobs = make_checkpoint()
    store.save(first, blobs)
    second, blobs = make_checkpoint(parent=first)
    store.save(second, blobs)
    return store, [first.id, second.id], sorted(blobs)


def _forge_header(pack: Path, change: Callable[[list[object]], None]) -> None:
    """Rewrite a pack's header through ``change``, with a recomputed crc32."""
    data = pack.read_bytes()
    magic, size, _ = _PREFIX.unpack_from(data)
    assert magic == MAGIC
    header = msgpack.unpackb(data[_PREFIX.size : _PREFIX.size + size])
    change(header)
    body = msgpack.packb(header)
    rest = data[_PREFIX.size + size :]
    pack.write_bytes(_PREFIX.pack(MAGIC, len(body), zlib.crc32(body)) + body + rest)


def _set_record(value: int) -> Callable[[list[object]], None]:
    def change(header: list[object]) -> None:
        header[0] = value

    return change


def _set_blob(value: int) -> Callable[[list[object]], None]:
    def change(header: list[object]) -> None:
        entries = header[1]
        assert isinstance(entries, list) and entries
        entries[0][1] = value

    return change


_FORGERIES = {
    "record length 2**62": _set_record(1 << 62),
    "record length 2**64-1": _set_record((1 << 64) - 1),
    "negative record length": _set_record(-5),
    "blob length 2**62": _set_blob(1 << 62),
    "negative blob length": _set_blob(-(1 << 40)),
    "blob length one past the end": _set_blob(1 << 20),
}


@pytest.mark.parametrize("forgery", sorted(_FORGERIES))
def test_forged_lengths_are_checked_against_the_file_size(tmp_path: Path, forgery: str) -> None:
    """Every reader reports a header length that does not fit as CheckpointCorrupt."""
    store, ids, digests = _store_with_two(tmp_path / "s")
    pack = tmp_path / "s" / "packs" / f"{ids[1]}.pack"
    _forge_header(pack, _FORGERIES[forgery])
    fresh = FileStore(tmp_path / "s")
    for read in (fresh.latest, fresh.list, lambda: fresh.load(ids[1])):
        with pytest.raises(CheckpointCorrupt, match="does not fit in the file"):
            read()
    with pytest.raises(CheckpointCorrupt, match="damaged pack"):
        FileStore(tmp_path / "s").load_blobs(digests)
    older = FileStore(tmp_path / "s").load(ids[0])
    assert FileStore(tmp_path / "s").load_blobs(older.blob_digests())  # other packs still load
    problems = FileStore(tmp_path / "s").verify()
    assert any(ids[1] in p and "does not fit" in p for p in problems), problems
    store.close()


def test_a_folder_named_like_a_pack_is_reported(tmp_path: Path) -> None:
    """A directory (or FIFO) named ``<id>.pack`` is damage, never IsADirectoryError or a hang."""
    store, ids, _ = _store_with_two(tmp_path / "s")
    (tmp_path / "s" / "packs" / "zzzz-dir.pack").mkdir()
    os.mkfifo(tmp_path / "s" / "packs" / "zzzz-fifo.pack")
    with pytest.raises(CheckpointCorrupt, match="not a regular file"):
        store.latest()
    with pytest.raises(CheckpointCorrupt):
        store.load("zzzz-dir")
    problems = store.verify()
    assert sum("not a regular file" in p for p in problems) == 2, problems
    assert store.load(ids[0]).id == ids[0]


def test_a_deleted_file_that_is_not_text_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    """A non-UTF-8 ``deleted`` list is reported by verify()."""
    store, _, _ = _store_with_two(tmp_path / "s")
    (tmp_path / "s" / "deleted").write_bytes(b"\xff\xfe\x00garbage\n")
    problems = store.verify()
    assert len(problems) == 1 and "deleted" in problems[0], problems


@pytest.fixture
def read_only_fs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[Path], None]:
    """Make ``root`` behave like a read-only mount: every open for writing fails with EROFS."""
    real_open = os.open

    def install(root: Path) -> None:
        prefix = os.fspath(root)

        def fake_open(path: object, flags: int, *args: object, **kwargs: object) -> int:
            writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
            if os.fspath(path).startswith(prefix) and flags & writes:  # type: ignore[call-overload]
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))  # type: ignore[call-overload]
            return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", fake_open)

    return install


@pytest.mark.parametrize("lock_exists", [True, False])
def test_read_only_store_reads_and_refuses_writes_clearly(
    tmp_path: Path, read_only_fs: Callable[[Path], None], lock_exists: bool
) -> None:
    """On a read-only file system reads work; writes raise CheckpointError naming the cause."""
    store, ids, _ = _store_with_two(tmp_path / "s")
    store.close()
    if not lock_exists:
        (tmp_path / "s" / ".lock").unlink()
    read_only_fs(tmp_path / "s")
    ro = FileStore(tmp_path / "s")
    latest = ro.latest()
    assert latest is not None and latest.id == ids[1]
    assert ro.verify() == []
    assert ro.load_blobs(sorted(latest.blob_digests()))
    assert ro.has_blobs(latest.blob_digests()) == set(latest.blob_digests())
    cp, blobs = make_checkpoint(parent=latest)
    with pytest.raises(CheckpointError, match=r"(?i)read-only"):
        ro.save(cp, blobs)
    with pytest.raises(CheckpointError, match=r"(?i)read-only"):
        ro.delete(ids[0])
    with pytest.raises(CheckpointError, match=r"(?i)read-only"):
        ro.prune("session-a", keep=1)


def test_store_on_a_real_read_only_mount(tmp_path: Path) -> None:
    """On a real read-only bind mount: reads and verify work, a prune names the cause."""
    import subprocess

    source, mount = tmp_path / "src", tmp_path / "ro"
    mount.mkdir()
    store, ids, _ = _store_with_two(source)
    store.close()
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    bind = subprocess.run(
        ["mount", "--bind", str(source), str(mount)], check=False, capture_output=True
    )
    if bind.returncode != 0:
        pytest.skip(f"mount is not permitted here: {bind.stderr!r}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(mount)], check=True, capture_output=True
        )
        with FileStore(mount) as ro:  # closed before the unmount: it holds files open
            latest = ro.latest()
            assert latest is not None and latest.id == ids[1]
            assert ro.verify() == []
            assert ro.load_blobs(sorted(latest.blob_digests()))
            with pytest.raises(CheckpointError, match=r"(?i)read-only file system"):
                ro.prune("session-a", keep=0)
    finally:
        # check=True: a mount left behind would break every later pytest's cleanup.
        subprocess.run(["umount", str(mount)], check=True, capture_output=True)
