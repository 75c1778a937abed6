"""Cancelling a run that another process runs, through the store they share.

A worker process runs a long report; this process asks it to stop with
``store.request_cancel(session, run_id)``. The worker's session looks at its lease
every 0.25 s while the run goes on, finds the request and stops the run at its next
barrier: the run ends cancelled, its halt checkpoint says so, and the lease is given
back when the worker closes the session. This process then resumes the session and
runs it on: the report goes on from where it stopped, nothing lost or done twice.
(The service's ``POST .../cancel`` sent to another worker, ``actorflow cancel STORE
SESSION`` and the inspector's Cancel button all go this way.)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import actorflow as af

SESSION = "report-7"
PAGES = 200


class Report(af.Executor):
    """Writes one page a superstep (20 ms of work each) until the last."""

    @af.handler
    def on_page(self, page: int, ctx: af.Context) -> None:
        time.sleep(0.02)  # the work of a page
        ctx.output(page)
        if page < PAGES:
            ctx.send(page + 1)


def build() -> af.Workflow:
    return af.WorkflowBuilder("report", start=Report("report")).add_edge("report", "report").build()


def worker(db: str) -> None:
    """Run the report; say the run's id as soon as it starts; say how it ended."""
    with af.SQLiteStore(db) as store, build() as wf, wf.session(SESSION, store=store) as s:
        pages: list[int] = []
        last: af.Event | None = None
        for last in s.stream(1):
            if isinstance(last, af.RunStartedEvent):
                print(f"run {last.run_id}", flush=True)
            elif isinstance(last, af.OutputEvent):
                pages.append(last.value)
        done = pages[-1] if pages else 0
        print(f"[worker] {type(last).__name__} after page {done} of {PAGES}", flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "reports.db")
        proc = subprocess.Popen(
            [sys.executable, __file__, "worker", db], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        run_id = proc.stdout.readline().split()[1]  # "run <id>": the worker has started
        with af.SQLiteStore(db) as store:
            asked = store.request_cancel(SESSION, run_id)
            print(f"[main] asked the holder to cancel run {run_id}: {asked}")
            said = proc.stdout.read()
            assert proc.wait(timeout=60) == 0
            print(said.rstrip())
            assert "RunCancelledEvent" in said, said
            stopped_at = int(said.split("after page ")[1].split()[0])
            assert stopped_at < PAGES
            halted = store.latest(session=SESSION)
            assert halted is not None
            print(f"[main] its newest checkpoint: {halted.kind.value}, {halted.history[-1].kind}")
            with build() as wf, wf.resume(store, session=SESSION) as s:
                rest = s.run()  # no input: what was in flight goes on
            assert rest.outputs == list(range(stopped_at + 1, PAGES + 1)), rest.outputs
            print(
                f"[main] resumed: pages {rest.outputs[0]}-{rest.outputs[-1]}, {rest.status.value}"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2])
    else:
        main()
