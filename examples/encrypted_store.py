"""Encryption at rest: a session checkpoints into an EncryptedStore over SQLite, keys rotate.

Needs the encryption extra: pip install 'actorflow[encryption]'.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

import actorflow as af
from actorflow.storage import Checkpoint, EncryptedStore, Lease, SQLiteStore, StoreWrapper


class Total(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.total = 0

    @af.handler
    def on_number(self, value: int, ctx: af.Context[None]) -> None:
        self.total += value
        ctx.output(self.total)


class CountingStore(StoreWrapper):
    """A metrics wrapper: overrides one method, every other one is forwarded."""

    def __init__(self, inner: af.CheckpointStore) -> None:
        super().__init__(inner)
        self.saves = 0

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        self.saves += 1
        super().save(checkpoint, blobs, lease=lease)


def main() -> None:
    old_key, new_key = os.urandom(32), os.urandom(32)
    with (
        tempfile.TemporaryDirectory() as folder,
        af.WorkflowBuilder("totals", start=Total("total")).build() as wf,
    ):
        path = os.path.join(folder, "runs.db")
        with CountingStore(EncryptedStore(SQLiteStore(path), keys={"old": old_key})) as store:
            with wf.session("customer-42", store=store) as session:
                print("outputs:", session.run(2).outputs, session.run(3).outputs)
            print("saves seen by the metrics wrapper:", store.saves)
        # Rotation: add a key; old records stay readable, new ones use the new key.
        keys = {"old": old_key, "new": new_key}
        with EncryptedStore(SQLiteStore(path), keys=keys) as store:
            with wf.resume(store, session="customer-42") as session:
                print("resumed:", session.run(5).outputs)
            assert store.verify() == []
        with open(path, "rb") as f:
            assert b"customer" in f.read()  # session ids stay visible; state does not
        with EncryptedStore(SQLiteStore(path), keys={"new": new_key}) as store:
            try:
                store.list()
            except af.CheckpointCorrupt as exc:
                print("without the old key:", str(exc)[:70], "...")


if __name__ == "__main__":
    main()
