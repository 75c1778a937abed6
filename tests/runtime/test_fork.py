"""A process forked from one that used a workflow (``multiprocessing``'s fork start
method, a pre-forking server) neither hangs on its parent's actors nor touches its
parent's sessions: only the forking thread exists in the child.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import actorflow as af
from actorflow.actors._reply import ReplyFuture
from actorflow.actors.codec import _registry as codec_registry
from actorflow.runtime._pace import PACE
from actorflow.storage import _format as storage_format
from tests.support.forks import in_child

BOUND = 20.0
"""Seconds the script of a test may take."""


class AddOne(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        ctx.send(n + 1)


class Show(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)


@pytest.fixture
def wf() -> Iterator[af.Workflow]:
    with (
        af.WorkflowBuilder("forked", start=AddOne("add")).add_edge("add", Show("show")).build()
    ) as built:
        yield built


def test_a_workflow_used_before_the_fork_runs_in_the_child(wf: af.Workflow) -> None:
    """The warm actors a workflow keeps are its parent's: the child starts its own."""
    assert wf.run(1).outputs == [2]
    with wf.session() as open_in_parent:
        assert open_in_parent.run(5).outputs == [6]

        def child() -> None:
            assert wf.run(2).outputs == [3]
            with wf.session() as s:
                assert s.run(3).outputs == [4]
            wf.close()

        assert in_child(child) == 0
        assert open_in_parent.run(7).outputs == [8]
    assert wf.run(4).outputs == [5]


def test_locks_the_parent_held_at_the_fork_do_not_stop_the_child(wf: af.Workflow) -> None:
    """The process-wide locks a run takes (a supervisor's slot, the futures' lock, the
    checkpoint ids' clock, the codec's registry), held by a parent thread at the fork,
    are not held by anyone in the child."""
    assert wf.run(1).outputs == [2]
    with (
        PACE.run(threading.Event()),
        ReplyFuture._callbacks_lock,
        storage_format._id_lock,
        codec_registry._lock,
    ):

        def child() -> None:
            with wf.session("s", store=af.MemoryStore()) as s:  # checkpoint ids are made
                assert s.run(2).outputs == [3]

            @af.message
            @dataclass
            class Registered:
                n: int

        assert in_child(child) == 0


def test_a_session_of_the_parent_is_closed_in_the_child(wf: af.Workflow, tmp_path: Path) -> None:
    """The parent's session says it belongs to the parent; closing or dropping it in the
    child neither waits on the parent's actors nor releases the parent's lease."""
    store = af.SQLiteStore(tmp_path / "s.db")
    closed_before = wf.session()
    closed_before.close()
    with wf.session("s", store=store) as s:
        assert s.run(1).outputs == [2]

        def child() -> None:
            nonlocal s
            with pytest.raises(af.SessionClosed, match="forked"):
                s.run(2)
            with pytest.raises(af.SessionClosed, match="is closed; open a new one"):
                closed_before.run(2)  # closed before the fork: just closed
            assert [type(e) for e in s.follow(0, forever=True)][-1] is af.RunCompletedEvent
            s.close()
            del s
            gc.collect()  # a dropped session's lease is released by its finalizer: not here

        assert in_child(child) == 0
        with pytest.raises(af.SessionOwned):
            wf.session("s", store=store, if_exists="resume")
        assert s.run(3).outputs == [4]  # the parent's session, lease and actors are intact
    store.close()


CHILD_EXITS_NORMALLY = """
import os, sys
import actorflow as af

class Show(af.Executor):
    @af.handler
    def on_num(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output(n)

wf = af.WorkflowBuilder("exits", start=Show("show")).build()
store = af.SQLiteStore(sys.argv[1])
session = wf.session("s", store=store)
assert session.run(1).outputs == [1]
pid = os.fork()
if pid == 0:
    sys.exit(0)  # the interpreter's exit: atexit hooks, finalizers of live objects
os.waitpid(pid, 0)
try:
    wf.session("s", store=store, if_exists="resume")
except af.SessionOwned:
    print("owned by the parent")
else:
    print("released by the child")
"""


def test_a_child_exiting_normally_leaves_the_parents_lease(tmp_path: Path) -> None:
    """A child that exits through the interpreter (its exit hooks finalize the sessions
    it inherited) does not release the leases of its parent's open sessions."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD_EXITS_NORMALLY, str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "owned by the parent"
