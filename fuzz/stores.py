"""Store targets: each store's on-disk (or in-memory) form, damaged, then used.

An input is an *image* of a store (bytes, so a failing one can be saved and
replayed): a SQLite file, a FileStore folder packed as msgpack, a MemoryStore's
entries. :class:`StoreAdapter` says how to build one, damage it in ways that know
its structure, and open a store on it; :func:`exercise` then calls every reading
method (and a prune) and decodes what they return as a resume would. An adapter
whose damage never legitimately removes a record (the segment one) also says what
the healthy store answered, and :func:`check_answers` fails an input on which a
saved record is neither returned nor reported (a silent rollback). Adding a
store is adding an adapter (a PostgreSQL one would load the image into a
temporary database and damage rows, as the SQLite adapter does).
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import tempfile
import zlib
from pathlib import Path
from typing import Any, Protocol

import msgpack

from actorflow.actors import decode_state, encode_state
from actorflow.errors import ActorflowError
from actorflow.runtime.checkpoints._checkpointing import check_runtime
from actorflow.storage import Checkpoint, CheckpointKind, FileStore, MemoryStore, SQLiteStore
from actorflow.storage.conformance import make_checkpoint

from ._guard import SilentRollback
from ._mutate import mutate, mutate_bytes, mutate_tree, pack_tree, packb, parse_tree
from ._values import random_value
from .segments import damage_frame, frames_of
from .targets import Target, runtime_seed, sign

__all__ = ["ADAPTERS", "StoreAdapter", "check_answers", "exercise", "store_target"]


class StoreAdapter(Protocol):
    """How to fuzz one store type."""

    name: str

    def build(self, rng: random.Random, work: Path) -> bytes:
        """A healthy store's image, built by saving ``history(rng)`` records."""

    def damage(self, image: bytes, rng: random.Random, work: Path) -> bytes:
        """A damaged copy of ``image``."""

    def open(self, image: bytes, work: Path) -> Any:
        """A store on ``image`` (materialised under ``work`` if it needs files)."""


def history(rng: random.Random) -> list[tuple[Checkpoint, dict[str, bytes]]]:
    """Records of two sessions (state chunks from encode_state, real runtime fields)."""
    saved: list[tuple[Checkpoint, dict[str, bytes]]] = []
    for session in ("s1", "s2"):
        parent = None
        for step in range(rng.randrange(2, 5)):
            chunks = {
                "a": encode_state({"x": random_value(rng), "n": step}),
                "b": encode_state({"items": list(range(rng.randrange(300)))}),
            }
            kind = CheckpointKind.FINAL if step == 3 else CheckpointKind.STEP
            cp, blobs = make_checkpoint(
                session=session, parent=parent, chunks=chunks, runtime=runtime_seed(rng), kind=kind
            )
            saved.append((cp, blobs))
            parent = cp
    return saved


def exercise(store: Any) -> None:
    """Every reading method, a resume's decoding of what they return, then a prune."""
    try:
        store.latest()
        store.latest(session="s1")
        store.sessions()
        ids = store.ids() if hasattr(store, "ids") else [cp.id for cp in store.list()]
        for n, checkpoint_id in enumerate(ids[:12]):
            try:
                cp = store.load(checkpoint_id)
                check_runtime(cp)
                if n in (0, len(ids) - 1):  # a walk from the oldest and the newest is enough
                    store.history(checkpoint_id)
                wanted = sorted(cp.blob_digests())
                if hasattr(store, "load_blobs"):
                    blobs = store.load_blobs(wanted)
                else:
                    blobs = {d: store.load_blob(d) for d in wanted}
                store.has_blobs(blobs)
                for digests in cp.executors.values():
                    decode_state([blobs[d] for d in digests])
            except ActorflowError:
                continue  # one damaged record must not hide the others
        store.list()
        store.verify()
        store.prune("s1", keep=1)
        store.latest(session="s1")
    finally:
        store.close()


def check_answers(store: Any, expected: dict[str, Any], damage: str = "") -> None:
    """Every saved record is returned or reported: a read may raise an ActorflowError
    (it reports damage), but what it returns must be what the healthy store returned.

    ``expected``: ``{"ids": every id, oldest first, "latest": {session or "": newest id}}``;
    ``damage``: what was done to the store, for the failure's kind.

    Raises:
        SilentRollback: ``latest``, ``list`` or ``sessions`` answered without the newest
            or a saved record; or a saved record is missing from ``ids``, "not found"
            or unreadable while ``verify()`` reports nothing.
    """

    def fail(message: str) -> SilentRollback:
        return SilentRollback(message, damage)

    for session, newest in expected["latest"].items():
        try:
            got = store.latest(session=session or None)
        except ActorflowError:
            continue
        if got is None or got.id != newest:
            found = None if got is None else got.id
            raise fail(f"latest(session={session!r}) gave {found!r}, not {newest!r}")
    saved: list[str] = expected["ids"]
    try:
        listed = [cp.id for cp in store.list()]
    except ActorflowError:
        pass
    else:
        if sorted(listed) != sorted(saved):
            lost, extra = sorted(set(saved) - set(listed)), sorted(set(listed) - set(saved))
            raise fail(f"list() lost {lost[:3]} and added {extra[:3]}")
    try:
        sessions = store.sessions()
    except ActorflowError:
        pass
    else:
        if sessions != sorted(s for s in expected["latest"] if s):
            raise fail(f"sessions() gave {sessions}")
    # What a raw listing or a load misses is reported if verify() names a problem.
    unreported: list[str] = []
    try:
        unreported += sorted(set(saved) - set(store.ids()))
    except ActorflowError:
        pass
    for checkpoint_id in saved:
        try:
            store.load(checkpoint_id)
        except ActorflowError:
            unreported.append(checkpoint_id)
    if unreported and store.verify() == []:
        raise fail(f"{unreported[:3]} cannot be listed or loaded, and verify() reports nothing")


def _fresh(work: Path) -> Path:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    return work


# --- MemoryStore: the image is its entries -------------------------------------


class MemoryAdapter:
    name = "memory-store"

    def build(self, rng: random.Random, work: Path) -> bytes:
        store = MemoryStore()
        for cp, blobs in history(rng):
            store.save(cp, blobs)
        entries = [
            [
                i,
                store._record(i),
                *store._index[i][1:5],
                list(store._index[i][5]),
                store._index[i][6],
            ]
            for i in sorted(store._index)
        ]
        return packb({"entries": entries, "blobs": store._blobs})

    def damage(self, image: bytes, rng: random.Random, work: Path) -> bytes:
        body = msgpack.unpackb(image, strict_map_key=False)
        entry = rng.choice(body["entries"])
        # The entry's other fields and the reference counts are written by save()
        # alone, from a checked record: only the bytes it keeps can be damaged.
        if rng.random() < 0.7 or not body["blobs"]:
            entry[1] = _damage_record(entry[1], rng)
        else:
            digest = rng.choice(sorted(body["blobs"]))
            body["blobs"][digest] = mutate_bytes(body["blobs"][digest], rng)
        return packb(body)

    def open(self, image: bytes, work: Path) -> MemoryStore:
        body = msgpack.unpackb(image, strict_map_key=False)
        store = MemoryStore()
        for checkpoint_id, record, session, workflow, kind, parent, digests, created in body[
            "entries"
        ]:
            listed = tuple(d for d in digests if isinstance(d, str))
            store._index[checkpoint_id] = (record, session, workflow, kind, parent, listed, created)
            store._listings[listed] = store._listings.get(listed, 0) + 1
        for listed in store._listings:
            for digest in listed:
                store._refs[digest] = store._refs.get(digest, 0) + 1
        store._blobs.update(body["blobs"])
        return store


def _damage_record(record: bytes, rng: random.Random) -> bytes:
    """A record damaged as bytes, or with its body (runtime field included) mutated and re-signed."""
    if rng.random() < 0.3:
        return mutate_bytes(record, rng)
    _, version, _, body = msgpack.unpackb(record)
    fields = parse_tree(body)
    if rng.random() < 0.5:  # the runtime field, structure-aware
        for pair in fields.pairs:
            if pair[0] == "runtime" and isinstance(pair[1], bytes):
                pair[1] = mutate(pair[1], rng)
        return sign(version, pack_tree(fields))
    return sign(version, pack_tree(mutate_tree(fields, rng)))


# --- FileStore: the image is {relative path: bytes, or None for a folder} --------


class FileAdapter:
    name = "file-store"

    def build(self, rng: random.Random, work: Path) -> bytes:
        root = _fresh(work) / "store"
        store = FileStore(root)
        saved = history(rng)
        for cp, blobs in saved[:-2]:
            store.save(cp, blobs)
        store.delete(saved[0][0].id)  # a deleted list, a blob-only pack, record packs
        for cp, blobs in saved[-2:]:
            store.save(cp, blobs)  # a segment
        store.close()
        return _pack_folder(root)

    def damage(self, image: bytes, rng: random.Random, work: Path) -> bytes:
        files: dict[str, bytes | None] = msgpack.unpackb(image)
        packs = sorted(p for p in files if p.startswith("packs/") and files[p] is not None)
        name = rng.choice(packs)
        data = files[name]
        assert data is not None
        action = rng.randrange(10)
        if action < 3:
            files[name] = _damage_pack_header(data, rng)
        elif action < 5 and name.endswith(".pack"):
            files[name] = _replace_record(data, rng)
        elif action == 5:
            files[name] = mutate_bytes(data, rng)
        elif action == 6:
            odd = rng.choice(
                [
                    "packs/zz.pack",
                    "packs/zz.blobs",
                    "packs/.tmp-x",
                    "deleted",
                    "actorflow-store",
                    ".lock",
                ]
            )
            files[odd] = rng.choice([None, b"\xff\xfe\x00", b"", rng.randbytes(64), data])
        elif action == 7:
            del files[name]
        elif action == 8:
            files[f"packs/{rng.choice(['0', 'f', 'zz'])}{name[6:]}"] = (
                data  # a copy under another id
            )
        else:  # the hints trailer, if any: it follows the last blob
            files[name] = data[: -rng.randrange(1, 40)] + rng.randbytes(rng.randrange(40))
        return packb(files)

    def open(self, image: bytes, work: Path) -> FileStore:
        root = _fresh(work) / "store"
        files: dict[str, bytes | None] = msgpack.unpackb(image)
        for rel, data in sorted(files.items()):
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if data is None:
                path.mkdir(exist_ok=True)
            elif not path.is_dir():
                path.write_bytes(data)
        return FileStore(root)


def _pack_folder(root: Path) -> bytes:
    return packb(_folder(root))


def _folder(root: Path) -> dict[str, bytes | None]:
    files: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        files[rel] = None if path.is_dir() else path.read_bytes()
    return files


class SegmentAdapter:
    """FileStore segments (layout 3): two handles' interleaved saves, one frame damaged.

    The image is ``{"files": folder, "expected": answers}`` (see :func:`check_answers`).
    No damage here removes a record legitimately (no file is deleted or cut short,
    the last frame of a segment is left alone), so a record that was saved and is
    neither returned nor reported is a failure.
    """

    name = "file-segments"

    def build(self, rng: random.Random, work: Path) -> bytes:
        root = _fresh(work) / "store"
        handles = [FileStore(root), FileStore(root)]
        for n, (cp, blobs) in enumerate(history(rng)):
            handles[n % 2].save(cp, blobs)  # ids interleave across the two segments
        store = handles[0]
        latest = {s: store.latest(session=s or None) for s in ["", *store.sessions()]}
        expected = {
            "ids": store.ids(),
            "latest": {s: cp.id for s, cp in latest.items() if cp is not None},
        }
        for handle in handles:
            handle.close()
        return packb({"files": _folder(root), "expected": expected})

    def damage(self, image: bytes, rng: random.Random, work: Path) -> bytes:
        body = msgpack.unpackb(image)
        files: dict[str, bytes | None] = body["files"]
        segments = {n: frames_of(d) for n, d in sorted(files.items()) if n.endswith(".seg") and d}
        ids = [f.ident for frames in segments.values() for f in frames]
        places = [(n, k) for n, frames in segments.items() for k in range(len(frames) - 1)]
        done = []
        for _ in range(1 if rng.random() < 0.85 else 2):
            name, k = rng.choice(places)
            data = files[name]
            assert data is not None
            if k < len(frames_of(data)) - 1:
                files[name], what = damage_frame(
                    data, k, ids, rng, lambda p: _damage_frame_pack(p, rng)
                )
                done.append(what)
        body["damage"] = "+".join(done)
        return packb(body)

    def open(self, image: bytes, work: Path) -> FileStore:
        return FileAdapter().open(packb(msgpack.unpackb(image)["files"]), work)

    def expected(self, image: bytes) -> tuple[dict[str, Any], str]:
        """What the healthy store answered (see :func:`check_answers`), and the damage done."""
        body = msgpack.unpackb(image)
        return body["expected"], str(body.get("damage", ""))


def _damage_frame_pack(pack: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return _damage_pack_header(pack, rng)
    if rng.random() < 0.5:
        return _replace_record(pack, rng)
    return mutate_bytes(pack, rng)


def _split_pack(data: bytes) -> tuple[int, list[Any], bytes]:
    size = int.from_bytes(data[8:12], "big")
    return size, msgpack.unpackb(data[16 : 16 + size]), data[16 + size :]


def _join_pack(header: Any, rest: bytes) -> bytes:
    body = pack_tree(header)
    return (
        b"AFPACK01"
        + len(body).to_bytes(4, "big")
        + zlib.crc32(body).to_bytes(4, "big")
        + body
        + rest
    )


def _damage_pack_header(data: bytes, rng: random.Random) -> bytes:
    """The header's lengths or digests changed, its crc32 recomputed (past the checksum)."""
    try:
        _, header, rest = _split_pack(data)
    except Exception:  # noqa: BLE001 - already damaged: damage it as bytes
        return mutate_bytes(data, rng)
    if rng.random() < 0.5 and isinstance(header, list) and len(header) == 2 and header[1]:
        entry = rng.choice(header[1])
        entry[rng.randrange(2)] = rng.choice(
            [-1, 0, 1 << 62, (1 << 64) - 1, len(rest) + 1, b"\x00" * 32, "x"]
        )
        if rng.random() < 0.3:
            header[0] = rng.choice([-5, 1 << 62, len(rest), len(rest) + 1, 0])
        return _join_pack(header, rest)
    return _join_pack(mutate_tree(parse_tree(packb(header)), rng), rest)


def _replace_record(data: bytes, rng: random.Random) -> bytes:
    """The pack's record damaged (a consistent header written around it)."""
    try:
        _, (length, entries), rest = _split_pack(data)
        record, tail = rest[:length], rest[length:]
    except Exception:  # noqa: BLE001
        return mutate_bytes(data, rng)
    damaged = _damage_record(record, rng)
    return _join_pack([len(damaged), entries], damaged + tail)


# --- SQLiteStore: the image is the database file ---------------------------------


_SQL_DAMAGE = [
    "UPDATE checkpoints SET {col} = ? WHERE rowid = (SELECT rowid FROM checkpoints ORDER BY random() LIMIT 1)",
    "UPDATE blobs SET {bcol} = ? WHERE id = (SELECT id FROM blobs ORDER BY random() LIMIT 1)",
    "UPDATE refs SET blob = ? WHERE rowid = (SELECT rowid FROM refs ORDER BY random() LIMIT 1)",
    "UPDATE actorflow_schema SET version = ?",
    "INSERT INTO refs (checkpoint, blob) VALUES ((SELECT max(rowid) FROM checkpoints), ?)",
    "DELETE FROM blobs WHERE id = (SELECT id FROM blobs ORDER BY random() LIMIT 1 OFFSET ?)",
    "INSERT OR REPLACE INTO deleted (id) VALUES (?)",
]
_ODD_VALUES: list[object] = [
    None,
    0,
    -1,
    1 << 62,
    2.5,
    "",
    "x",
    b"\xff\xfe",
    "\udc80".encode("utf-8", "surrogatepass"),
    "s1",
    "final",
]


class SQLiteAdapter:
    name = "sqlite-store"

    def build(self, rng: random.Random, work: Path) -> bytes:
        path = _fresh(work) / "s.db"
        store = SQLiteStore(path)
        saved = history(rng)
        for cp, blobs in saved:
            store.save(cp, blobs)
        store.delete(saved[0][0].id)
        store._connections.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store._connections.conn().execute("PRAGMA journal_mode = DELETE")  # one file: the image
        store.close()
        return path.read_bytes()

    def damage(self, image: bytes, rng: random.Random, work: Path) -> bytes:
        if rng.random() < 0.45:  # the file itself: a header byte or any page
            buf = bytearray(image)
            for _ in range(rng.choice([1, 1, 2, 8])):
                at = rng.randrange(100) if rng.random() < 0.2 else rng.randrange(len(buf))
                buf[at] ^= 1 << rng.randrange(8)
            return bytes(buf)
        path = _fresh(work) / "d.db"
        path.write_bytes(image)
        db = sqlite3.connect(path, isolation_level=None)
        try:
            if rng.random() < 0.3:
                row = db.execute(
                    "SELECT rowid, record FROM checkpoints ORDER BY random() LIMIT 1"
                ).fetchone()
                db.execute(
                    "UPDATE checkpoints SET record = ? WHERE rowid = ?",
                    (_damage_record(row[1], rng), row[0]),
                )
            else:
                statement = rng.choice(_SQL_DAMAGE).format(
                    col=rng.choice(
                        ["id", "session", "workflow", "kind", "superstep", "parent_id", "record"]
                    ),
                    bcol=rng.choice(["digest", "data"]),
                )
                value = rng.choice(_ODD_VALUES) if "OFFSET" not in statement else rng.randrange(3)
                db.execute(statement, (value,))
        except sqlite3.Error:
            pass  # a constraint refused it: the image stays as it was
        finally:
            db.close()
        return path.read_bytes()

    def open(self, image: bytes, work: Path) -> SQLiteStore:
        path = _fresh(work) / "s.db"
        path.write_bytes(image)
        return SQLiteStore(path)


ADAPTERS: dict[str, StoreAdapter] = {
    a.name: a for a in (MemoryAdapter(), FileAdapter(), SegmentAdapter(), SQLiteAdapter())
}


def store_target(adapter: StoreAdapter, work: Path | None = None) -> Target:
    """A :class:`Target` whose inputs are images of ``adapter``'s store."""
    base = (work or Path(tempfile.mkdtemp(prefix="actorflow-fuzz-"))) / adapter.name
    images: dict[int, bytes] = {}

    def seed(rng: random.Random) -> bytes:
        key = rng.randrange(4)  # a few healthy images, built once each
        if key not in images:
            images[key] = adapter.build(random.Random(key), base / "build")
        return images[key]

    def damage(image: bytes, rng: random.Random) -> bytes:
        return adapter.damage(image, rng, base / "damage")

    answers = getattr(adapter, "expected", None)

    def check(image: bytes) -> None:
        try:
            store = adapter.open(image, base / "open")
            expected = None if answers is None else answers(image)
        except (ValueError, TypeError, KeyError, msgpack.UnpackException):
            # Only the harness's own framing of a folder or memory image can fail this
            # way (a bytes-level mutant of it): no store to test. Store errors are
            # ActorflowErrors and pass through.
            return
        if expected is not None:
            try:
                check_answers(store, *expected)
            except BaseException:
                store.close()
                raise
        exercise(store)

    return Target(adapter.name, seed, damage, check)
