"""Whether a thread should spin briefly before it sleeps: a hand-off both ways, measured.

Two threads pass a small msgpack payload back and forth through ``queue.SimpleQueue``
(each decodes and re-encodes it), as a host and the next host hand a superstep on.
``block``: each waits in ``get()`` (the thread sleeps until the other wakes it; what
actorflow's hosts do). ``spin``: each first polls ``get_nowait()`` up to 200 times,
giving the GIL up between polls with ``time.sleep(0)``, and only then blocks. A
spinning thread cannot keep the GIL (the other thread must run to hand it anything),
so a spin is a loop of GIL hand-offs.

Printed per mode, alternating, ``--quick`` fewer: ``hops_per_s`` (median) and
``cpu_us_per_hop``. Measured on the 2-core VM: block ~128,000 hops/s, spin ~25,500
(5x slower), and slower too beside two busy processes (45,000-72,000 against
~25,000): why the hosts do not spin.

A probe of the machine, not of actorflow; it has no target.

Run: ``python -m bench.spin_probe [--quick]``.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Sequence

import msgpack

from bench._common import median, parse_options

SPINS = 200
"""Polls before a spinning thread blocks."""


def _get(inbox: queue.SimpleQueue[bytes], spin: bool) -> bytes:
    if spin:
        for _ in range(SPINS):
            try:
                return inbox.get_nowait()
            except queue.Empty:
                time.sleep(0)  # gives the GIL up: the other thread must run to send
    return inbox.get()


def _relay(payload: bytes) -> bytes:
    data: bytes = msgpack.packb(msgpack.unpackb(payload))
    return data


def hops(spin: bool, count: int) -> tuple[float, float]:
    """(hops/s, CPU us a hop) of ``count`` round trips between two threads."""
    there: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    back: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def peer() -> None:
        for _ in range(count):
            back.put(_relay(_get(there, spin)))

    thread = threading.Thread(target=peer, daemon=True)
    thread.start()
    started, cpu = time.perf_counter(), time.process_time()
    there.put(msgpack.packb([1, "payload"]))
    for _ in range(count - 1):
        there.put(_relay(_get(back, spin)))
    _get(back, spin)
    thread.join(timeout=60)
    elapsed = time.perf_counter() - started
    return 2 * count / elapsed, (time.process_time() - cpu) / (2 * count) * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    """Print one record per mode."""
    options = parse_options(__doc__ or "", argv)
    count, repeats = (2_000, 3) if options.quick else (20_000, 5)
    samples: dict[str, list[tuple[float, float]]] = {"block": [], "spin": []}
    for _ in range(repeats):
        for mode, runs in samples.items():
            runs.append(hops(mode == "spin", count))
    for mode, runs in samples.items():
        record = {
            "probe": f"spin_{mode}",
            "hops_per_s": round(median([rate for rate, _ in runs])),
            "cpu_us_per_hop": round(median([cpu for _, cpu in runs]), 2),
            "samples": [round(rate) for rate, _ in runs],
        }
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
