"""Where W4 on PostgreSQL spends its time: each store call of a resume + one superstep.

The same setup as ``bench.w_postgres``'s W4 (W3's 100 supersteps stored once, then a
fresh ``PostgresStore`` and workflow resume its last cut and run superstep 101),
with every store method the runtime calls timed. Printed per phase (median ms over
the repetitions): each store call (``acquire_lease``, ``latest``, ``load_blobs``,
``save``, ...), their sum, and the rest of the resume + step (the runtime's own
Python work: hosts, restore, the superstep, encoding the checkpoint). Both for a
fresh store per repetition and through one long-lived store.

A probe, not a figure with a target: ``bench.w_postgres`` reports W4.

Run: ``python -m bench.w4_postgres_probe [--quick]``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import actorflow as af
from bench._common import median, parse_options
from bench.w3 import POLICY, SESSION, STEPS, build_ring, ring_members
from bench.w_postgres import DSN_VARIABLE, drop, run_w3

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


def instrument(store: Any, timings: dict[str, list[float]], active: list[bool]) -> None:
    """Wrap ``store``'s methods in :data:`CALLS` so each call adds its seconds to ``timings``."""
    for name in CALLS:
        method: Callable[..., Any] = getattr(store, name)

        def timed(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                if active[0]:
                    timings[_name].append(time.perf_counter() - started)

        setattr(store, name, functools.wraps(method)(timed))


def one(dsn: str, schema: str, store: Any = None) -> dict[str, float]:
    """One resume + superstep; the ms of each store call and of the whole."""
    timings: dict[str, list[float]] = defaultdict(list)
    active = [False]
    own = store is None
    if own:
        store = af.PostgresStore(dsn, schema=schema)
    instrument(store, timings, active)
    try:
        wf = build_ring(ring_members())
        active[0] = True
        started = time.perf_counter()
        session = wf.resume(store, session=SESSION, checkpoint=POLICY)
        try:
            session.run(max_supersteps=1)
        except af.SuperstepLimitExceeded:
            pass
        total = time.perf_counter() - started
        active[0] = False
        session.close()
        wf.close()
        latest = store.latest(session=SESSION)
        assert latest is not None and latest.superstep == STEPS + 1
        store.delete(latest.id)  # the next repetition resumes from W3's last cut again
    finally:
        active[0] = False
        for name in CALLS:
            vars(store).pop(name, None)
        if own:
            store.close()
    result = {name: sum(v) * 1e3 for name, v in timings.items()}
    result["total"] = total * 1e3
    return result


def summarize(label: str, runs: list[dict[str, float]]) -> None:
    names = sorted({k for r in runs for k in r if k != "total"})
    per = {n: median([r.get(n, 0.0) for r in runs]) for n in names}
    store_ms = median([sum(r.get(n, 0.0) for n in names) for r in runs])
    total = median([r["total"] for r in runs])
    out = {
        "probe": label,
        "total_ms": round(total, 2),
        "store_calls_ms": round(store_ms, 2),
        "rest_ms": round(median([r["total"] - sum(r.get(n, 0.0) for n in names) for r in runs]), 2),
        **{f"{n}_ms": round(v, 2) for n, v in per.items()},
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
        with af.PostgresStore(dsn, schema=schema) as service_store:
            for i in range((4 if options.quick else 15) + 1):  # the first is a warm-up
                f = one(dsn, schema)
                w = one(dsn, schema, service_store)
                if i:
                    fresh.append(f)
                    warm.append(w)
        summarize("fresh_store", fresh)
        summarize("warm_store", warm)
    finally:
        drop(dsn, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
