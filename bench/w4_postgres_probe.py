"""Where W4 on PostgreSQL spends its time: each store call of a resume + one superstep.

The same setup as ``bench.w_postgres``'s W4 (W3's 100 supersteps stored once, then a
fresh ``PostgresStore`` and workflow resume its last cut and run superstep 101),
with every store method the runtime calls timed. Printed per phase (median ms over
the repetitions): each store call (``acquire_lease``, ``latest``, ``load_blobs``,
``save``, ...), their sum, and the rest of the resume + step (the runtime's own
Python work: hosts, restore, the superstep, encoding the checkpoint). Both for a
fresh store per repetition and through one long-lived store.

Each call's ``*_server_ms`` is what the server reports spending on its statements
(``log_duration``: parse, bind and execute of each, a ``COMMIT`` sent as a
statement included; an autocommit statement's own commit is not). On a fresh store
the server process is new, and its first use of each table, index, function and
operator loads them into its caches: the difference between the two columns'
``server_ms`` is that cost. The connections are the store's usual ones, in a pool
this probe owns so that it can hear the server's reports. The reports cost a little
themselves (a notice and a log line per message), so totals here run a little above
``bench.w_postgres``'s.

A probe, not a figure with a target: ``bench.w_postgres`` reports W4.

Run: ``python -m bench.w4_postgres_probe [--quick]``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import psycopg_pool

import actorflow as af
from actorflow.storage.postgres._pool import check_idle
from bench._common import median, parse_options
from bench.w3 import build_ring, ring_members
from bench.w_postgres import DSN_VARIABLE, drop, resume_and_step, run_w3, undo_step

CALLS = (
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "latest",
    "load",
    "list",
    "load_blobs",
    "load_blob",
    "has_blobs",
    "save",
)
"""The store methods timed (the ones a resume and a superstep can call)."""

DURATION = re.compile(r"duration: ([0-9.]+) ms")


class Probe:
    """A store on a pool whose server reports each statement's duration, and the
    client and server milliseconds of each store call while :attr:`active`."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.client: dict[str, float] = defaultdict(float)
        self.server: dict[str, float] = defaultdict(float)
        self.active = False
        self._call: str | None = None
        self.pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=4,
            kwargs={
                "autocommit": True,
                "options": "-c log_duration=on -c client_min_messages=log",
            },
            configure=lambda conn: conn.add_notice_handler(self._heard),
            check=check_idle,
            open=True,
        )
        self.store = af.PostgresStore(self.pool, schema=schema)
        for name in CALLS:
            setattr(self.store, name, self._timed(name, getattr(self.store, name)))

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started, self._call = time.perf_counter(), name
            try:
                return method(*args, **kwargs)
            finally:
                self._call = None
                if self.active:
                    self.client[name] += (time.perf_counter() - started) * 1e3

        return timed

    def _heard(self, notice: psycopg.errors.Diagnostic) -> None:
        found = DURATION.match(notice.message_primary or "")
        if found and self.active and self._call is not None:
            self.server[self._call] += float(found.group(1))

    def reset(self) -> None:
        self.client.clear()
        self.server.clear()

    def close(self) -> None:
        self.store.close()
        self.pool.close()


def one(probe: Probe) -> dict[str, float]:
    """One resume + superstep through ``probe``'s store; the ms of each store call
    (client and server) and of the whole."""
    store = probe.store
    probe.reset()
    wf = build_ring(ring_members())
    probe.active = True
    started = time.perf_counter()
    session = resume_and_step(wf, store)
    total = (time.perf_counter() - started) * 1e3
    probe.active = False
    session.close()
    wf.close()
    undo_step(store)
    return {
        **probe.client,
        **{f"{name}_server": ms for name, ms in probe.server.items()},
        "server": sum(probe.server.values()),
        "total": total,
    }


def summarize(label: str, runs: list[dict[str, float]]) -> None:
    calls = sorted({k for r in runs for k in r if k in CALLS})
    per = {k: median([r.get(k, 0.0) for r in runs]) for r in runs for k in r}
    store_ms = [sum(r.get(n, 0.0) for n in calls) for r in runs]
    out = {
        "probe": label,
        "total_ms": round(per["total"], 2),
        "store_calls_ms": round(median(store_ms), 2),
        "server_ms": round(per["server"], 2),
        "rest_ms": round(median([r["total"] - s for r, s in zip(runs, store_ms, strict=True)]), 2),
        **{f"{k}_ms": round(v, 2) for k, v in sorted(per.items()) if k not in ("total", "server")},
        "samples": [round(r["total"], 2) for r in runs],
    }
    print(json.dumps(out))


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(__doc__ or "", argv)
    dsn = os.environ.get(DSN_VARIABLE)
    if not dsn:
        print(f"w4_postgres_probe: no server ({DSN_VARIABLE} unset)", file=sys.stderr)
        return 0
    schema = f"afprobe_{uuid.uuid4().hex[:8]}"
    try:
        with build_ring() as wf:
            run_w3(wf, dsn, schema)
        fresh: list[dict[str, float]] = []
        warm: list[dict[str, float]] = []
        service = Probe(dsn, schema)
        try:
            for i in range((4 if options.quick else 15) + 1):  # the first is a warm-up
                new = Probe(dsn, schema)
                try:
                    f = one(new)
                finally:
                    new.close()
                w = one(service)
                if i:
                    fresh.append(f)
                    warm.append(w)
        finally:
            service.close()
        summarize("fresh_store", fresh)
        summarize("warm_store", warm)
    finally:
        drop(dsn, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
