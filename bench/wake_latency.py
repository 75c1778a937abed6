"""What waking an idle CPU costs on this machine: a thread start and a server round trip,
back to back and after the process slept.

Every handoff of a resume (the lease grant, the reads, the save, the supervisor's and
the host's threads) wakes something that was idle: a CPU that halted, or a server
process that slept on its socket. On a small VM that wake is most of a short
operation's time, so this probe prints both, each median over 200 tries
(20 with ``--quick``):

- ``thread_start_us``: ``threading.Thread(...).start()`` until the new thread runs,
  with no pause between tries and after a 10 ms sleep before each;
- ``pg_round_trip_us`` (with a server, ``ACTORFLOW_TEST_PG_DSN``): ``SELECT 1`` on
  an open connection, the same two ways.

A probe of the machine, not of actorflow; it has no target.

Run: ``python -m bench.wake_latency``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence

from bench._common import median, parse_options
from bench.w_postgres import DSN_VARIABLE

TRIES = 200
"""Tries per figure (20 with ``--quick``)."""
PAUSE_S = 0.01


def timed_us(action: Callable[[], object], pause: float, tries: int) -> float:
    """Median µs of ``action`` over ``tries``, sleeping ``pause`` s before each."""
    samples = []
    for _ in range(tries):
        if pause:
            time.sleep(pause)  # the point: let the CPUs and the server go idle
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1e6)
    return round(median(samples), 1)


def thread_start() -> None:
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(__doc__ or "", argv)
    tries = 20 if options.quick else TRIES
    out: dict[str, object] = {
        "probe": "wake_latency",
        "thread_start_us": {
            "back_to_back": timed_us(thread_start, 0, tries),
            "after_idle": timed_us(thread_start, PAUSE_S, tries),
        },
    }
    dsn = os.environ.get(DSN_VARIABLE)
    if dsn:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as db:
            select = db.cursor()

            def round_trip() -> None:
                select.execute("SELECT 1").fetchone()

            out["pg_round_trip_us"] = {
                "back_to_back": timed_us(round_trip, 0, tries),
                "after_idle": timed_us(round_trip, PAUSE_S, tries),
            }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
