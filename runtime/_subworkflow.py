"""Sub-workflows: an executor whose state is a whole nested run.

:class:`WorkflowExecutor` runs an inner :class:`~actorflow.Workflow` as one
executor of a parent graph. Three rules make it safe to checkpoint:

- **The inner workflow is code, not state.** Like an executor class it reaches
  every instance through the program (:class:`~._runner.Attachment`), never
  through the snapshot, and its description enters the parent's graph
  signature, so a parent checkpoint cannot be resumed with a changed child.
- **The state is the nested checkpoint, as bytes**: the inner run's latest
  record, encoded, with ``parent_id`` cleared (the nested lineage never names an
  id nobody stored), and the blobs it references. It holds the inner executors'
  states, in-flight messages, fan-in buffers and pending requests, so restoring
  a parent checkpoint continues the child where it was (LangGraph #4796).
- **No live inner session outlives a delivery.** Each delivery resumes the
  inner workflow from the nested checkpoint into a private ``MemoryStore``, runs
  it to idle, keeps the new final checkpoint and closes the session. A parent
  restart, restore, reset or shutdown therefore only ever swaps bytes, and no
  actor can leak when the parent drops an instance.
"""

from __future__ import annotations

import builtins
import dataclasses
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from actorflow.actors import HostedFactory, HostRef, entry_named, main_module_name

# Not re-exported by actorflow.actors: only the codec and this lookup need it.
from actorflow.errors import CheckpointCorrupt, DecodeError, RequestError
from actorflow.storage import (
    MemoryStore,
    blob_digest,
    decode_checkpoint,
    encode_checkpoint,
)

from ._context import Context
from ._effects import EffectFrame, EffectFrameHost, EffectJournal, unrecorded
from ._events import RequestEvent, RunResult
from ._graph import explain_mismatch
from ._policy import CheckpointPolicy
from ._wire import unpack
from ._workflow import Workflow
from .checkpoints import decode_runtime, prepare_snapshots
from .graph import Executor, handler, response_handler
from .session import Session, open_private

__all__ = ["NESTED_RECORD", "OutputMode", "WorkflowExecutor"]

OutputMode = Literal["send", "output"]
"""What a sub-workflow does with its inner outputs: send them along the parent's
out-edges (``"send"``) or emit them as parent outputs (``"output"``)."""

NESTED_RECORD = "checkpoint"
"""Snapshot attribute holding the nested record; every other attribute but one is a blob."""
_ASKED = "asked"
"""Snapshot attribute mapping the parent's ids of open inner requests that carry the
parent's lineage tag to the inner ids (present only when some do)."""

# The inner run is checkpointed only when it goes idle: the parent snapshots the
# WorkflowExecutor between deliveries, never in the middle of an inner run.
_INNER_POLICY = CheckpointPolicy(on_idle_only=True)


class _Inner:
    """The code a WorkflowExecutor carries: its inner workflow and output mode."""

    __slots__ = ("outputs", "workflow")

    def __init__(self, workflow: Workflow, outputs: OutputMode) -> None:
        self.workflow = workflow
        self.outputs = outputs

    def attach(self, instance: Executor) -> None:
        """Hand this code to an instance rebuilt by a runner (before ``restore``)."""
        assert isinstance(instance, WorkflowExecutor)
        instance._af_code = self

    def describe(self) -> dict[str, Any]:
        """The inner graph's description plus the output mode (enters the signature)."""
        return {**self.workflow.describe(), "outputs": self.outputs}


class WorkflowExecutor(Executor):
    """An executor that runs a whole workflow, ``workflow``, inside a parent graph.

    Each message it receives becomes the input of one inner run, run to idle
    inside the parent's superstep. Inner outputs are sent along this executor's
    out-edges (``outputs="send"``, the default; a value no out-edge takes fails
    the step as ``UnroutableMessage``) or emitted as parent outputs
    (``outputs="output"``). Inner requests surface to the parent's caller with
    the id ``"<this id>/<inner request id>"``; the answer given to the parent
    (``session.respond``) is routed down to the inner request.

    State is the nested checkpoint (see the module docstring); restoring a state
    taken on a different inner graph raises ``GraphMismatch`` naming the nested
    path. A failure the inner workflow's own restart policy does not absorb fails
    this executor's step, which the parent's policy may then restart from its
    last good nested state. Nesting works to any depth.

    The inner workflow is shared code: many parent sessions may use it at once,
    each with its own nested state. Close it (``with inner:``) when done with
    every parent that uses it.

    Args:
        workflow: the inner workflow (built; not closed while in use).
        id: this executor's id in the parent graph.
        outputs: ``"send"`` or ``"output"``, see above.
        timeout: per-superstep limit of the whole inner run, as for any executor.
    """

    __slots__ = ("_af_asked", "_af_blobs", "_af_code", "_af_nested")

    def __init__(
        self,
        workflow: Workflow,
        id: str,
        *,
        outputs: OutputMode = "send",
        timeout: float | None = None,
    ) -> None:
        super().__init__(id, timeout=timeout)
        if not isinstance(workflow, Workflow):
            raise TypeError(
                f"WorkflowExecutor {id!r} runs a built workflow (WorkflowBuilder(...).build()), "
                f"got {type(workflow).__name__} {workflow!r:.60}"
            )
        if outputs not in ("send", "output"):
            raise ValueError(f"WorkflowExecutor {id!r}: outputs must be 'send' or 'output'")
        self._af_code = _Inner(workflow, outputs)
        self._af_nested: bytes | None = None
        self._af_blobs: dict[str, bytes] = {}
        self._af_asked: dict[str, str] = {}

    @property
    def workflow(self) -> Workflow:
        """The inner workflow."""
        return self._af_code.workflow

    # --- state ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The nested checkpoint: ``{"checkpoint": record or None, <digest>: blob, ...}``.

        One attribute per nested blob, so the parent's chunked, content-addressed
        snapshots store an unchanged (large) inner executor state only once.
        """
        state: dict[str, Any] = {NESTED_RECORD: self._af_nested}
        if self._af_asked:
            state[_ASKED] = dict(self._af_asked)
        for digest in sorted(self._af_blobs):
            state[digest] = self._af_blobs[digest]
        return state

    def restore(self, state: Mapping[str, Any]) -> None:
        """Adopt a nested checkpoint taken by :meth:`snapshot`, after checking it.

        Raises:
            CheckpointCorrupt: the record or a blob is damaged, or a blob is missing.
            GraphMismatch: the record was taken on another inner graph (names the path).
        """
        record = state.get(NESTED_RECORD)
        asked = state.get(_ASKED) or {}
        blobs = {k: v for k, v in state.items() if k not in (NESTED_RECORD, _ASKED)}
        if record is not None:
            self._check(record, blobs)
        self._af_nested = record
        self._af_blobs = blobs
        self._af_asked = dict(asked)

    def _check(self, record: bytes, blobs: dict[str, bytes]) -> None:
        where = f"the nested checkpoint of sub-workflow {self.id!r}"
        checkpoint = decode_checkpoint(record)
        if checkpoint.parent_id is not None:
            raise CheckpointCorrupt(f"{where} names a parent id; nested records never do")
        missing = sorted(checkpoint.blob_digests() - set(blobs))
        if missing:
            raise CheckpointCorrupt(f"{where} lacks blobs {missing}")
        for digest, data in blobs.items():
            if blob_digest(data) != digest:
                raise CheckpointCorrupt(f"{where} has a corrupt blob {digest}")
        inner = self._af_code.workflow
        if checkpoint.graph_signature != inner.signature:
            stored = unpack(checkpoint.runtime).get("graph", {})
            raise explain_mismatch(stored, inner.describe(), path=f"sub-workflow {self.id!r}")
        # The inner states must fit the inner classes too (they migrate when the
        # inner session resumes); checked now so a resume fails, not a later delivery.
        snapshots: dict[str, list[tuple[str, bytes | None]]] = {
            eid: [(d, blobs[d]) for d in digests] for eid, digests in checkpoint.executors.items()
        }
        prepare_snapshots(
            inner._spec.programs,
            unpack(checkpoint.runtime),
            snapshots,
            lambda digests: {d: blobs[d] for d in digests},
            where=f"in sub-workflow {self.id!r}: ",
        )

    # --- handlers -------------------------------------------------------------------

    @handler
    def on_message(self, message: object, ctx: Context[Any]) -> None:
        """Run the inner workflow on ``message`` until it is idle."""
        self._advance(ctx, lambda session: session.run(message))

    @response_handler
    def on_response(self, request: object, response: object, ctx: Context[Any]) -> None:
        """Route the parent caller's answer down to the inner request it belongs to."""
        del request  # identified by its id: two inner requests may carry equal values
        request_id = ctx.request_id
        prefix = f"{self.id}/"
        if request_id is None or not request_id.startswith(prefix):
            raise RequestError(
                f"sub-workflow {self.id!r} received an answer to {request_id!r}, which it "
                "did not ask for"
            )
        inner_id = self._af_asked.pop(request_id, None) or request_id[len(prefix) :]
        self._advance(ctx, lambda session: session.respond({inner_id: response}))

    # --- internals ------------------------------------------------------------------

    def _advance(self, ctx: Context[Any], act: Callable[[Session], RunResult]) -> None:
        """Resume the nested run, ``act`` on it, keep its new checkpoint, pass results up."""
        code = self._af_code
        store = MemoryStore()
        nested = _NestedEffects(ctx._journal(), self.id)
        try:
            session = self._open(store)
            resumed = session.last_checkpoint_id
            for executor in code.workflow.executor_ids:
                session.wrap_host(executor, nested.host)
            with session:
                try:
                    result = act(session)
                except BaseException as exc:
                    # The inner run failed: the results its effects got go with the
                    # parent's failed attempt all the same (those of inner supersteps
                    # since its last cut come with its error: it checkpoints when idle).
                    nested.adopt(_cut_effects(store, resumed) + unrecorded(exc))
                    raise
                last = session.last_checkpoint_id
            assert last is not None, "an inner session with a store checkpoints when idle"
            latest = store.load(last)
            blobs = {d: store.load_blob(d) for d in sorted(latest.blob_digests())}
            nested.adopt(_cut_effects(store, resumed))
        finally:
            store.close()
        for value in result.outputs:
            if code.outputs == "send":
                ctx.send(value)
            else:
                ctx.output(value)
        open_ids = {p.request_id for p in result.pending_requests}
        # The parent's lineage tag (after a reset, a fresh start or time travel) goes on
        # the surfaced ids too: the inner ids start over with the nested state.
        suffix = ctx._buffer.suffix
        for event in result.events:
            # Only requests made in this inner run: older ones were surfaced already.
            if isinstance(event, RequestEvent) and event.request_id in open_ids:
                outer_id = f"{self.id}/{event.request_id}{suffix}"
                if suffix:
                    self._af_asked[outer_id] = event.request_id
                ctx.request(event.value, _type_named(event.response_type), request_id=outer_id)
        self._af_nested = encode_checkpoint(dataclasses.replace(latest, parent_id=None))
        self._af_blobs = blobs

    def _open(self, store: MemoryStore) -> Session:
        """A session on the inner workflow, continuing the nested checkpoint if any."""
        inner = self._af_code.workflow
        inner._check_open()
        if self._af_nested is None:
            return open_private(inner._engine, store, self.id, None, _INNER_POLICY)
        checkpoint = decode_checkpoint(self._af_nested)
        store.save(checkpoint, self._af_blobs)
        return open_private(inner._engine, store, self.id, checkpoint.id, _INNER_POLICY)


class _NestedEffects:
    """The parent's effect journal, carried into one delivery's inner run.

    Inner effect keys are scoped by the parent's scope (two parent sessions never
    share one); the inner run's results are recorded with the parent's superstep,
    named ``<sub-workflow>/<executor>@<inner superstep>/<name>`` (an inner run that
    failed too: its halt holds them); when the parent is replayed, the inner run gets
    those recorded results, so a replay calls nothing inside a sub-workflow either; and
    when the parent's superstep runs again (a restart, a resume), the inner run is
    handed the results the parent remembers, so nothing is called twice. ``ctx.sql`` is refused inside (the inner run's store
    is private to the delivery).
    """

    __slots__ = ("_outer", "_sub")

    def __init__(self, outer: EffectJournal, sub: str) -> None:
        self._outer = outer
        self._sub = sub

    def host(self, host: HostRef, program: HostedFactory) -> HostRef:
        return EffectFrameHost(host, getattr(program, "executor_id", ""), self.reframe)

    def reframe(self, executor: str, superstep: int, frame: EffectFrame) -> EffectFrame:
        """An inner step's frame: the parent's scope, and the inner results the parent
        has recorded (a replay) or remembers (an earlier attempt at its superstep)."""
        outer = self._outer
        prefix = self._name(executor, superstep, "")
        known: Mapping[tuple[str, int], object]
        known = outer.recorded if outer.recorded is not None else outer.memory
        results = [
            [name[len(prefix) :], n, result]
            for (name, n), result in known.items()
            if name.startswith(prefix) and type(result) is bytes
        ]
        scope = f"{outer.scope}\x00{self._sub}\x00{frame[0]}"
        if outer.recorded is not None:
            return [scope, outer.fencing, None, results, None]
        return [scope, outer.fencing, None, None, results or None]

    def adopt(self, effects: Iterable[list[Any]]) -> None:
        """Record the inner run's effect results (``[executor, superstep, name, n,
        result]`` each) in the parent's journal, and remember them there: the parent's
        next attempt hands them to the inner run."""
        outer = self._outer
        made = {(name, n) for name, n, _ in outer.made}
        for executor, superstep, name, n, result in effects:
            place = (self._name(executor, superstep, name), n)
            outer.memory[place] = result
            if place not in made:
                made.add(place)
                outer.made.append([*place, result])

    def _name(self, executor: str, superstep: int, name: str) -> str:
        return f"{self._sub}/{executor}@{superstep}/{name}"


def _cut_effects(store: MemoryStore, resumed: str | None) -> list[list[Any]]:
    """The effect results the inner run's cuts in ``store`` record (not the resumed
    one's: the parent recorded those when it took them)."""
    return [
        effect
        for cp in store.list()
        if cp.id != resumed
        for effect in decode_runtime(cp.runtime).get("effects", [])
    ]


def _type_named(label: str) -> type:
    """The type whose ``type_label`` is ``label``, among types this process already has.

    A request's response type travels as its label; re-asking it in the parent
    needs the type back, so that the parent checks answers exactly as the child
    would. Looks up registered message types, builtins and already-imported
    modules; never imports anything.

    Raises:
        RequestError: no loaded type has that label.
    """
    if label == "NoneType":
        return type(None)
    try:
        return entry_named(label).cls
    except DecodeError:
        pass  # not a registered wire name: a builtin or stdlib type
    found: object = getattr(builtins, label, None) if "." not in label else _loaded(label)
    if not isinstance(found, type):
        raise RequestError(
            f"a sub-workflow request expects an answer of type {label!r}, which is not "
            "loaded in this process; import the module that defines it"
        )
    return found


def _loaded(label: str) -> object:
    """``module.qualname`` resolved in already-imported modules only (None if absent)."""
    parts = label.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        if module == main_module_name():  # the script's classes live in __main__
            module = "__main__" if module not in sys.modules else module
        found: object = sys.modules.get(module)
        for name in parts[cut:] if found is not None else ():
            found = getattr(found, name, None)
        if isinstance(found, type):
            return found
    return None
