"""What a trial left behind, in a form the oracle can be compared with.

**Outputs along the lineage.** Each attempt (a process, or a session opened again
after a failure) logs every output event with its superstep, and every checkpoint it
reports written. The stored lineage of the session (its newest record and the parents
it names) says which attempt's work counts for each stretch of supersteps: the outputs
of supersteps ``(previous cut, cut]`` are those that the attempt which wrote the cut
logged for them. An output of a crashed or fenced attempt that no stored cut covers
was not committed and is not counted; one that two attempts logged for supersteps a
single cut covers would be counted twice only if the attempt that wrote the cut logged
it twice. So "exactly the oracle's outputs" means nothing lost and nothing doubled.

**The history.** The session's history entries (stored inside its cuts) must agree
with its lineage: numbered 0, 1, 2, ... without a gap or a repeat (a crashed or
fenced attempt's unstored entries numbered again by the attempt that continued),
and their outputs exactly the lineage's outputs.

**Final states.** Each executor's state in the newest cut, decoded; a sub-workflow's
nested checkpoint is decoded into its inner executors' states, recursively, so that
ids and times (which differ between runs) do not enter the comparison.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actorflow.actors import decode_state
from actorflow.runtime import OutputEvent, event_of
from actorflow.storage import Checkpoint, CheckpointKind, decode_checkpoint

__all__ = ["AttemptLog", "canonical", "final_states", "history_of", "lineage_outputs"]

Output = list[Any]
"""``[superstep, executor, value]`` of one output event (value in canonical JSON form)."""


def canonical(value: Any) -> Any:
    """A JSON-able, comparable form of an output value or a decoded state."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            type(value).__name__,
            *(canonical(getattr(value, f.name)) for f in dataclasses.fields(value)),
        ]
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, bytes):
        return {"bytes": len(value), "sum": sum(value) % 65_521, "head": value[:8].hex()}
    if isinstance(value, set | frozenset):
        return sorted(canonical(v) for v in value)
    return value


@dataclasses.dataclass
class AttemptLog:
    """What one attempt logged: outputs, the checkpoints it wrote, how it ended."""

    outputs: list[Output] = dataclasses.field(default_factory=list)
    checkpoints: list[str] = dataclasses.field(default_factory=list)
    """Ids of the records this attempt began to write (see torture.stores.FaultyStore)."""
    events: list[list[Any]] = dataclasses.field(default_factory=list)

    @classmethod
    def parse(cls, lines: Iterable[str]) -> AttemptLog:
        """Read a log written one JSON list per line (a torn last line is ignored)."""
        log = cls()
        for line in lines:
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a killed process
            log.add(item)
        return log

    def add(self, item: list[Any]) -> None:
        if item[0] == "out":
            self.outputs.append(item[1:])
        elif item[0] == "saving":
            self.checkpoints.append(item[1])
        self.events.append(item)


def lineage(store: Any, session: str) -> list[Checkpoint]:
    """The session's lineage, oldest first, partial records left out."""
    latest = store.latest(session=session)
    if latest is None:
        return []
    chain = store.history(latest.id)
    return [cp for cp in reversed(chain) if cp.kind is not CheckpointKind.PARTIAL]


def lineage_outputs(store: Any, session: str, attempts: Sequence[AttemptLog]) -> list[Output]:
    """The outputs the stored lineage commits to, attributed as the module docstring says.

    Raises:
        AssertionError: a stored cut was written by no attempt (or by two).
    """
    writer: dict[str, int] = {}
    for index, attempt in enumerate(attempts):
        for checkpoint_id in attempt.checkpoints:
            if checkpoint_id in writer and writer[checkpoint_id] != index:
                raise AssertionError(f"checkpoint {checkpoint_id} reported by two attempts")
            writer[checkpoint_id] = index
    outputs: list[Output] = []
    covered = 0
    for cut in lineage(store, session):
        if cut.superstep <= covered:
            continue
        if cut.id not in writer:
            raise AssertionError(
                f"cut {cut.id} (superstep {cut.superstep}, {cut.kind}) of the lineage was "
                "reported written by no attempt"
            )
        attempt = attempts[writer[cut.id]]
        outputs += [o for o in attempt.outputs if covered < o[0] <= cut.superstep]
        covered = cut.superstep
    return outputs


def history_of(store: Any, session: str) -> dict[str, Any]:
    """The session's stored history: its numbers, and its outputs as ``[superstep,
    executor, value]`` (canonical), in order."""
    events = [event_of(entry) for entry in store.session_history(session)]
    return {
        "seqs": [event.seq for event in events],
        "outputs": [
            [e.superstep, e.executor, canonical(e.value)]
            for e in events
            if isinstance(e, OutputEvent)
        ],
    }


def final_states(store: Any, session: str) -> dict[str, Any]:
    """Every executor's state in the session's newest cut (canonical, recursive)."""
    cuts = lineage(store, session)
    if not cuts:
        return {}
    cut = cuts[-1]
    return {
        "superstep": cut.superstep,
        "executors": _states(cut, store.load_blob),
    }


def _states(checkpoint: Checkpoint, load: Any) -> dict[str, Any]:
    states: dict[str, Any] = {}
    for executor, digests in sorted(checkpoint.executors.items()):
        state = decode_state([load(d) for d in digests])
        if "checkpoint" in state and isinstance(state["checkpoint"], bytes | None):
            states[executor] = _nested(state)
        else:
            states[executor] = canonical(state)
    return states


def _nested(state: Mapping[str, Any]) -> Any:
    """A sub-workflow's state: its nested checkpoint's executors, decoded."""
    record = state["checkpoint"]
    if record is None:
        return {"nested": None}
    nested = decode_checkpoint(record)
    blobs = {k: v for k, v in state.items() if isinstance(v, bytes) and k != "checkpoint"}
    return {"nested": nested.superstep, "executors": _states(nested, blobs.__getitem__)}
