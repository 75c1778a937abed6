"""Sub-workflows: a review workflow nested in a publishing workflow, resumed in a new process.

The inner workflow counts drafts and asks a human to approve each one. Its
requests surface to the outer caller with a path-qualified id
(``"review/reviewer:..."``). The outer session checkpoints to SQLite while the
review is mid-way (one draft rejected, the second waiting for an answer); a
second process resumes it, answers, and the review continues from its second
draft instead of starting over. Finally, resuming with a changed inner workflow
fails with ``GraphMismatch`` naming the sub-workflow.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import actorflow as af


class Reviewer(af.Executor):
    """Counts drafts and asks for an approval of each."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.drafts = 0

    @af.handler
    def on_draft(self, draft: str, ctx: af.Context) -> None:
        self.drafts += 1
        ctx.request(draft, bool)

    @af.response_handler
    def on_verdict(self, draft: str, approved: bool, ctx: af.Context) -> None:
        if approved:
            ctx.output(f"{draft} (draft {self.drafts})")


class Audit(af.Executor):
    """Only in the changed review workflow: its structure differs."""

    @af.handler
    def on_text(self, text: str, ctx: af.Context) -> None:
        ctx.output(text)


class Publish(af.Executor):
    @af.handler
    def on_text(self, text: str, ctx: af.Context) -> None:
        ctx.output(f"published {text}")


def build(changed: bool = False) -> tuple[af.Workflow, af.Workflow]:
    """The review workflow and the publishing workflow that nests it."""
    review_builder = af.WorkflowBuilder("review", start=Reviewer("reviewer"))
    if changed:
        review_builder.add_edge("reviewer", Audit("audit"))
    review = review_builder.build()
    publishing = (
        af.WorkflowBuilder("publishing", start=af.WorkflowExecutor(review, "review"))
        .add_edge("review", Publish("publish"))
        .build()
    )
    return review, publishing


def second_process(db: str) -> None:
    """Resume the outer session, answer the nested request, finish the review."""
    store = af.SQLiteStore(db)
    review, publishing = build()
    with review, publishing, publishing.resume(store, session="post-1") as session:
        [pending] = session.pending_requests
        print(f"[process 2] pending {pending.request_id}: {pending.value!r}")
        result = session.respond({pending.request_id: True})
        print(f"[process 2] {result.outputs}")
    store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "nested.db")
        store = af.SQLiteStore(db)
        review, publishing = build()
        with review, publishing, publishing.session("post-1", store=store) as session:
            first = session.run("first draft")
            [pending] = first.pending_requests
            print(f"[process 1] {pending.request_id} asks about {pending.value!r}: rejected")
            session.respond({pending.request_id: False})
            second = session.run("second draft")
            print(f"[process 1] now waiting on {[p.request_id for p in second.pending_requests]}")
        store.close()

        done = subprocess.run(
            [sys.executable, __file__, "resume", db],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        print(done.stdout.rstrip())
        assert done.returncode == 0, done.stderr
        assert "published second draft (draft 2)" in done.stdout

        store = af.SQLiteStore(db)
        review, publishing = build(changed=True)
        with review, publishing:
            try:
                publishing.resume(store, session="post-1")
            except af.GraphMismatch as exc:
                print(f"[changed review] {exc}")
            else:
                raise AssertionError("a changed sub-workflow must not resume")
        store.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["resume"]:
        second_process(sys.argv[2])
    else:
        main()
