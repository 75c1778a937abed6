"""What a checkpoint journals of its effects, as the tests read it."""

from __future__ import annotations

from typing import Any

from actorflow.runtime import decode_runtime
from actorflow.runtime._effects import arguments_of, raised_place
from actorflow.storage import Checkpoint


def journaled_results(cp: Checkpoint) -> list[list[Any]]:
    """``[executor, superstep, name, n, result]`` of each effect result ``cp`` records:
    not the raises or the argument digests journaled beside them."""
    return [
        entry
        for entry in decode_runtime(cp.runtime).get("effects", [])
        if arguments_of(entry[2]) is None and raised_place(entry[2]) is None
    ]
