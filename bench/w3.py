"""W3: durable checkpoints of a ring whose state is mostly unchanged from step to step.

Eight executors e0..e7 in a ring; e0 owns 10,000 items ``{"id": i, "text": 80 chars}``
(~1 MB), e1..e7 own 640 items each. The token starts at e0 as 0; the executor holding
n appends ``{"id": 1000000 + n, "text": f"step-{n}"}`` to its own list and sends
n + 1 onward. Exactly 100 supersteps (``max_supersteps=100``, the
``SuperstepLimitExceeded`` caught), a checkpoint after every superstep, durability
sync, on a FileStore and on an SQLiteStore in temp dirs.

Metric: ms/superstep (wall time of the run / 100, median of 7 runs interleaved
with 7 samples of the floor, after a warm-up run on a throwaway store of the same
kind; 3 of each left the ratio at the mercy of one slow fsync on a shared VM) and
bytes on disk afterwards (every file of the
store, SQLite's -wal and -shm included). Targets: <= 1.3x the floor (a ratio, since an
absolute time measures the disk of the day: the fsync floor was 0.6 ms one day and
1.8 ms another), <= 3 MB.

Floor, same process: per step, msgpack-encode only the changed executor's state
and write it to that executor's file with fsync; its bytes are those final files.

Run: ``python -m bench.w3 [--quick]``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgpack

import actorflow as af
from bench._common import bytes_under, make_items, median, parse_options, report

RING = 8
STEPS = 100
BIG_ITEMS = 10_000
SMALL_ITEMS = 640
SESSION = "w3"


class RingMember(af.Executor):
    """Appends one item per token it holds and passes the token on."""

    def __init__(self, id: str, items: list[dict[str, Any]]) -> None:
        super().__init__(id)
        self.items = items

    @af.handler
    def on_token(self, n: int, ctx: af.Context[int]) -> None:
        self.items.append(new_item(n))
        ctx.send(n + 1)


def new_item(n: int) -> dict[str, Any]:
    """The item the holder of token ``n`` appends."""
    return {"id": 1_000_000 + n, "text": f"step-{n}"}


def initial_items(index: int) -> list[dict[str, Any]]:
    """e0 owns 10,000 items, the others 640 each."""
    return make_items(BIG_ITEMS if index == 0 else SMALL_ITEMS)


def ring_members() -> list[RingMember]:
    """Fresh blueprints e0..e7 with their initial items."""
    return [RingMember(f"e{i}", initial_items(i)) for i in range(RING)]


def build_ring(members: list[RingMember] | None = None) -> af.Workflow:
    """The W3 ring e0 -> e1 -> ... -> e7 -> e0, built anew (fresh blueprints by default)."""
    members = members if members is not None else ring_members()
    builder = af.WorkflowBuilder("w3", start=members[0], max_supersteps=10 * STEPS)
    for i in range(1, RING):
        builder.add_edge(members[i - 1].id, members[i])
    builder.add_edge(members[-1].id, members[0].id)
    return builder.build()


POLICY = af.CheckpointPolicy(every=1, durability=af.Durability.SYNC)

StoreFactory = Callable[[str], af.CheckpointStore]


@dataclass(frozen=True, slots=True)
class StoreKind:
    """How to open one store kind under a temp dir."""

    name: str
    open: StoreFactory


def _file_store(folder: str) -> af.CheckpointStore:
    return af.FileStore(os.path.join(folder, "store"))


def _sqlite_store(folder: str) -> af.CheckpointStore:
    return af.SQLiteStore(os.path.join(folder, "w3.db"))


STORES = (StoreKind("file", _file_store), StoreKind("sqlite", _sqlite_store))


def close_store(store: af.CheckpointStore) -> None:
    """Close a store if its class can be closed."""
    closer = getattr(store, "close", None)
    if callable(closer):
        closer()


@dataclass(frozen=True, slots=True)
class RingRun:
    """What one W3 run left behind."""

    seconds: float
    bytes_on_disk: int
    bytes_after_close: int
    checkpoints: int
    last_superstep: int


def run_ring(wf: af.Workflow, store: af.CheckpointStore, folder: str) -> RingRun:
    """Run W3's 100 checkpointed supersteps into ``store`` (which lives in ``folder``)."""
    started = time.perf_counter()
    with wf.session(SESSION, store=store, checkpoint=POLICY) as session:
        try:
            session.run(0, max_supersteps=STEPS)
        except af.SuperstepLimitExceeded:
            pass
        else:
            raise AssertionError("W3 should stop at the superstep limit")
        seconds = time.perf_counter() - started
    on_disk = bytes_under(folder)
    latest = store.latest(session=SESSION)
    checkpoints = len(store.list(session=SESSION))
    close_store(store)
    if latest is None:
        raise AssertionError("W3 left no checkpoint")
    return RingRun(seconds, on_disk, bytes_under(folder), checkpoints, latest.superstep)


@contextmanager
def temp_dir(prefix: str) -> Iterator[str]:
    """A temp dir removed afterwards."""
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fsync_floor(folder: str) -> tuple[float, int]:
    """Seconds for the floor's 100 steps, and the bytes its files hold afterwards."""
    states = [{"items": initial_items(i)} for i in range(RING)]
    started = time.perf_counter()
    for n in range(STEPS):
        holder = n % RING
        states[holder]["items"].append(new_item(n))
        data = msgpack.packb(states[holder], use_bin_type=True)
        with open(os.path.join(folder, f"e{holder}.bin"), "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    return time.perf_counter() - started, bytes_under(folder)


def main(argv: Sequence[str] | None = None) -> int:
    """W3 on each store kind, with the fsync floor sampled alongside."""
    options = parse_options(__doc__ or "", argv)
    repeats = 1 if options.quick else 7
    for kind in STORES:
        floors: list[float] = []
        floor_bytes = 0
        runs: list[RingRun] = []
        with build_ring() as wf:
            with temp_dir("w3-warm-") as folder:  # warm-up: imports, code paths, page cache
                run_ring(wf, kind.open(folder), folder)
            for _ in range(repeats):
                with temp_dir("w3-floor-") as folder:
                    seconds, floor_bytes = fsync_floor(folder)
                    floors.append(seconds / STEPS)
                with temp_dir(f"w3-{kind.name}-") as folder:
                    runs.append(run_ring(wf, kind.open(folder), folder))
        per_step = [r.seconds / STEPS for r in runs]
        last = runs[-1]
        if last.last_superstep != STEPS:
            raise AssertionError(f"W3 stopped at superstep {last.last_superstep}, not {STEPS}")
        ms = median(per_step) * 1e3
        floor_ms = median(floors) * 1e3
        report(
            f"w3_{kind.name}",
            "ms_per_superstep",
            ms,
            "ms",
            floor=floor_ms,
            floor_unit="ms",
            floor_name="msgpack-encode the changed executor's state, write + fsync its file",
            target_op="<=",
            target_value=1.3,
            samples=[s * 1e3 for s in per_step],
            quick=options.quick,
            floor_samples=[f * 1e3 for f in floors],
            checkpoints=last.checkpoints,
            supersteps=STEPS,
        )
        report(
            f"w3_{kind.name}",
            "bytes_on_disk_mb",
            last.bytes_on_disk / 1e6,
            "MB",
            floor=floor_bytes / 1e6,
            floor_unit="MB",
            floor_name="final msgpack state of every executor, one file each",
            target_op="<=",
            target_value=3.0,
            target_on="value",
            quick=options.quick,
            bytes_on_disk=last.bytes_on_disk,
            bytes_after_store_close=last.bytes_after_close,
            floor_bytes=floor_bytes,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
