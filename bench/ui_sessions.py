"""The inspector's sessions page with 10,000 sessions on an SQLiteStore.

Workload: a store of 10,000 sessions (a third idle, a third waiting on a request, a
third failed past their restart policy; 2-3 records each, as real runs leave them).
Three template sessions are made by real runs and saved through the store; the
others are their records under new ids and session names, inserted in one
transaction straight into the store's tables (30,000 saves through the store would
take minutes of fsyncs and measure nothing of the page). The figure is one
``GET /`` of a running inspector: the first page of sessions, newest first, with
each session's state and why (every session's state is needed for the filter's
counts), median of 7 after a warm-up; a search with a state filter is a detail.

Floor: one ``SELECT`` of every session's newest record (the rows only, not decoded),
the least any page listing every session's state reads.
Target: <= 1 s.

Run: ``python -m bench.ui_sessions [--quick]`` (``--quick``: 3 samples).
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import actorflow as af
from actorflow.storage import Checkpoint, HistoryEntry, encode_checkpoint, new_checkpoint_id
from actorflow.ui import Inspector
from bench._common import alternate, median, parse_options, report

SESSIONS = 10_000
TEMPLATES = ("idle", "waiting", "failed")


class Desk(af.Executor):
    """Outputs an even number, asks about an odd one, fails on a negative one."""

    @af.handler
    def on_int(self, n: int, ctx: af.Context[Any]) -> None:
        if n < 0:
            raise ValueError(f"{n} is negative")
        if n % 2:
            ctx.request(n, bool)
        else:
            ctx.output(n)

    @af.response_handler
    def on_answer(self, n: int, ok: bool, ctx: af.Context[Any]) -> None:
        ctx.output(ok)


def templates() -> af.MemoryStore:
    """One session of each kind, made by real runs."""
    store = af.MemoryStore()
    restart = af.RestartPolicy(max_restarts=2)
    with af.WorkflowBuilder("desk", start=Desk("desk"), restart=restart).build() as wf:
        for name, n in zip(TEMPLATES, (2, 1, -1), strict=True):
            with wf.session(f"template-{name}", store=store) as s:
                try:
                    s.run(n)
                except af.ExecutorFailed:
                    pass
    return store


def _copy(cp: Checkpoint, session: str, new_id: str, parent: str | None) -> Checkpoint:
    history = tuple(HistoryEntry(e.seq, e.kind, e.time, e.data, new_id) for e in cp.history)
    return Checkpoint(
        id=new_id,
        parent_id=parent,
        session=session,
        workflow=cp.workflow,
        graph_signature=cp.graph_signature,
        superstep=cp.superstep,
        kind=cp.kind,
        created_at=cp.created_at,
        executors=cp.executors,
        runtime=cp.runtime,
        metadata=cp.metadata,
        history=history,
    )


def build(path: Path, sessions: int) -> None:
    """The store: the templates saved through the store, then ``sessions`` copies of
    their records inserted in one transaction."""
    source = templates()
    lineages = [source.list(session=f"template-{name}") for name in TEMPLATES]
    with af.SQLiteStore(path) as store:
        for cps in lineages:
            for cp in cps:
                digests = {d for ds in cp.executors.values() for d in ds}
                store.save(cp, {d: source.load_blob(d) for d in digests})
    db = sqlite3.connect(path)
    try:
        blob_ids = dict(db.execute("SELECT digest, id FROM blobs"))
        with db:
            for n in range(sessions):
                session = f"customer-{n:05d}"
                parent: str | None = None
                for cp in lineages[n % len(lineages)]:
                    copy = _copy(cp, session, new_checkpoint_id(), parent)
                    parent = copy.id
                    row = db.execute(
                        "INSERT INTO checkpoints (id, session, workflow, kind, superstep,"
                        " created_at, parent_id, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            copy.id,
                            session,
                            copy.workflow,
                            copy.kind.value,
                            copy.superstep,
                            copy.created_at + n * 1e-3,
                            copy.parent_id,
                            encode_checkpoint(copy),
                        ),
                    )
                    refs = {blob_ids[d] for ds in copy.executors.values() for d in ds}
                    db.executemany(
                        "INSERT INTO refs (checkpoint, blob) VALUES (?, ?)",
                        [(row.lastrowid, b) for b in sorted(refs)],
                    )
    finally:
        db.close()


def main() -> None:
    options = parse_options(__doc__ or "")
    repeats = 3 if options.quick else 7
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with tempfile.TemporaryDirectory(prefix="actorflow-bench-ui-") as folder:
        path = Path(folder) / "sessions.db"
        started = time.perf_counter()
        build(path, SESSIONS)
        build_s = time.perf_counter() - started
        raw = sqlite3.connect(path)

        def floor() -> float:
            began = time.perf_counter()
            rows = raw.execute(
                "SELECT id, record FROM checkpoints WHERE id IN"
                " (SELECT max(id) FROM checkpoints GROUP BY session)"
            ).fetchall()
            assert len(rows) == SESSIONS + len(TEMPLATES)
            return time.perf_counter() - began

        with af.SQLiteStore(path) as store, Inspector(store, port=0) as inspector:

            def get(url: str) -> float:
                began = time.perf_counter()
                with opener.open(url, timeout=60) as response:
                    body = response.read().decode()
                elapsed = time.perf_counter() - began
                assert response.status == 200 and 'id="sessions"' in body, body[:500]
                return elapsed

            page = inspector.url + "/"
            floors, pages = alternate(floor, lambda: get(page), repeats, warmup=1)
            searched = [get(inspector.url + "/?q=customer-01&state=failed") for _ in range(repeats)]
        raw.close()
    report(
        "ui_sessions",
        "sessions_page_s",
        median(pages),
        "s",
        floor=median(floors),
        floor_unit="s",
        floor_name="one SELECT of every session's newest record (rows only, not decoded)",
        target_op="<=",
        target_value=1.0,
        target_on="value",
        samples=pages,
        quick=options.quick,
        sessions=SESSIONS + len(TEMPLATES),
        floor_samples=floors,
        search_and_filter_s=median(searched),
        build_s=build_s,
    )


if __name__ == "__main__":
    main()
