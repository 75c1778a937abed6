"""A generated corpus of small deterministic workflow graphs with stateful executors.

Every graph is a function returning ``GraphCase(workflow, input)``; :func:`corpus`
expands the families (chains, fan-out/fan-in, switches, cycles with counters,
repeated fan-in rounds in a cycle) over their parameters. Executors keep private
state (counters, logs, running totals), so a restart that replays a superstep
twice, or restores the wrong state, changes the final states or the outputs.

Importable from a subprocess: ``sys.path.insert(0, "tests"); import graphs``
(the graph signature names executor classes as ``graphs.<Class>``, so every
process that resumes a checkpoint must import this module under that name).

:data:`HOOK`, when set, is called at the start of every handler with
``(executor_id, superstep)`` on the executor's actor thread: crash tests use it
to make a chosen handler signal its parent and block. It is not executor state.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import actorflow as af

__all__ = [
    "CORPUS",
    "FAMILIES",
    "HOOK",
    "GraphCase",
    "build",
    "build_corpus_graph",
    "chain",
    "collatz",
    "corpus",
    "diamond",
    "fan_burst",
    "fan_cycle",
    "fan_in",
    "fan_skew",
    "ring",
    "switch",
]

HOOK: Callable[[str, int], None] | None = None
"""Called at the start of every handler when set (crash tests only)."""


def _touch(executor_id: str, ctx: af.Context[Any]) -> None:
    hook = HOOK
    if hook is not None:
        hook(executor_id, ctx.superstep)


@af.message
@dataclass
class GToken:
    """A token travelling around a cycle."""

    hops: int
    value: int
    trail: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GraphCase:
    """A built workflow and the input of its run."""

    name: str
    workflow: af.Workflow
    input: Any


# --- executors ---------------------------------------------------------------------


class GRelay(af.Executor):
    """Records every number and sends ``n * mul + add`` on."""

    def __init__(
        self, id: str, mul: int = 1, add: int = 0, *, ballast: int = 0, timeout: float | None = None
    ) -> None:
        super().__init__(id, timeout=timeout)
        self.mul = mul
        self.add = add
        self.count = 0
        self.seen: list[int] = []
        self.ballast = [f"{id}-ballast-{i:06d}" for i in range(ballast)]

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        _touch(self.id, ctx)
        self.count += 1
        self.seen.append(n)
        if self.ballast:
            self.ballast.append(f"{self.id}-{ctx.superstep}-{n}")
        ctx.send(n * self.mul + self.add)


class GSink(af.Executor):
    """Keeps a running total of the numbers it gets and outputs each one with it."""

    def __init__(self, id: str, *, timeout: float | None = None) -> None:
        super().__init__(id, timeout=timeout)
        self.total = 0
        self.got: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        _touch(self.id, ctx)
        self.total += n
        self.got.append(n)
        ctx.output([self.id, ctx.superstep, n, self.total])


class GSplit(af.Executor):
    """Forwards each number (to a fan-out, a fan-in or a switch), ``burst`` times (n, n+1, ...)."""

    def __init__(self, id: str, *, burst: int = 1, timeout: float | None = None) -> None:
        super().__init__(id, timeout=timeout)
        self.burst = burst
        self.forwarded = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        _touch(self.id, ctx)
        for i in range(self.burst):
            self.forwarded += 1
            ctx.send(n + i)


class GGather(af.Executor):
    """Fan-in target: sums each round's list, outputs it, and sends the sum on.

    ``limit``: the sum is sent back into the cycle only while below it (edge condition).
    """

    def __init__(self, id: str, *, loop: bool = False, timeout: float | None = None) -> None:
        super().__init__(id, timeout=timeout)
        self.loop = loop
        self.rounds = 0
        self.sums: list[int] = []

    @af.handler
    def on_values(self, values: list[int], ctx: af.Context) -> None:
        _touch(self.id, ctx)
        self.rounds += 1
        total = sum(values)
        self.sums.append(total)
        ctx.output([self.id, ctx.superstep, values, total])
        if self.loop:
            ctx.send(total)


class GLoop(af.Executor):
    """One station of a ring: stamps the token and passes it on until ``limit`` hops."""

    def __init__(
        self, id: str, limit: int, *, ballast: int = 0, timeout: float | None = None
    ) -> None:
        super().__init__(id, timeout=timeout)
        self.limit = limit
        self.visits = 0
        self.acc = 0
        self.log: list[str] = [f"{id}-ballast-{i:06d}" for i in range(ballast)]

    @af.handler
    def on_token(self, token: GToken, ctx: af.Context) -> None:
        _touch(self.id, ctx)
        self.visits += 1
        self.acc = (self.acc * 31 + token.value + token.hops) % 1_000_003
        self.log.append(f"{self.id}@{ctx.superstep}:{token.hops}")
        token.hops += 1
        token.value = (token.value * 7 + self.visits) % 10_007
        token.trail.append(self.id)
        if token.hops % 4 == 0:
            ctx.output([self.id, ctx.superstep, token.hops, token.value])
        if token.hops < self.limit:
            ctx.send(token)
        else:
            ctx.output(["done", self.id, token.hops, token.value, len(token.trail)])

    @af.handler
    def on_start(self, n: int, ctx: af.Context) -> None:
        _touch(self.id, ctx)
        self.visits += 1
        ctx.send(GToken(hops=1, value=n, trail=[self.id]))


class GCollatz(af.Executor):
    """Switch hub of a cycle: outputs each value, sends it on until it reaches 1."""

    def __init__(self, id: str, *, timeout: float | None = None) -> None:
        super().__init__(id, timeout=timeout)
        self.steps = 0
        self.peak = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        _touch(self.id, ctx)
        self.steps += 1
        self.peak = max(self.peak, n)
        ctx.output([self.id, ctx.superstep, n])
        if n != 1:
            ctx.send(n)


class GHalve(af.Executor):
    """n // 2, counting its calls."""

    def __init__(self, id: str, *, timeout: float | None = None) -> None:
        super().__init__(id, timeout=timeout)
        self.calls = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        _touch(self.id, ctx)
        self.calls += 1
        ctx.send(n // 2)


class GTriple(af.Executor):
    """3n + 1, counting its calls."""

    def __init__(self, id: str, *, timeout: float | None = None) -> None:
        super().__init__(id, timeout=timeout)
        self.calls = 0

    @af.handler
    def on_num(self, n: int, ctx: af.Context) -> None:
        _touch(self.id, ctx)
        self.calls += 1
        ctx.send(3 * n + 1)


# --- graph families ----------------------------------------------------------------

Restart = af.RestartPolicy | None


def chain(
    length: int, *, restart: Restart = None, timeout: float | None = None, ballast: int = 0
) -> GraphCase:
    """``a0 -> a1 -> ... -> sink``; each relay transforms and remembers."""
    relays = [
        GRelay(f"a{i}", mul=i + 2, add=i, ballast=ballast, timeout=timeout) for i in range(length)
    ]
    builder = af.WorkflowBuilder(f"chain{length}", start=relays[0], restart=restart)
    for prev, nxt in itertools.pairwise(relays):
        builder.add_edge(prev, nxt)
    builder.add_edge(relays[-1], GSink("sink", timeout=timeout))
    return GraphCase(f"chain{length}", builder.build(), 3)


def fan_in(width: int, *, restart: Restart = None, timeout: float | None = None) -> GraphCase:
    """``src`` fans out to ``width`` workers; their results fan in to ``gather``."""
    workers = [GRelay(f"w{i}", mul=i + 1, add=i, timeout=timeout) for i in range(width)]
    builder = af.WorkflowBuilder(
        f"fan{width}", start=GSplit("src", timeout=timeout), restart=restart
    )
    builder.add_fan_out("src", workers)
    builder.add_fan_in([w.id for w in workers], GGather("gather", timeout=timeout))
    return GraphCase(f"fan{width}", builder.build(), 5)


def fan_cycle(
    width: int, bound: int, *, restart: Restart = None, timeout: float | None = None
) -> GraphCase:
    """Fan-out/fan-in rounds in a cycle: the gathered sum goes back to ``src`` while < bound."""
    workers = [GRelay(f"w{i}", mul=1, add=i + 1, timeout=timeout) for i in range(width)]
    gather = GGather("gather", loop=True, timeout=timeout)
    name = f"fancycle{width}"
    builder = af.WorkflowBuilder(name, start=GSplit("src", timeout=timeout), restart=restart)
    builder.add_fan_out("src", workers)
    builder.add_fan_in([w.id for w in workers], gather)
    builder.add_edge("gather", "src", when=functools.partial(_below, bound))
    return GraphCase(name, builder.build(), 1)


def _below(bound: int, value: int) -> bool:
    return value < bound


def fan_burst(
    width: int, burst: int, *, restart: Restart = None, timeout: float | None = None
) -> GraphCase:
    """Like :func:`fan_in`, but ``src`` sends ``burst`` numbers: fan-in buffers hold a
    backlog that drains one round per barrier (buffered state in every checkpoint)."""
    workers = [GRelay(f"w{i}", mul=i + 2, add=1, timeout=timeout) for i in range(width)]
    name = f"burst{width}x{burst}"
    builder = af.WorkflowBuilder(
        name, start=GSplit("src", burst=burst, timeout=timeout), restart=restart
    )
    builder.add_fan_out("src", workers)
    builder.add_fan_in([w.id for w in workers], GGather("gather", timeout=timeout))
    return GraphCase(name, builder.build(), 2)


def fan_skew(depth: int, *, restart: Restart = None, timeout: float | None = None) -> GraphCase:
    """Fan-in over paths of different lengths: ``a``'s value waits half-filled in the
    fan-in buffer for ``depth`` barriers until the ``b`` path delivers."""
    builder = af.WorkflowBuilder(
        f"skew{depth}", start=GSplit("src", timeout=timeout), restart=restart
    )
    builder.add_fan_out(
        "src", [GRelay("a", mul=10, timeout=timeout), GRelay("b0", add=1, timeout=timeout)]
    )
    for i in range(1, depth + 1):
        builder.add_edge(f"b{i - 1}", GRelay(f"b{i}", add=i + 1, timeout=timeout))
    builder.add_fan_in(["a", f"b{depth}"], GGather("gather", timeout=timeout))
    return GraphCase(f"skew{depth}", builder.build(), 6)


def diamond(*, restart: Restart = None, timeout: float | None = None) -> GraphCase:
    """``top`` fans out to three relays; ``bottom`` gets two deliveries in one superstep
    (ordered by source id) and one a superstep later."""
    builder = af.WorkflowBuilder("diamond", start=GSplit("top", timeout=timeout), restart=restart)
    builder.add_fan_out(
        "top",
        [
            GRelay("left", mul=2, timeout=timeout),
            GRelay("right", mul=3, add=1, timeout=timeout),
            GRelay("far", mul=5, timeout=timeout),
        ],
    )
    builder.add_edge("far", GRelay("mid", mul=1, add=5, timeout=timeout))
    builder.add_edge("left", GSink("bottom", timeout=timeout))
    builder.add_edge("right", "bottom")
    builder.add_edge("mid", "bottom")
    return GraphCase("diamond", builder.build(), 4)


def switch(value: int, *, restart: Restart = None, timeout: float | None = None) -> GraphCase:
    """``route`` switches on sign/parity to three branches of different lengths."""
    builder = af.WorkflowBuilder(
        f"switch{value}", start=GSplit("route", timeout=timeout), restart=restart
    )
    builder.add_switch(
        "route",
        [
            af.Case(_negative, GSink("neg", timeout=timeout)),
            af.Case(_even, GRelay("even", mul=3, timeout=timeout)),
            af.Default(GRelay("odd", mul=5, add=1, timeout=timeout)),
        ],
    )
    builder.add_edge("even", GRelay("even2", mul=1, add=7, timeout=timeout))
    builder.add_edge("even2", GSink("out", timeout=timeout))
    builder.add_edge("odd", "out")
    return GraphCase(f"switch{value}", builder.build(), value)


def _negative(n: int) -> bool:
    return n < 0


def _even(n: int) -> bool:
    return n % 2 == 0


def ring(
    size: int,
    laps: int,
    *,
    restart: Restart = None,
    timeout: float | None = None,
    ballast: int = 0,
) -> GraphCase:
    """A ring of ``size`` stations passing one token for ``laps`` laps (W3-like)."""
    limit = size * laps
    stations = [GLoop(f"r{i}", limit, ballast=ballast, timeout=timeout) for i in range(size)]
    name = f"ring{size}x{laps}"
    builder = af.WorkflowBuilder(name, start=stations[0], restart=restart, max_supersteps=100_000)
    for i, station in enumerate(stations):
        builder.add_edge(station, stations[(i + 1) % size])
    return GraphCase(name, builder.build(), 11)


def collatz(start: int, *, restart: Restart = None, timeout: float | None = None) -> GraphCase:
    """A switch inside a cycle: ``hub`` -> halve (even) / triple (odd) -> ``hub`` until 1."""
    builder = af.WorkflowBuilder(
        f"collatz{start}", start=GCollatz("hub", timeout=timeout), restart=restart
    )
    builder.add_switch(
        "hub",
        [
            af.Case(_even, GHalve("halve", timeout=timeout)),
            af.Default(GTriple("triple", timeout=timeout)),
        ],
    )
    builder.add_edge("halve", "hub")
    builder.add_edge("triple", "hub")
    return GraphCase(f"collatz{start}", builder.build(), start)


FAMILIES: dict[str, Callable[..., GraphCase]] = {
    "chain": chain,
    "collatz": collatz,
    "diamond": diamond,
    "fan_burst": fan_burst,
    "fan_cycle": fan_cycle,
    "fan_in": fan_in,
    "fan_skew": fan_skew,
    "ring": ring,
    "switch": switch,
}
"""Graph families by name; ``build(family, *params, restart=..., timeout=...)``."""

CORPUS: dict[str, tuple[str, tuple[int, ...]]] = {
    "chain1": ("chain", (1,)),
    "chain3": ("chain", (3,)),
    "chain5": ("chain", (5,)),
    "chain8": ("chain", (8,)),
    "fan2": ("fan_in", (2,)),
    "fan4": ("fan_in", (4,)),
    "burst2x3": ("fan_burst", (2, 3)),
    "burst3x2": ("fan_burst", (3, 2)),
    "skew1": ("fan_skew", (1,)),
    "skew3": ("fan_skew", (3,)),
    "fancycle2": ("fan_cycle", (2, 40)),
    "fancycle3": ("fan_cycle", (3, 200)),
    "diamond": ("diamond", ()),
    "switch-3": ("switch", (-3,)),
    "switch4": ("switch", (4,)),
    "switch7": ("switch", (7,)),
    "ring2x3": ("ring", (2, 3)),
    "ring3x2": ("ring", (3, 2)),
    "ring4x3": ("ring", (4, 3)),
    "collatz6": ("collatz", (6,)),
    "collatz7": ("collatz", (7,)),
}
"""The corpus: graph name -> (family, parameters)."""


def corpus() -> list[str]:
    """Names of every graph in the corpus, in a stable order."""
    return list(CORPUS)


def build(family: str, *params: int, **options: Any) -> GraphCase:
    """Build a graph of ``family`` with ``params`` (``restart=``, ``timeout=`` ... passed on)."""
    return FAMILIES[family](*params, **options)


def build_corpus_graph(name: str, **options: Any) -> GraphCase:
    """Build the corpus graph ``name`` (``restart=``, ``timeout=`` passed on)."""
    family, params = CORPUS[name]
    return build(family, *params, **options)
