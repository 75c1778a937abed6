"""Opening, resuming and listing sessions on a large SQLiteStore: does it cost more as the store grows?

Workload: the store of ``bench.ui_sessions`` (10,003 sessions, 2-3 records each,
built the same way), and a small one built alike with 3 sessions. A service pays
``latest(session=...)`` on every open: a new session's (no record yet) and a resumed
one's. Figures, each the median of alternated rounds on the large store and the
small one (its floor, measured in the same rounds):

- ``open_new_session_ms``: ``wf.session(<new id>, store=store)`` and its close: the
  lease taken and released, the store asked for the session's latest (none).
- ``resume_oldest_session_ms``: ``wf.session(<the first session written>, if_exists="resume")``
  and its close: the lease, the latest record read, checked and restored.
- ``history_oldest_session_ms``: ``store.session_history`` of that session (a
  ``list`` of its records: what the inspector and the service's thread history read).
- ``latest_absent_ms`` / ``latest_oldest_ms`` (details): ``store.latest`` alone.

Target: each <= 1.5x the same on the small store (the cost does not grow with the
store).

Run: ``python -m bench.large_store [--quick]``.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import actorflow as af
from bench._common import alternate_all, median, parse_options, report
from bench.ui_sessions import SESSIONS, Desk, build

SMALL = 3
OLDEST = "customer-00000"  # an idle session in both stores, the first one written


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


class Opener:
    """The timed calls on one store: each call of a new session uses a new id."""

    def __init__(self, store: af.SQLiteStore, wf: af.Workflow) -> None:
        self.store = store
        self.wf = wf
        self._ids = itertools.count()

    def open_new(self) -> float:
        sid = f"new-{next(self._ids)}"
        return timed(lambda: self.wf.session(sid, store=self.store).close())

    def resume_oldest(self) -> float:
        return timed(lambda: self.wf.session(OLDEST, store=self.store, if_exists="resume").close())

    def history_oldest(self) -> float:
        return timed(lambda: self.store.session_history(OLDEST))

    def latest_absent(self) -> float:
        sid = f"absent-{next(self._ids)}"
        return timed(lambda: self.store.latest(session=sid))

    def latest_oldest(self) -> float:
        return timed(lambda: self.store.latest(session=OLDEST))


def main() -> None:
    options = parse_options(__doc__ or "")
    repeats = 5 if options.quick else 41
    with tempfile.TemporaryDirectory(prefix="actorflow-bench-large-") as folder:
        large_path, small_path = Path(folder) / "large.db", Path(folder) / "small.db"
        started = time.perf_counter()
        build(large_path, SESSIONS)
        build_s = time.perf_counter() - started
        build(small_path, SMALL)
        with (
            af.SQLiteStore(large_path) as large_store,
            af.SQLiteStore(small_path) as small_store,
            af.WorkflowBuilder("desk", start=Desk("desk")).build() as wf,
        ):
            large, small = Opener(large_store, wf), Opener(small_store, wf)
            figures = {
                name: alternate_all([getattr(small, name), getattr(large, name)], repeats)
                for name in (
                    "open_new",
                    "resume_oldest",
                    "history_oldest",
                    "latest_absent",
                    "latest_oldest",
                )
            }
    details: dict[str, Any] = {
        f"latest_{which}_ms": 1e3 * median(figures[f"latest_{which}"][1])
        for which in ("absent", "oldest")
    } | {
        f"latest_{which}_small_store_ms": 1e3 * median(figures[f"latest_{which}"][0])
        for which in ("absent", "oldest")
    }
    for metric, name, what in (
        ("open_new_session_ms", "open_new", "a new session"),
        ("resume_oldest_session_ms", "resume_oldest", "the first session written"),
        ("history_oldest_session_ms", "history_oldest", "the first session written"),
    ):
        floors, works = figures[name]
        report(
            "large_store",
            metric,
            1e3 * median(works),
            "ms",
            floor=1e3 * median(floors),
            floor_unit="ms",
            floor_name=f"the same read of {what} on a store of {SMALL + 3} sessions",
            target_op="<=",
            target_value=1.5,
            samples=[1e3 * w for w in works],
            quick=options.quick,
            sessions=SESSIONS + 3,
            build_s=build_s,
            **details,
        )


if __name__ == "__main__":
    main()
