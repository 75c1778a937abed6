"""Restart policies (Erlang-style intensity limits with backoff) and checkpoint policies."""

from __future__ import annotations

import enum
import math
import random
from collections import deque
from dataclasses import dataclass, field

from actorflow.errors import ResultNotRecordable

__all__ = [
    "Backoff",
    "CheckpointPolicy",
    "Durability",
    "RestartPolicy",
    "RestartTracker",
    "Restarts",
]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before each restart: ``initial * multiplier**n``, capped, with jitter."""

    initial: float = 0.0
    """Delay before the first restart, seconds."""
    maximum: float = 5.0
    """Upper bound on any delay, seconds."""
    multiplier: float = 2.0
    """Growth factor per consecutive restart."""
    jitter: float = 0.0
    """Fraction of the delay added at random (0.1 = up to +10%)."""

    def __post_init__(self) -> None:
        for name in ("initial", "maximum", "multiplier", "jitter"):
            _check_number(f"Backoff.{name}", getattr(self, name), least=0.0)
        if self.multiplier < 1:
            raise ValueError(
                f"Backoff.multiplier must be >= 1 (delays never shrink), got {self.multiplier!r}"
            )

    def delay(self, attempt: int) -> float:
        """Seconds to wait before restart number ``attempt`` (1-based)."""
        base = min(self.maximum, self.initial * self.multiplier ** max(attempt - 1, 0))
        return base * (1.0 + random.random() * self.jitter) if self.jitter else base


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How the supervisor reacts when a handler raises, times out or its actor dies.

    At most ``max_restarts`` restarts within any ``within_seconds`` window; past
    that the run fails with the original exception chained. Only exceptions that
    are instances of ``retry_on`` are restarted, and never a
    :class:`~actorflow.errors.ResultNotRecordable`, which a restart would raise again.
    """

    max_restarts: int = 3
    """Restarts allowed within the window."""
    within_seconds: float = 60.0
    """Length of the sliding window, seconds."""
    backoff: Backoff = field(default_factory=Backoff)
    """Delay before each restart."""
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    """Exception types that trigger a restart; others fail the run at once."""

    def __post_init__(self) -> None:
        _check_count("RestartPolicy.max_restarts", self.max_restarts, least=0)
        window = self.within_seconds
        if isinstance(window, bool) or not isinstance(window, int | float) or not window > 0:
            raise ValueError(
                "RestartPolicy.within_seconds must be a number of seconds > 0 (math.inf: "
                f"restarts counted for the whole run), got {window!r}"
            )
        if not isinstance(self.backoff, Backoff):
            raise TypeError(f"RestartPolicy.backoff must be a Backoff, got {self.backoff!r}")
        retry_on: object = self.retry_on
        if isinstance(retry_on, type):  # one type: what isinstance() takes as well
            retry_on = (retry_on,)
            object.__setattr__(self, "retry_on", retry_on)
        if not (
            type(retry_on) is tuple
            and retry_on
            and all(isinstance(t, type) and issubclass(t, BaseException) for t in retry_on)
        ):
            raise TypeError(
                "RestartPolicy.retry_on must be a non-empty tuple of exception types, e.g. "
                f"(ConnectionError, TimeoutError), got {retry_on!r}"
            )


def _check_count(name: str, value: object, *, least: int) -> None:
    """ValueError unless ``value`` is a whole number (not a bool) >= ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")


def _check_number(name: str, value: object, *, least: float) -> None:
    """ValueError unless ``value`` is a finite real number (not a bool) >= ``least``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < least
    ):
        raise ValueError(f"{name} must be a finite number >= {least:g}, got {value!r}")


class RestartTracker:
    """Counts restarts of one executor in a sliding window (supervisor thread only)."""

    __slots__ = ("_policy", "_times")

    def __init__(self, policy: RestartPolicy) -> None:
        self._policy = policy
        self._times: deque[float] = deque()

    def allow(self, now: float) -> int | None:
        """Record a restart at ``now`` and return its attempt number, or None if over the limit."""
        window = self._policy.within_seconds
        while self._times and now - self._times[0] > window:
            self._times.popleft()
        if len(self._times) >= self._policy.max_restarts:
            return None
        self._times.append(now)
        return len(self._times)


class Restarts:
    """The restart policies of one workflow run, with their intensity counters."""

    __slots__ = ("_default", "_overrides", "_trackers")

    def __init__(self, default: RestartPolicy | None, overrides: dict[str, RestartPolicy]) -> None:
        self._default = default
        self._overrides = overrides
        self._trackers: dict[str, RestartTracker] = {}

    def reset(self) -> None:
        """Forget every restart counted so far."""
        self._trackers.clear()

    @property
    def active(self) -> bool:
        """Whether any executor may be restarted (so last good states must be kept)."""
        return self._default is not None or bool(self._overrides)

    def decide(
        self, executor: str, error: BaseException, restorable: bool, now: float
    ) -> tuple[RestartPolicy, int] | str:
        """Whether to restart ``executor`` after ``error``: (policy, attempt), or why not."""
        policy = self._overrides.get(executor, self._default)
        if policy is None or not restorable or not isinstance(error, policy.retry_on):
            return f"no restart policy covers {executor!r} for this error"
        if isinstance(error, ResultNotRecordable):
            return "no restart is made for it: the result is remembered, so it would fail again"
        tracker = self._trackers.setdefault(executor, RestartTracker(policy))
        attempt = tracker.allow(now)
        if attempt is None:
            return (
                f"{executor!r} was restarted {policy.max_restarts} time(s) within "
                f"{policy.within_seconds} s and the restart policy allows no more"
            )
        return policy, attempt


class Durability(enum.Enum):
    """When a checkpoint write must finish."""

    SYNC = "sync"
    """The next superstep starts only after the write is durable.

    With a ``MemoryStore``, which nothing outlives the process to read, a ``step`` cut
    is written while the next superstep's hosts start. The supervisor reads none of
    their answers before the write is done, and a failed write fails the run at its
    barrier with that superstep rolled back.
    """
    ASYNC = "async"
    """Written in the background; a failed write fails the run at the next barrier."""


@dataclass(frozen=True, slots=True)
class CheckpointPolicy:
    """When to checkpoint (only ever when a store is given).

    Default: after every superstep, synchronously.
    """

    every: int = 1
    """Checkpoint after every ``every``-th superstep (1 = each)."""
    on_idle_only: bool = False
    """Only checkpoint when the run goes idle (plus the entry checkpoint)."""
    durability: Durability = Durability.SYNC
    """Whether supersteps wait for the write."""

    def __post_init__(self) -> None:
        _check_count("CheckpointPolicy.every", self.every, least=1)
        if not isinstance(self.on_idle_only, bool):
            raise TypeError(
                f"CheckpointPolicy.on_idle_only must be True or False, got {self.on_idle_only!r}"
            )
        if not isinstance(self.durability, Durability):
            raise TypeError(
                "CheckpointPolicy.durability must be Durability.SYNC or Durability.ASYNC, got "
                f"{self.durability!r}"
            )
