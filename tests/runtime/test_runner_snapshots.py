"""The runner's snapshot reports send each chunk once: never one the supervisor holds."""

from __future__ import annotations

from typing import Any

import pytest

import actorflow as af
from actorflow.actors import HostLoop, encode, encode_state
from actorflow.runtime._runner import ExecutorRunner
from actorflow.runtime._wire import SINGLE, StepReport, StepRequest, pack, restore_digests
from actorflow.storage import blob_digest


class Keeper(af.Executor):
    """Holds a list big enough for several chunks; appends only when told to."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.items = [{"id": i, "text": "x" * 80} for i in range(1000)]

    @af.handler
    def on_num(self, n: int, ctx: af.Context[Any]) -> None:
        if n:
            self.items.append({"id": n, "text": "new"})
        ctx.output(len(self.items))


def _runner() -> tuple[ExecutorRunner, Any]:
    wf = af.WorkflowBuilder("keeper", start=Keeper("k")).build()
    program = wf._spec.programs["k"]
    wf.close()
    runner = program()
    runner.start(HostLoop())
    return runner, program


def _step(runner: ExecutorRunner, n: int) -> list[list[Any]]:
    request = StepRequest(1, [["__input__", SINGLE, encode(n)]], True, "", None)
    snapshot = StepReport.unpacked(runner.call("step", request.packed())).snapshot
    assert snapshot is not None
    return snapshot


@pytest.mark.timeout(30)
def test_a_blueprint_instance_reports_no_chunk_the_blueprint_already_has() -> None:
    runner, program = _runner()
    unchanged = _step(runner, 0)
    assert [d for d, _ in unchanged] == list(program.blueprint_digests)
    assert all(chunk is None for _, chunk in unchanged)  # the supervisor holds them all
    grown = _step(runner, 7)
    sent = [(d, c) for d, c in grown if c is not None]
    # An append changes the list's manifest and its last chunk, nothing else.
    assert 0 < len(sent) <= 2 < len(grown)
    assert all(blob_digest(chunk) == digest for digest, chunk in sent)


@pytest.mark.timeout(30)
def test_a_restored_instance_reports_no_chunk_it_was_restored_from() -> None:
    runner, _program = _runner()
    state = Keeper("k").snapshot()
    state["items"] = state["items"][:600]
    chunks = encode_state(state)
    digests = [blob_digest(c) for c in chunks]
    assert runner.call("restore", pack([restore_digests(digests), *chunks])) == b""
    snapshot = _step(runner, 0)
    assert [d for d, _ in snapshot] == digests
    assert all(chunk is None for _, chunk in snapshot)
    runner.stop()
