"""What an argument costs a Ray actor call as Ray submits it (a probe, no target).

Submits the same call to one bare Ray actor with one ``bytes`` argument and with
five (the shape ``load_call`` had before its program digest, pickle, label and
method became one head: ``actors/ray/_worker.LoadHead``), without waiting for the
answers, alternating rounds. Ray checks each argument against the method's
signature as it submits a call, so the gap is what the extra arguments cost the
driver on every call. Printed: ms per submitted call for each shape, median over
the rounds, as one JSON line.

Run: ``python -m bench.ray_args [--quick]``. Needs ``pip install 'actorflow[ray]'``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import actorflow as af
from bench._common import median, parse_options

PAYLOAD = b"x" * 100
HEAD = b"d" * 64


class _Sink:
    """A bare Ray actor whose methods take one and five ``bytes`` arguments."""

    def one(self, payload: bytes) -> int:
        return len(payload)

    def five(self, digest: bytes, blob: bytes, label: bytes, method: bytes, payload: bytes) -> int:
        return len(payload)


def _submit_ms(submit: Callable[[], Any], calls: int, drain: Callable[[], Any]) -> float:
    """Ms per call to submit ``calls`` calls; their answers are awaited afterwards, untimed."""
    started = time.perf_counter()
    for _ in range(calls):
        submit()
    elapsed = time.perf_counter() - started
    drain()
    return elapsed / calls * 1e3


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(__doc__ or "", argv)
    rounds, calls = (3, 300) if options.quick else (7, 1000)
    backend = af.RayBackend(
        init={"num_cpus": 2, "object_store_memory": 256 * 2**20, "log_to_driver": False}
    )
    stdout, sys.stdout = sys.stdout, sys.stderr  # the figure to stdout; what Ray prints, here
    backend.start()
    import ray  # started by the backend above

    sink: Any = ray.remote(max_restarts=0)(_Sink).remote()

    def one() -> Any:
        return sink.one.remote(PAYLOAD)

    def five() -> Any:
        return sink.five.remote(HEAD, b"", b"", b"on_step", PAYLOAD)

    def drain() -> Any:
        return ray.get(sink.one.remote(PAYLOAD))

    for _ in range(200):  # warm-up: the actor, the method signatures, the submit path
        ray.get([one(), five()])
    ones: list[float] = []
    fives: list[float] = []
    for _ in range(rounds):
        ones.append(_submit_ms(one, calls, drain))
        fives.append(_submit_ms(five, calls, drain))
    backend.shutdown()
    ray.shutdown()
    sys.stdout = stdout
    figure = {
        "probe": "ray_args",
        "one_arg_submit_ms": round(median(ones), 3),
        "five_args_submit_ms": round(median(fives), 3),
        "per_extra_arg_ms": round((median(fives) - median(ones)) / 4, 3),
        "one_arg_samples": [round(v, 3) for v in ones],
        "five_args_samples": [round(v, 3) for v in fives],
    }
    print(json.dumps(figure))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
