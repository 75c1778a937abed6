"""Child process of ``test_store_sharing``: sessions share one store handle, closed under them.

Run as ``python -m tests.support.store_close_child CONFIG_JSON``. ``sessions`` sessions (threads or
asyncio tasks, ``mode``) each open ``s<i>`` on ONE store object and run it ``runs``
times; once ``close_after`` runs have finished in all, another thread calls
``store.close()``. Prints one JSON line: how every call ended (a crash of the
process prints nothing, and the parent sees its exit status).

Config: ``store`` (memory, file, sqlite, postgres), ``path`` or ``dsn`` and
``schema``, ``mode``, ``sessions``, ``runs``, ``close_after``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections import Counter
from typing import Any

import actorflow as af

WAIT = 40.0
"""Bound on every wait in the child (under the parent's own bound)."""


class Step(af.Executor):
    """Counts what it handled (state to checkpoint) and passes the number on."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.count = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.count += 1
        ctx.send(n + 1)


class Last(af.Executor):
    """Outputs what it gets."""

    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)


def build() -> af.Workflow:
    """a -> b -> out: three supersteps per run, a checkpoint at each."""
    return (
        af.WorkflowBuilder("shared", start=Step("a"))
        .add_edge("a", Step("b"))
        .add_edge("b", Last("out"))
        .build()
    )


def open_store(config: dict[str, Any]) -> af.CheckpointStore:
    kind = config["store"]
    if kind == "memory":
        return af.MemoryStore()
    if kind == "file":
        return af.FileStore(config["path"])
    if kind == "sqlite":
        return af.SQLiteStore(config["path"])
    return af.PostgresStore(config["dsn"], schema=config["schema"])


def describe(exc: BaseException) -> str:
    """The error and the chain of its causes, by class: ``CheckpointWriteFailed<-StoreClosed``."""
    names: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(names) < 6:
        names.append(type(seen).__name__)
        seen = seen.__cause__
    return "<-".join(names)


def says_closed(exc: BaseException) -> bool:
    """Whether ``exc`` is actorflow's store-closed error, or an actorflow error caused by it.

    Only actorflow errors count on the way down: a raw error of the medium
    (sqlite3, OSError, psycopg) raised to the caller is a failure even if it
    chains something else.
    """
    seen: BaseException | None = exc
    while isinstance(seen, af.ActorflowError):
        if isinstance(seen, af.StoreClosed):
            return True
        seen = seen.__cause__
    return False


class Tally:
    """How every call of every session ended, and when enough runs finished to close."""

    def __init__(self, close_after: int) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.bad: list[str] = []
        self._close_after = close_after
        self._ok = 0
        self.ready = threading.Event()

    def ok(self, what: str) -> None:
        with self._lock:
            self.calls[f"{what}: ok"] += 1
            if what == "run":
                self._ok += 1
                if self._ok >= self._close_after:
                    self.ready.set()

    def failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self.calls[f"{what}: {describe(exc)}"] += 1
            if not says_closed(exc):
                self.bad.append(f"{what}: {describe(exc)}: {exc}")
            self.ready.set()  # a failure before the close: no point in waiting for more runs


def in_threads(
    wf: af.Workflow, store: af.CheckpointStore, config: dict[str, Any], t: Tally
) -> None:
    def session(i: int) -> None:
        try:
            with wf.session(f"s{i}", store=store) as s:
                for _ in range(config["runs"]):
                    try:
                        result = s.run(5)
                    except Exception as exc:
                        t.failed("run", exc)
                        continue
                    if result.outputs != [7]:
                        t.bad.append(f"run: outputs {result.outputs}")
                    t.ok("run")
        except Exception as exc:
            t.failed("session", exc)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(config["sessions"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    hung = [thread.name for thread in threads if thread.is_alive()]
    if hung:
        t.bad.append(f"sessions still running after {WAIT} s: {hung}")


async def in_tasks(
    wf: af.Workflow, store: af.CheckpointStore, config: dict[str, Any], t: Tally
) -> None:
    async def session(i: int) -> None:
        try:
            async with wf.session(f"s{i}", store=store) as s:
                for _ in range(config["runs"]):
                    try:
                        result = await s.arun(5)
                    except Exception as exc:
                        t.failed("run", exc)
                        continue
                    if result.outputs != [7]:
                        t.bad.append(f"run: outputs {result.outputs}")
                    t.ok("run")
        except Exception as exc:
            t.failed("session", exc)

    tasks = [session(i) for i in range(config["sessions"])]
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    except TimeoutError:
        t.bad.append(f"sessions still running after {WAIT} s")


def main() -> None:
    config = json.loads(sys.argv[1])
    store = open_store(config)
    tally = Tally(config["close_after"])
    closed: dict[str, Any] = {}

    def closer() -> None:
        if not tally.ready.wait(WAIT):
            closed["error"] = "the sessions never got going"
            return
        started = time.monotonic()
        try:
            store.close()
        except Exception as exc:
            closed["error"] = f"close() raised {describe(exc)}: {exc}"
        closed["seconds"] = time.monotonic() - started

    closing = threading.Thread(target=closer, name="closer")
    closing.start()
    with build() as wf:
        if config["mode"] == "threads":
            in_threads(wf, store, config, tally)
        else:
            asyncio.run(in_tasks(wf, store, config, tally))
    closing.join(WAIT)
    if closing.is_alive():
        closed["error"] = f"close() still running after {WAIT} s"
    store.close()
    print(json.dumps({"calls": dict(tally.calls), "bad": tally.bad, "close": closed}), flush=True)


if __name__ == "__main__":
    main()
