"""The executors and messages of torture workflows, and building a workflow from its spec.

A spec is plain JSON (see :mod:`torture.grammar`, which draws one from a seed), so a
child process rebuilds exactly the workflow its parent drew. Every handler is
deterministic: what it sends, outputs and keeps depends only on its state and its
input, never on time or thread, so the fault-free run of a spec is the oracle of
every faulty one. How long a handler takes (computing, sleeping, blocking) is drawn
from a hash of the call, so it varies between executors and supersteps but is the
same in every run.

Importable by every process that resumes a torture checkpoint: the graph signature
names these classes as ``torture.flows.<Class>``.

:data:`HOOK`, when set, is called at the start of every handler with
``(executor_id, superstep)`` on the executor's actor thread (the crash children use it
to kill their process inside a chosen handler). It is not executor state.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import actorflow as af

__all__ = [
    "HOOK",
    "Answer",
    "Asker",
    "Msg",
    "Question",
    "Worker",
    "answer_for",
    "build",
    "close",
]

HOOK: Callable[[str, int], None] | None = None
"""Called at the start of every handler when set (crash children kill themselves in it)."""

_MOD = 1_000_003


@af.message
@dataclass
class Msg:
    """What executors pass on: a value, how many hops it may still travel, and its trail."""

    hops: int
    value: int
    trail: list[str] = field(default_factory=list)


@af.message
@dataclass
class Question:
    """What an :class:`Asker` asks its caller."""

    asker: str
    value: int
    hops: int


@af.message
@dataclass
class Answer:
    """The caller's answer to a :class:`Question`."""

    value: int


def answer_for(question: Question) -> Answer:
    """The one answer every torture driver gives to ``question`` (deterministic)."""
    return Answer((question.value * 7 + len(question.asker)) % 1009)


def _digest(*parts: object) -> int:
    data = "\0".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _work(kind: str, limit_ms: float, *key: object) -> None:
    """Spend a deterministic, call-specific amount of time: compute, sleep or block."""
    if limit_ms <= 0:
        return
    share = (_digest(*key) % 1000) / 1000.0
    seconds = share * limit_ms / 1000.0
    if kind == "compute":
        end = time.perf_counter() + seconds
        h = b"x"
        while time.perf_counter() < end:
            h = hashlib.sha256(h).digest()
    elif kind == "block":
        threading.Event().wait(seconds)
    else:
        time.sleep(seconds)


def _touch(executor_id: str, ctx: af.Context[Any]) -> None:
    hook = HOOK
    if hook is not None:
        hook(executor_id, ctx.superstep)


class Worker(af.Executor):
    """Keeps state of several shapes, transforms each value and passes it on.

    A message with hops left is sent on (``burst`` times, to every out-edge that takes
    it); one with none left, or any message of a ``terminal`` worker, is output. The
    state changes with every message: counters, a growing log (chunked once long), a
    table, a blob of ``blob`` bytes and a small matrix.
    """

    def __init__(
        self,
        id: str,
        *,
        mul: int = 3,
        add: int = 1,
        burst: int = 1,
        terminal: bool = False,
        emit_msg: bool = False,
        blob: int = 0,
        rows: int = 0,
        work: str = "sleep",
        work_ms: float = 0.0,
        tick: int = 0,
        timeout: float | None = None,
    ) -> None:
        super().__init__(id, timeout=timeout)
        self.mul = mul
        self.add = add
        self.burst = burst
        self.terminal = terminal
        self.emit_msg = emit_msg
        self.work = work
        self.work_ms = work_ms
        self.tick = tick
        self.count = 0
        self.acc = 0
        self.log: list[str] = []
        self.table: dict[str, int] = {}
        self.blob = bytes(i % 251 for i in range(blob))
        self.matrix = [[r * 7 + c for c in range(4)] for r in range(rows)]

    @af.handler
    def on_msg(self, msg: Msg, ctx: af.Context[Any]) -> None:
        _touch(self.id, ctx)
        _work(self.work, self.work_ms, self.id, ctx.superstep, msg.value, self.count)
        self._take(msg.value, msg.hops, msg.trail, ctx)

    @af.handler
    def on_batch(self, batch: list[Msg], ctx: af.Context[Any]) -> None:
        _touch(self.id, ctx)
        _work(self.work, self.work_ms, self.id, ctx.superstep, len(batch), self.count)
        value = sum(m.value * (i + 1) for i, m in enumerate(batch)) % _MOD
        hops = min(m.hops for m in batch)
        trail = [step for m in batch for step in m.trail][-6:]
        self._take(value, hops, trail, ctx)

    def _take(self, value: int, hops: int, trail: list[str], ctx: af.Context[Any]) -> None:
        self.count += 1
        self.acc = (self.acc * 31 + value + hops) % _MOD
        self.log.append(f"{ctx.superstep}:{ctx.source}:{value}:{hops}")
        key = ctx.source if len(self.table) < 40 else f"k{value % 40}"
        self.table[key] = self.table.get(key, 0) + value
        if self.blob:
            self.blob = self.blob[1:] + bytes([self.acc % 256])
        if self.matrix:
            row = self.matrix[self.count % len(self.matrix)]
            row[self.acc % 4] = (row[self.acc % 4] + value) % 997
        out = (value * self.mul + self.add + self.count) % _MOD
        if self.tick and not self.emit_msg and self.count % self.tick == 0:
            ctx.output(["tick", self.id, ctx.superstep, self.count, self.acc])
        if self.terminal or hops <= 0:
            if self.emit_msg:
                ctx.output(Msg(max(hops - 1, 0), out, [*trail, self.id][-6:]))
            else:
                ctx.output(["end", self.id, ctx.superstep, out, hops, self.acc])
            return
        for i in range(self.burst):
            ctx.send(Msg(hops - 1, (out + i) % _MOD, [*trail, self.id][-6:]))


class Asker(af.Executor):
    """Asks its caller a question for every message and passes the answer on."""

    def __init__(
        self,
        id: str,
        *,
        terminal: bool = False,
        emit_msg: bool = False,
        timeout: float | None = None,
    ) -> None:
        super().__init__(id, timeout=timeout)
        self.terminal = terminal
        self.emit_msg = emit_msg
        self.asked = 0
        self.answers: list[int] = []

    @af.handler
    def on_msg(self, msg: Msg, ctx: af.Context[Any]) -> None:
        _touch(self.id, ctx)
        self.asked += 1
        ctx.request(Question(self.id, msg.value, msg.hops), Answer)

    @af.response_handler
    def on_answer(self, question: Question, answer: Answer, ctx: af.Context[Any]) -> None:
        _touch(self.id, ctx)
        self.answers.append(answer.value)
        value = (question.value + answer.value * 11) % _MOD
        if self.terminal or question.hops <= 0:
            if self.emit_msg:
                ctx.output(Msg(max(question.hops - 1, 0), value, [self.id]))
            else:
                ctx.output(["answered", self.id, ctx.superstep, value, len(self.answers)])
            return
        ctx.send(Msg(question.hops - 1, value, [self.id]))


# --- predicates (module level and partial: picklable for process backends) ---------


def _mod_is(m: int, r: int, msg: Msg) -> bool:
    return msg.value % m == r


def _select(m: int, msg: Msg, targets: list[str]) -> list[str]:
    """A fan-out selector: the targets whose index is not ``value % m`` (never empty)."""
    skip = msg.value % m
    chosen = [t for i, t in enumerate(targets) if i % m != skip]
    return chosen or targets[:1]


def _predicate(spec: list[int] | None) -> Callable[[Msg], bool] | None:
    if spec is None:
        return None
    m, r = spec
    return functools.partial(_mod_is, m, r)


# --- building -----------------------------------------------------------------------


def _without_work(spec: Mapping[str, Any]) -> dict[str, Any]:
    nodes = []
    for original in spec["nodes"]:
        node = dict(original)
        if node["kind"] == "worker":
            node["options"] = {**node["options"], "work_ms": 0}
        elif node["kind"] == "sub":
            node["flow"] = _without_work(node["flow"])
        nodes.append(node)
    return {**spec, "nodes": nodes}


def _executor(
    node: Mapping[str, Any], timeout: float | None, inners: list[af.Workflow]
) -> af.Executor:
    kind = node["kind"]
    options = dict(node.get("options", {}))
    if kind == "worker":
        return Worker(node["id"], timeout=timeout, **options)
    if kind == "asker":
        return Asker(node["id"], timeout=timeout, **options)
    if kind == "sub":
        inner = build(node["flow"], inners=inners)
        inners.append(inner)
        return af.WorkflowExecutor(
            inner, node["id"], outputs=node.get("outputs", "send"), timeout=timeout
        )
    raise ValueError(f"unknown torture node kind {kind!r}")


def build(
    spec: Mapping[str, Any],
    *,
    restart: af.RestartPolicy | None = None,
    inners: list[af.Workflow] | None = None,
) -> af.Workflow:
    """The workflow ``spec`` describes (see :mod:`torture.grammar` for the shape).

    ``spec["fast"]``: every worker's handler takes no time (its results are the same).
    ``inners`` receives the sub-workflows' inner workflows, which the caller closes
    after the outer one (their actors are theirs, not the outer workflow's).
    """
    if inners is None:
        inners = []
    timeout = spec.get("timeout")
    if spec.get("fast"):
        spec = _without_work(spec)
    nodes = {n["id"]: _executor(n, timeout, inners) for n in spec["nodes"]}
    builder = af.WorkflowBuilder(
        spec["name"], start=nodes[spec["start"]], restart=restart, max_supersteps=10_000
    )
    for node_id, executor in nodes.items():
        if node_id != spec["start"]:
            builder.add_executor(executor)
    for edge in spec["edges"]:
        kind = edge["type"]
        if kind == "edge":
            builder.add_edge(edge["src"], edge["dst"], when=_predicate(edge.get("when")))
        elif kind == "fan_out":
            select = edge.get("select")
            builder.add_fan_out(
                edge["src"],
                edge["dsts"],
                select=functools.partial(_select, select) if select else None,
            )
        elif kind == "fan_in":
            builder.add_fan_in(edge["srcs"], edge["dst"])
        elif kind == "switch":
            cases: list[af.Case | af.Default] = []
            for when, dst in edge["cases"]:
                predicate = _predicate(when)
                assert predicate is not None
                cases.append(af.Case(predicate, dst))
            cases.append(af.Default(edge["default"]))
            builder.add_switch(edge["src"], cases)
        else:
            raise ValueError(f"unknown torture edge type {kind!r}")
    return builder.build()


def close(workflow: af.Workflow, inners: list[af.Workflow]) -> None:
    """Close ``workflow``, then the inner workflows :func:`build` made for it."""
    workflow.close()
    for inner in reversed(inners):
        inner.close()
