"""Holding a corpus run at a chosen superstep, and calls run in other threads, for the
session tests (``gate``, the fixture that installs a :class:`Gate`, is in conftest).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import actorflow as af
from actorflow.actors import decode_state
from tests.support import graphs

WAIT = 10.0
"""Bound on every wait for another thread."""


@dataclass
class Gate:
    """Holds the first handler that runs in ``superstep`` until released."""

    superstep: int = -1
    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def __call__(self, executor: str, superstep: int) -> None:
        if superstep == self.superstep and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT), "the test never released the gate"

    def wait_entered(self) -> None:
        assert self.entered.wait(WAIT), "the run never reached the gate"


def states_of(store: af.MemoryStore, session: str) -> dict[str, dict[str, Any]]:
    """Executor states in the session's latest checkpoint."""
    latest = store.latest(session=session)
    assert latest is not None
    return {
        eid: decode_state([store.load_blob(d) for d in digests])
        for eid, digests in latest.executors.items()
    }


def uninterrupted(family: str, *params: int) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """Outputs and final states of one uninterrupted run in a fresh session."""
    case = graphs.build(family, *params)
    store = af.MemoryStore()
    with case.workflow as wf, wf.session("ref", store=store) as s:
        outputs = s.run(case.input).outputs
    return outputs, states_of(store, "ref")


def in_thread(target: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``target(*args)`` in a thread; its result or error lands in the returned dict."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = target(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    return thread, box


def joined(thread: threading.Thread, box: dict[str, Any]) -> Any:
    thread.join(timeout=WAIT)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    return box["result"]
