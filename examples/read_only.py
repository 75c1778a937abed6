"""Reading a store without ever creating one: ``create=False``.

A tool that only reads checkpoints (a report, a dashboard) opens the store with
``create=False``: a mistyped path is ``StoreNotFound``, not a new empty store.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import actorflow as af


class Count(af.Executor):
    @af.handler
    def on_int(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n + 1)


def main() -> None:
    with tempfile.TemporaryDirectory() as where:
        show(Path(where))


def show(folder: Path) -> None:
    with af.WorkflowBuilder("count", start=Count("count")).build() as wf:
        for store in (af.SQLiteStore(folder / "runs.db"), af.FileStore(folder / "runs")):
            with store, wf.session("s", store=store) as session:
                session.run(1)
    # The reader: what exists opens, what does not is an error, and nothing is made.
    with af.SQLiteStore(folder / "runs.db", create=False) as store:
        print("runs.db:", len(store.list()), "checkpoints")
    with af.FileStore(folder / "runs", create=False) as store:
        print("runs/:", len(store.list()), "checkpoints")
    for typo in (
        lambda: af.SQLiteStore(folder / "run.db", create=False),
        lambda: af.FileStore(folder / "run", create=False),
    ):
        try:
            typo()
        except af.StoreNotFound as exc:
            print("refused:", exc)
    made = sorted(p.name for p in folder.iterdir())
    print("files:", made)
    assert "run.db" not in made and "run" not in made


if __name__ == "__main__":
    main()
