"""Shared benchmark helpers: options, timing, payloads, floors, peak RSS, JSON records.

Every benchmark prints one JSON object per figure on stdout (see :func:`report`),
with the floor it is compared against, measured in the same process run just
before the workload. Nothing here asserts a timing: ``pass`` is information.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgpack
import pykka
import structlog

__all__ = [
    "AskFloor",
    "Echo",
    "GatherFloor",
    "Options",
    "SleepEcho",
    "TellFloor",
    "alternate",
    "alternate_all",
    "bytes_under",
    "codec_roundtrip",
    "cpus",
    "make_items",
    "median",
    "parse_options",
    "peak_rss_mb",
    "quiet_logs",
    "report",
    "rss_mb",
    "time_call",
]

_FILLER = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua"
)


def make_items(count: int, start: int = 0) -> list[dict[str, Any]]:
    """``count`` dicts ``{"id": i, "text": <80 chars>}``; 10,000 of them are ~1 MB of msgpack."""
    return [{"id": i, "text": f"item-{i:08d} {_FILLER}"[:80]} for i in range(start, start + count)]


# --- options and process setup -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    """Command-line options shared by every benchmark."""

    quick: bool
    """Smoke mode: fewer repetitions, same workload shapes (figures are noisier)."""


def parse_options(description: str, argv: Sequence[str] | None = None) -> Options:
    """Parse ``--quick`` and ``--pin``, and quiet the library's logs (they would mix with the JSON).

    ``--pin 0`` (or ``0,1``) restricts this process, and so every thread it starts
    later, to those CPUs. On a small VM, thread handoffs between cores vary a lot
    from one moment to the next; pinning to one CPU trades that noise for
    same-core context switches, for both the floor and the workload alike.
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fast smoke mode (fewer repetitions)")
    parser.add_argument("--pin", metavar="CPUS", help="run on these CPUs only, e.g. 0 or 0,1")
    args = parser.parse_args(argv)
    if args.pin:
        os.sched_setaffinity(0, {int(cpu) for cpu in args.pin.split(",")})
    quiet_logs()
    return Options(quick=bool(args.quick))


def cpus() -> list[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0))


def quiet_logs() -> None:
    """Send actorflow's structlog output to stderr, errors only.

    The library never configures logging; a benchmark is an application, so it
    does, keeping stdout pure JSON lines (expected warnings such as "run failed"
    on ``SuperstepLimitExceeded`` would otherwise land there).
    """
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


# --- measuring -----------------------------------------------------------------------


def median(samples: Sequence[float]) -> float:
    """Median of ``samples`` (which must not be empty)."""
    return float(statistics.median(samples))


def time_call(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes (after a ``gc.collect()``, outside the timing)."""
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def rss_mb() -> float:
    """Current resident set size of this process, MB (VmRSS)."""
    return _proc_status_mb("VmRSS:") or peak_rss_mb()


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MB (VmHWM, else ``ru_maxrss``)."""
    found = _proc_status_mb("VmHWM:")
    if found:
        return found
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _proc_status_mb(field: str) -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return 0.0


def bytes_under(path: str) -> int:
    """Total size of the files under ``path`` (SQLite ``-wal``/``-shm`` included)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass  # removed while walking (a temp file): not on disk any more
    return total


# --- floors --------------------------------------------------------------------------


def _roundtrip(payload: bytes) -> bytes:
    data: bytes = msgpack.packb(msgpack.unpackb(payload), use_bin_type=True)
    return data


class Echo(pykka.ThreadingActor):
    """The floor's bare actor: decodes the msgpack payload it is asked with and re-encodes it."""

    def on_receive(self, message: Any) -> Any:
        return _roundtrip(message)


class SleepEcho(pykka.ThreadingActor):
    """Like :class:`Echo`, blocking ``delay`` seconds first (the W2-io floor's worker)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def on_receive(self, message: Any) -> Any:
        time.sleep(self.delay)
        return _roundtrip(message)


_SMALL: bytes = msgpack.packb([1, -1, {"n": 123}], use_bin_type=True)
"""A small frame, the size of what W1 exchanges per superstep."""


class AskFloor:
    """Serial asks to one bare :class:`Echo` actor; :meth:`sample` returns asks/s."""

    def __init__(self, asks: int = 2001) -> None:
        self.asks = asks
        self._ref: Any = None

    def __enter__(self) -> AskFloor:
        self._ref = Echo.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ref.stop()

    def sample(self) -> float:
        """Asks/s over ``asks`` asks in a row (each waits for its answer)."""
        ref = self._ref

        def one() -> None:
            for _ in range(self.asks):
                ref.ask(_SMALL)

        return self.asks / time_call(one)


class Relay(pykka.ThreadingActor):
    """A bare actor of the tell floor: decodes the payload, re-encodes it, and tells the
    next actor of the ring, until the hop budget is spent (then it sets ``finished``)."""

    def __init__(self, finished: threading.Event) -> None:
        super().__init__()
        self.finished = finished
        self.next: Any = None

    def on_receive(self, message: Any) -> None:
        if type(message) is not tuple:  # the next actor of the ring, set once
            self.next = message
            return
        left, payload = message
        payload = _roundtrip(payload)
        if left <= 0:
            self.finished.set()
        else:
            self.next.tell((left - 1, payload))


class TellFloor:
    """Two bare actors passing a msgpack payload on with ``tell``: one hand-off per hop,
    the limit for one thread per actor. :meth:`sample` returns hops/s."""

    def __init__(self, hops: int = 2001) -> None:
        self.hops = hops
        self._refs: list[Any] = []
        self._finished = threading.Event()

    def __enter__(self) -> TellFloor:
        self._refs = [Relay.start(self._finished), Relay.start(self._finished)]
        a, b = self._refs
        a.tell(b)
        b.tell(a)
        return self

    def __exit__(self, *exc: object) -> None:
        for ref in self._refs:
            ref.stop()

    def sample(self) -> float:
        """Hops/s over ``hops`` hops around the ring."""
        return self.hops / time_call(self._round)

    def sample_for(self, seconds: float) -> float:
        """Hops/s over rounds of ``hops`` hops run back to back for at least ``seconds``.

        The floor kept busy as long as a workload's sample lasts: on a small VM the
        kernel places two threads that hand work back and forth by how busy they have
        been lately (see bench/README.md, "W1: the floor's two regimes"), so a floor
        sampled for a shorter time than the workload is measured in another regime.
        """
        gc.collect()
        started = time.perf_counter()
        rounds = 0
        while True:
            self._round()
            rounds += 1
            elapsed = time.perf_counter() - started
            if elapsed >= seconds:
                return rounds * self.hops / elapsed

    def _round(self) -> None:
        self._finished.clear()
        self._refs[0].tell((self.hops - 1, _SMALL))
        if not self._finished.wait(60):
            raise TimeoutError("the tell floor's ring stalled")


class GatherFloor:
    """``width`` bare actors asked at once, then every answer got: one "run"."""

    def __init__(self, width: int = 8, delay: float = 0.0) -> None:
        self.width = width
        self.delay = delay
        self._refs: list[Any] = []

    def __enter__(self) -> GatherFloor:
        if self.delay:
            self._refs = [SleepEcho.start(self.delay) for _ in range(self.width)]
        else:
            self._refs = [Echo.start() for _ in range(self.width)]
        return self

    def __exit__(self, *exc: object) -> None:
        for ref in self._refs:
            ref.stop()

    def run_once(self) -> None:
        """One gathered round of asks."""
        pykka.get_all([r.ask(_SMALL, block=False) for r in self._refs])

    def rate(self, runs: int) -> float:
        """Runs/s over ``runs`` rounds."""

        def batch() -> None:
            for _ in range(runs):
                self.run_once()

        return runs / time_call(batch)

    def latency(self) -> float:
        """Seconds of one round."""
        return time_call(self.run_once)


def alternate(
    floor: Callable[[], float],
    work: Callable[[], float],
    repeats: int,
    warmup: int = 2,
    warmup_s: float = 0.3,
) -> tuple[list[float], list[float]]:
    """Sample the floor and the workload in turn, ``repeats`` times each.

    First both are warmed up: at least ``warmup`` rounds and at least ``warmup_s``
    seconds (first samples in a fresh process are often slow: allocator arenas,
    CPU frequency, idle vCPUs). Alternating then keeps slow drifts of the machine
    (a neighbour's load, cores waking from idle) out of the ratio: both sides see
    the same conditions.
    """
    floors, works = alternate_all([floor, work], repeats, warmup, warmup_s)
    return floors, works


def alternate_all(
    samplers: Sequence[Callable[[], float]],
    repeats: int,
    warmup: int = 2,
    warmup_s: float = 0.3,
) -> list[list[float]]:
    """:func:`alternate` for any number of sides: each round samples every one in order.

    Returns one list of ``repeats`` samples per sampler, in the order given (the
    floor first, by convention).
    """
    started = time.perf_counter()
    rounds = 0
    while rounds < warmup or time.perf_counter() - started < warmup_s:
        for sampler in samplers:
            sampler()
        rounds += 1
    samples: list[list[float]] = [[] for _ in samplers]
    for _ in range(repeats):
        for taken, sampler in zip(samples, samplers, strict=True):
            taken.append(sampler())
    return samples


def codec_roundtrip(value: object) -> float:
    """Seconds of one ``msgpack.packb`` + ``msgpack.unpackb`` of ``value`` (the codec floor)."""

    def one() -> None:
        msgpack.unpackb(msgpack.packb(value, use_bin_type=True))

    return time_call(one)


# --- records -------------------------------------------------------------------------

Op = Literal[">=", "<="]


def report(
    bench: str,
    metric: str,
    value: float,
    unit: str,
    *,
    floor: float | None,
    floor_unit: str,
    floor_name: str,
    target_op: Op,
    target_value: float,
    target_on: Literal["ratio_vs_floor", "value"] = "ratio_vs_floor",
    samples: Sequence[float] = (),
    quick: bool = False,
    peak_rss: float | None = None,
    **details: Any,
) -> dict[str, Any]:
    """Print one figure as a JSON line on stdout and return it.

    ``ratio_vs_floor`` is always ``value / floor`` (so for a rate higher is better
    and for a latency lower is better). The target applies to ``target_on``.
    ``peak_rss_mb`` is the process's peak so far, or ``peak_rss`` when given (a
    peak read before the floor ran).
    """
    ratio = value / floor if floor else None
    subject = ratio if target_on == "ratio_vs_floor" else value
    if subject is None or math.isnan(subject):
        passed: bool | None = None
    elif target_op == ">=":
        passed = subject >= target_value
    else:
        passed = subject <= target_value
    what = "x floor" if target_on == "ratio_vs_floor" else f" {unit}"
    record: dict[str, Any] = {
        "bench": bench,
        "metric": metric,
        "value": _round(value),
        "unit": unit,
        "floor": _round(floor) if floor is not None else None,
        "floor_unit": floor_unit,
        "floor_name": floor_name,
        "ratio_vs_floor": _round(ratio) if ratio is not None else None,
        "target": f"{target_op} {target_value:g}{what}",
        "target_on": target_on,
        "target_op": target_op,
        "target_value": target_value,
        "pass": passed,
        "samples": [_round(s) for s in samples],
        "peak_rss_mb": round(peak_rss if peak_rss is not None else peak_rss_mb(), 1),
        "quick": quick,
        "cpus": cpus(),
        "details": {k: _tidy(v) for k, v in details.items()},
    }
    print(json.dumps(record), flush=True)
    return record


def _tidy(value: Any) -> Any:
    """Round floats, also inside lists, for short JSON."""
    if isinstance(value, float):
        return _round(value)
    if isinstance(value, list | tuple):
        return [_tidy(v) for v in value]
    return value


def _round(value: float) -> float:
    """Four significant digits: enough for benchmark figures, short JSON."""
    if value == 0 or math.isnan(value) or math.isinf(value):
        return value
    return round(value, max(0, 3 - math.floor(math.log10(abs(value)))))
