"""Encryption at rest: W3 and W4 on an EncryptedStore against the same store unencrypted.

For FileStore and SQLiteStore: W3 (100 checkpointed supersteps of the 8-executor
ring, durability sync, see ``bench.w3``) and W4 (a fresh setup resumes W3's last
cut and runs superstep 101, see ``bench.w4``), each on
``EncryptedStore(store, keys={...})`` (AES-256-GCM, one key). The floor is the same
workload on the same store kind unencrypted, measured in the same run and
alternating with it (plain, encrypted, plain, encrypted, ... after a warm-up of
both), so a drift of the disk or the machine affects both sides alike.

Metric: W3 ms/superstep (median of 7 runs each), W4 resume + one step in ms
(median of 10 each). Target: <= 1.15x the unencrypted store.

Run: ``python -m bench.w_encrypted [--quick]``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

import actorflow as af
from actorflow.storage import EncryptedStore
from bench._common import median, parse_options, report
from bench.w3 import STEPS, STORES, StoreKind, build_ring, run_ring, temp_dir
from bench.w4 import resume_once

KEYS = {"bench": b"\x07" * 32}


def encrypted(kind: StoreKind) -> StoreKind:
    """``kind`` opened under an EncryptedStore."""

    def open_encrypted(folder: str) -> af.CheckpointStore:
        return EncryptedStore(kind.open(folder), keys=KEYS)

    return StoreKind(f"{kind.name}_encrypted", open_encrypted)


def w3(kind: StoreKind, repeats: int, quick: bool) -> None:
    """W3 on ``kind``, encrypted and not, alternating."""
    sealed = encrypted(kind)
    plain_s: list[float] = []
    sealed_s: list[float] = []
    sealed_bytes = plain_bytes = 0
    with build_ring() as wf:
        for which in (kind, sealed):  # warm-up of both
            with temp_dir("wenc-warm-") as folder:
                run_ring(wf, which.open(folder), folder)
        for _ in range(repeats):
            with temp_dir("wenc-plain-") as folder:
                run = run_ring(wf, kind.open(folder), folder)
                plain_s.append(run.seconds / STEPS)
                plain_bytes = run.bytes_on_disk
            with temp_dir("wenc-sealed-") as folder:
                run = run_ring(wf, sealed.open(folder), folder)
                sealed_s.append(run.seconds / STEPS)
                sealed_bytes = run.bytes_on_disk
    report(
        f"w3_encrypted_{kind.name}",
        "ms_per_superstep",
        median(sealed_s) * 1e3,
        "ms",
        floor=median(plain_s) * 1e3,
        floor_unit="ms",
        floor_name=f"W3 on the same {kind.name} store unencrypted, alternating",
        target_op="<=",
        target_value=1.15,
        samples=[s * 1e3 for s in sealed_s],
        quick=quick,
        floor_samples=[s * 1e3 for s in plain_s],
        bytes_on_disk=sealed_bytes,
        bytes_on_disk_unencrypted=plain_bytes,
    )


def w4(kind: StoreKind, repeats: int, quick: bool) -> None:
    """W4 on ``kind``, encrypted and not, alternating."""
    sealed = encrypted(kind)
    totals: dict[str, list[float]] = {kind.name: [], sealed.name: []}
    with temp_dir("wenc-w4-") as base:
        for which in (kind, sealed):
            original = os.path.join(base, which.name)
            os.mkdir(original)
            with build_ring() as wf:
                run_ring(wf, which.open(original), original)
        for i in range(repeats + 1):  # the first is a warm-up
            for which in (kind, sealed):
                copy = os.path.join(base, f"{which.name}-rep{i}")
                shutil.copytree(os.path.join(base, which.name), copy)
                times = resume_once(which, copy)
                shutil.rmtree(copy, ignore_errors=True)
                if i:
                    totals[which.name].append(times["resume_plus_step"] * 1e3)
    report(
        f"w4_encrypted_{kind.name}",
        "resume_plus_step_ms",
        median(totals[sealed.name]),
        "ms",
        floor=median(totals[kind.name]),
        floor_unit="ms",
        floor_name=f"W4 on the same {kind.name} store unencrypted, alternating",
        target_op="<=",
        target_value=1.15,
        samples=totals[sealed.name],
        quick=quick,
        floor_samples=totals[kind.name],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """W3 and W4, encrypted against unencrypted, on each store kind."""
    options = parse_options(__doc__ or "", argv)
    for kind in STORES:
        w3(kind, 1 if options.quick else 7, options.quick)
        w4(kind, 3 if options.quick else 10, options.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
