"""The soak's bookkeeping: a tally per session of what its runs produced, and a sampler
of the process's threads and RSS over the run (see ``bench.soak``).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import actorflow as af
from bench._common import rss_mb

SAMPLE_EVERY_S = 0.25
"""Interval of the RSS / thread-count sampler."""


@dataclass(slots=True)
class Tally:
    """What one session's runs produced (touched only by the worker owning the session)."""

    runs: int = 0
    ok: int = 0
    """Runs whose outputs were exactly ``[run number]``."""
    received: int = 0
    """Output values received."""
    lost: int = 0
    """Runs with no output."""
    extra: int = 0
    """Outputs beyond the first in a run (doubled work)."""
    wrong: int = 0
    """Runs whose (first) output was not the run number."""
    odd_supersteps: int = 0
    """Runs that did not take exactly 3 supersteps."""
    failed: int = 0
    """Runs that raised."""
    first_error: str | None = None

    def check(self, run: int, result: af.RunResult) -> None:
        """Account for run number ``run`` of this session."""
        self.runs += 1
        outputs = result.outputs
        self.received += len(outputs)
        if outputs == [run] and result.supersteps == 3:
            self.ok += 1
            return
        if result.supersteps != 3:
            self.odd_supersteps += 1
        if not outputs:
            self.lost += 1
            self._note(f"run {run}: no output")
            return
        self.extra += len(outputs) - 1
        if outputs[0] != run:
            self.wrong += 1
            self._note(f"run {run}: outputs {outputs[:3]}")

    def failure(self, run: int, exc: Exception) -> None:
        """Run number ``run`` raised ``exc``."""
        self.runs += 1
        self.failed += 1
        self.lost += 1
        self._note(f"run {run}: {type(exc).__name__}: {exc}")

    def _note(self, what: str) -> None:
        if self.first_error is None:
            self.first_error = what


def thread_count() -> int:
    """Threads of this process (``/proc``: every OS thread), else Python's count."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


def threads_by_kind() -> dict[str, int]:
    """Python threads grouped by name without the trailing number (``ExecutorHost-12``)."""
    kinds = Counter(re.sub(r"[-_]\d+$", "", t.name) for t in threading.enumerate())
    return dict(sorted(kinds.items()))


@dataclass(slots=True)
class Sampler:
    """A daemon thread recording ``(seconds, phase, threads, rss_mb)`` every ``every`` s."""

    every: float = SAMPLE_EVERY_S
    phase: str = "warmup"
    samples: list[tuple[float, str, int, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _t0: float = 0.0

    def start(self) -> None:
        """Start sampling (the sampler's own thread is one of the threads counted, always)."""
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)
        self._thread.start()

    def sample(self) -> None:
        """Record one sample now (also called by the main thread at phase boundaries)."""
        self.samples.append((time.perf_counter() - self._t0, self.phase, thread_count(), rss_mb()))

    def stop(self) -> None:
        """Take one last sample (the sampler still counted), then stop sampling."""
        self.sample()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def measured(self) -> list[tuple[float, str, int, float]]:
        """The samples after the warm-up."""
        return [s for s in self.samples if s[1] != "warmup"]


def coarse(samples: Sequence[tuple[float, str, int, float]], points: int = 16) -> list[Any]:
    """At most ``points`` samples, evenly spread, as ``[seconds, threads, rss_mb]``."""
    if not samples:
        return []
    step = max(1, round(len(samples) / points))
    picked = list(samples[::step])
    if picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    return [[round(t, 1), n, round(r, 1)] for t, _, n, r in picked]


def wait_for_threads(limit: int, timeout: float = 5.0) -> int:
    """Wait (bounded) until at most ``limit`` threads remain; returns the count then."""
    deadline = time.monotonic() + timeout
    while (count := thread_count()) > limit and time.monotonic() < deadline:
        time.sleep(0.05)
    return count
