"""Replaying stored sessions against the current code (``actorflow replay``).

Each run a store holds starts at an ``entry`` cut (its input queued), a
``response`` cut (answers queued), a ``halt`` the session went on from, or (time
travel, a fork into a new id) any cut a branch went on from (see ``_runs``). A
replay copies that cut and its blobs into a scratch
:class:`~actorflow.storage.MemoryStore`, resumes it with the current workflow, and
runs it to idle (or as far as a stopped run went) with every effect answered from the results the
stored run journaled (the hosts' step requests carry them, see ``_effects``):
nothing is called, no ``ctx.sql`` statement is committed, and the stored store is
only read. Every later cut of the stored run (along its lineage, each child the
earliest written) is then compared with the replay's cut of the same kind and
superstep: each executor's state (digests first; decoded attribute by attribute
where they differ, the stored state brought to the current ``state_version`` as a
resume would; a sub-workflow's by its inner executors' attributes) and the outputs of
the run. The first difference of each session is
reported; a graph that changed is reported as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actorflow.actors import HostedFactory, HostRef, decode, decode_state
from actorflow.errors import (
    ActorflowError,
    CheckpointError,
    CheckpointNotFound,
    EffectNotRecorded,
    GraphMismatch,
    RunFailed,
)
from actorflow.storage import (
    BlobBatchReader,
    Checkpoint,
    CheckpointKind,
    CheckpointStore,
    MemoryStore,
    decode_checkpoint,
    sql_dialect,
)

from ._effects import STATEMENTS, EffectFrame, EffectFrameHost, arguments_of, raised_place
from ._events import OutputEvent, RunFailedEvent
from ._history import event_of
from ._subworkflow import NESTED_RECORD, WorkflowExecutor
from ._workflow import Workflow
from .checkpoints import decode_runtime, load_for_resume

__all__ = ["Divergence", "ReplayReport", "replay"]

_STARTS = (CheckpointKind.ENTRY, CheckpointKind.RESPONSE)
_NOT_FOLLOWED = (*_STARTS, CheckpointKind.PARTIAL)
"""Not a cut of the run that goes on: another run's start, or a finished part of a
superstep in flight (it may be written, or not, as the hosts' timing falls)."""
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a replay first differed from the stored run of a session."""

    session: str
    superstep: int
    """The superstep whose cut differs (for ``graph``: the stored cut's)."""
    kind: str
    """``state`` (an attribute's value), ``output``, ``graph`` (the workflow's graph
    changed), ``effect`` (an effect the stored run did not make, one it made that
    the replay did not, one called with other arguments, or a changed ``ctx.sql``
    statement: ``attribute`` is the effect's name), ``request`` (a
    request pending after one run and not the other, or asked otherwise: ``attribute``
    is its id), ``end`` (the replay stopped, or went on, where the stored run did not)
    or ``error``."""
    executor: str | None = None
    attribute: str | None = None
    old: Any = None
    """The stored value (a state attribute's, an output list's)."""
    new: Any = None
    """The replay's value."""
    detail: str = ""
    """The whole story in one sentence."""

    def __str__(self) -> str:
        return f"session {self.session!r}, superstep {self.superstep}: {self.detail}"


@dataclass(slots=True)
class ReplayReport:
    """What :func:`replay` found: runs replayed and, per session, the first divergence."""

    sessions: int = 0
    runs: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Runs that could not be replayed, each with why (a fork whose source session was
    deleted: its starting cut is gone). Not divergences: nothing was compared."""

    @property
    def identical(self) -> bool:
        """Whether every replayed run matched its stored run."""
        return not self.divergences

    def __str__(self) -> str:
        if self.identical:
            lines = [f"{self.sessions} session(s), {self.runs} run(s): all replay identically"]
        else:
            lines = [
                f"{self.sessions} session(s), {self.runs} run(s): "
                f"{len(self.divergences)} session(s) diverge"
            ]
        lines += [f"  {d}" for d in self.divergences]
        if self.skipped:
            lines.append(f"  {len(self.skipped)} run(s) not replayed:")
            lines += [f"    {why}" for why in self.skipped]
        return "\n".join(lines)


def replay(
    store: CheckpointStore, workflow: Workflow, sessions: Iterable[str] | None = None
) -> ReplayReport:
    """Replay the stored sessions of ``workflow`` (all, or ``sessions``) against its code.

    Never writes to ``store``. See the module docstring for what is compared.

    Raises:
        CheckpointNotFound: a session named in ``sessions`` has no checkpoint of the
            workflow, or (``sessions`` None) the store holds no session of it at all.
        CheckpointError: the store could not be read.
    """
    spec = workflow._spec
    report = ReplayReport()
    wanted = list(sessions) if sessions is not None else store.sessions()
    dialect = sql_dialect(store)
    for session in wanted:
        cuts = [
            cp
            for cp in store.list(workflow=spec.name, session=session)
            if cp.kind is not CheckpointKind.PARTIAL
        ]
        if not cuts:
            if sessions is not None:
                raise CheckpointNotFound(
                    f"session {session!r} has no checkpoint of workflow {spec.name!r} in the "
                    "store; list its sessions with `actorflow checkpoints list STORE`"
                )
            continue
        report.sessions += 1
        for start, chain in _runs(store, cuts, report.skipped):
            report.runs += 1
            found = _replay_run(store, workflow, start, chain, dialect)
            if found is not None:
                report.divergences.append(found)
                break
    if not report.sessions and sessions is None:
        raise CheckpointNotFound(
            f"the store holds no session of workflow {spec.name!r}: nothing to replay; check "
            "the store and that the workflow is built with the name its sessions were run with"
        )
    return report


def _runs(
    store: CheckpointStore, cuts: list[Checkpoint], skipped: list[str]
) -> list[tuple[Checkpoint, list[Checkpoint]]]:
    """Each run of a session: the cut it started from and the cuts it wrote, in order.

    A run starts at an ``entry`` or ``response`` cut, or at a ``halt``: a session that
    goes on after a failure or a stop without new input (``session.run()``) writes its
    next cuts after the halt, with no start cut of their own. It is followed along the
    earliest child of each cut. A later child of any cut is a branch (time travel to
    that cut), and a cut whose parent is another session's is a fork
    (``as_session=``): each is a run from that parent. A fork whose parent is gone
    (its session deleted) has nothing to start from: it is added to ``skipped``."""
    children: dict[str, list[Checkpoint]] = {}
    for cp in cuts:  # oldest first: the earliest child leads
        if cp.parent_id is not None:
            children.setdefault(cp.parent_id, []).append(cp)

    def following(cp: Checkpoint) -> list[Checkpoint]:
        return [c for c in children.get(cp.id, []) if c.kind not in _NOT_FOLLOWED]

    def chain(head: Checkpoint) -> list[Checkpoint]:
        found = [head]
        while found[-1].kind not in (CheckpointKind.FINAL, CheckpointKind.HALT):
            after = following(found[-1])
            if not after:
                break
            found.append(after[0])
        return found

    ours = {cp.id for cp in cuts}
    order = {cp.id: index for index, cp in enumerate(cuts)}
    runs: list[tuple[Checkpoint, Checkpoint]] = []
    for cp in cuts:
        heads = following(cp)
        starts = cp.kind in _STARTS or cp.kind is CheckpointKind.HALT
        runs += [(cp, head) for head in (heads if starts else heads[1:])]
        if cp.parent_id is not None and cp.parent_id not in ours and cp.kind not in _NOT_FOLLOWED:
            try:
                runs.append((store.load(cp.parent_id), cp))
            except CheckpointNotFound:
                skipped.append(
                    f"session {cp.session!r}, superstep {cp.superstep}: forked from checkpoint "
                    f"{cp.parent_id}, which the store no longer holds (its session was "
                    "deleted or pruned), so the run has no state to start from"
                )
    runs.sort(key=lambda run: order[run[1].id])
    return [(start, chain(head)) for start, head in runs]


def _replay_run(
    store: CheckpointStore,
    workflow: Workflow,
    start: Checkpoint,
    chain: list[Checkpoint],
    dialect: str | None,
) -> Divergence | None:
    """Replay one run; its first divergence, or None."""
    session = chain[0].session  # a fork's: its start is the forked session's cut
    if start.graph_signature != workflow.signature:
        try:
            load_for_resume(store, workflow._spec, session=None, checkpoint_id=start.id)
        except GraphMismatch as exc:
            return Divergence(session, start.superstep, "graph", detail=f"the graph changed: {exc}")
    scratch = MemoryStore()
    scratch.save(start, _blobs(store, {d for ds in start.executors.values() for d in ds}))
    recorded: dict[tuple[str, int], list[list[Any]]] = {}
    for cp in chain:
        for executor, superstep, name, n, result in decode_runtime(cp.runtime).get("effects", []):
            recorded.setdefault((executor, superstep), []).append([name, n, result])
    stop = _stopped_after(start, chain[-1])
    if stop == 0:  # stopped before its first superstep: nothing ran, nothing to compare
        return None
    failure: ActorflowError | None = None
    try:
        with workflow.resume(scratch, session=start.session) as replaying:
            journal = _Journal(recorded, dialect)
            for executor in workflow.executor_ids:
                replaying.wrap_host(executor, journal.host)
            try:
                replaying.run(max_supersteps=stop)
            except RunFailed as exc:
                failure = exc
    except CheckpointError as exc:
        return Divergence(session, start.superstep, "error", detail=f"could not resume: {exc}")
    unrecorded = _unrecorded(failure)
    if unrecorded is not None:
        # Every effect the stored run made is recorded, a failed superstep's too (with
        # its halt): the new code called the outside world where the old did not.
        return Divergence(
            session,
            unrecorded.superstep,
            "effect",
            executor=unrecorded.executor,
            attribute=unrecorded.effect,
            detail=str(unrecorded),
        )
    written = [
        cp for cp in scratch.list(session=start.session) if cp.kind is not CheckpointKind.PARTIAL
    ]
    replayed = {(cp.kind, cp.superstep): cp for cp in written}
    outputs = (_outputs(chain), _outputs(written))
    for cp in chain:
        mine = replayed.get((cp.kind, cp.superstep))
        if mine is None:
            return _ended(session, cp, failure, written[-1].superstep)
        found = _compare_journals(session, cp, mine)  # a cause of what differs next
        if found is not None:
            return found
        found = _compare(store, workflow, cp, scratch, mine)
        if found is not None:
            return found
        found = _compare_outputs(session, cp.superstep, outputs)
        if found is not None:
            return found
        found = _compare_failures(session, cp, mine)
        if found is not None:
            return found
        found = _compare_requests(session, cp, mine)
        if found is not None:
            return found
    last = chain[-1]
    extra = [cp for cp in written if cp.superstep > last.superstep]
    if last.kind in (CheckpointKind.FINAL, CheckpointKind.HALT) and extra:
        return Divergence(
            session,
            last.superstep,
            "end",
            old=last.kind.value,
            new=extra[-1].kind.value,
            detail=f"the stored run ended ({last.kind.value}) after superstep "
            f"{last.superstep}; the replay went on to superstep {extra[-1].superstep}",
        )
    return None


def _unrecorded(failure: BaseException | None) -> EffectNotRecorded | None:
    """The ``EffectNotRecorded`` a replay's failure comes from (a sub-workflow's inner
    run wraps it once more per level), or None."""
    seen = 0
    while failure is not None and seen < 32:
        if isinstance(failure, EffectNotRecorded):
            return failure
        failure, seen = failure.__cause__, seen + 1
    return None


def _ended(session: str, cp: Checkpoint, failure: ActorflowError | None, went: int) -> Divergence:
    """The replay wrote no cut like the stored ``cp``: it ended, or failed, before it,
    it went on past it (its last cut at superstep ``went``), or (``cp`` the halt of a
    failed run) it did not fail there."""
    stored = _failure_of(cp)
    if failure is None and stored is not None:
        return Divergence(
            session,
            cp.superstep,
            "end",
            executor=stored.executor,
            old=stored.error_type,
            detail=f"the stored run failed in superstep {cp.superstep + 1} "
            f"({stored.error_type} in {stored.executor!r}: {stored.error}); the replay did "
            "not fail there",
        )
    if failure is not None:
        how = f"failed before it ({failure})"
    elif went > cp.superstep:
        how = f"did not end there: it went on to superstep {went}"
    else:
        how = "ended before it"
    return Divergence(
        session,
        cp.superstep,
        "end" if failure is None else "error",
        old=cp.kind.value,
        detail=f"the stored run wrote a {cp.kind.value} cut after superstep {cp.superstep}; "
        f"the replay {how}",
    )


def _compare_journals(session: str, stored: Checkpoint, mine: Checkpoint) -> Divergence | None:
    """The first effect the stored cut journals and the replay's does not (no longer
    made), or made with other arguments (by digest), or the first ``ctx.sql``
    statement of an executor's superstep that differs (by digest).

    Cuts written before arguments and statements were journaled have no digests:
    arguments are compared where both cuts have them, statements where the stored cut
    has some."""

    def journaled(cp: Checkpoint) -> dict[tuple[str, int, str, int], bytes]:
        entries = decode_runtime(cp.runtime).get("effects", [])
        return {(e, step, name, n): value for e, step, name, n, value in entries}

    old, new = journaled(stored), journaled(mine)
    stated = {(e, step) for e, step, name, _ in old if name == STATEMENTS}
    for place in sorted(old.keys() | new.keys()):
        executor, superstep, name, n = place
        before, after = old.get(place), new.get(place)
        if before == after:
            continue
        called = arguments_of(name)
        if name == STATEMENTS:
            if (executor, superstep) not in stated:
                continue
            name = "ctx.sql"
            how = "queued another" if before and after else "queued a new one"
            detail = (
                f"executor {executor!r}, ctx.sql statement {n} of superstep {superstep}: the "
                f"replay {'did not queue it' if after is None else how}"
            )
        elif called is not None:
            if before is None or after is None:
                continue
            name = called
            detail = (
                f"executor {executor!r} called effect {called!r} (occurrence {n}) in superstep "
                f"{superstep} with other arguments than the stored run did (the replay was "
                "handed the stored result all the same)"
            )
        elif after is None and (raised := raised_place(name)) is not None:
            name, occurrence = raised
            detail = (
                f"executor {executor!r} called effect {name!r} (occurrence {occurrence}) in "
                f"superstep {superstep} in the stored run, where it raised (raise {n + 1} of "
                "that call); the replay no longer made that call"
            )
        elif after is None:
            detail = (
                f"executor {executor!r} made effect {name!r} (occurrence {n}) in superstep "
                f"{superstep} in the stored run; the replay no longer made it"
            )
        else:
            continue
        return Divergence(
            session,
            superstep,
            "effect",
            executor=executor,
            attribute=name,
            old=before.hex() if called is not None and before else None,
            new=after.hex() if called is not None and after else None,
            detail=detail,
        )
    return None


def _compare_requests(session: str, stored: Checkpoint, mine: Checkpoint) -> Divergence | None:
    """The first request pending at one cut and not at the other, or asked otherwise
    (another executor, value or answer type)."""
    old = decode_runtime(stored.runtime)["pending"]
    new = decode_runtime(mine.runtime)["pending"]
    if old == new:
        return None
    request_id = min(i for i in set(old) | set(new) if old.get(i) != new.get(i))
    before, after = old.get(request_id), new.get(request_id)

    def value(entry: list[Any] | None) -> Any:
        if entry is None:
            return None
        try:
            return decode(entry[1])
        except ActorflowError:  # a type the current code no longer has: its bytes
            return entry[1]

    def asked(entry: list[Any] | None) -> str:
        if entry is None:
            return "not asked"
        return f"asked by {entry[0]!r}: {_show(value(entry))} (answered with {entry[2]})"

    return Divergence(
        session,
        stored.superstep,
        "request",
        executor=(after or before or [None])[0],
        attribute=request_id,
        old=value(before),
        new=value(after),
        detail=f"request {request_id!r} pending after superstep {stored.superstep}: "
        f"{asked(before)} in the stored run, {asked(after)} in the replay",
    )


def _stopped_after(start: Checkpoint, last: Checkpoint) -> int | None:
    """How many supersteps the stored run was let run, if it was stopped (cancelled,
    or at its ``max_supersteps``): the replay stops there too. None: to idle."""
    if last.kind is not CheckpointKind.HALT or not _stopped(_failure_of(last)):
        return None
    return last.superstep - start.superstep


def _stopped(failure: RunFailedEvent | None) -> bool:
    """Whether a halt's failure is none (a cancel) or the superstep limit: the caller
    stopped the run, its code did not fail."""
    return failure is None or failure.error_type.rsplit(".", 1)[-1] == "SuperstepLimitExceeded"


def _compare_failures(session: str, stored: Checkpoint, mine: Checkpoint) -> Divergence | None:
    """Whether two ``halt`` cuts of the same superstep stopped for different reasons
    (another executor failed, or with another exception type; a cancel and the
    superstep limit are the same: the run was stopped there)."""
    old, new = _failure_of(stored), _failure_of(mine)
    if _stopped(old) and _stopped(new):
        return None
    if _why(old) == _why(new):
        return None
    return _halted_otherwise(session, stored, old, new)


def _why(failure: RunFailedEvent | None) -> tuple[str | None, str] | None:
    """What two halts' failures are compared by: the executor and the exception type."""
    return None if failure is None else (failure.executor, failure.error_type)


def _halted_otherwise(
    session: str, stored: Checkpoint, old: RunFailedEvent | None, new: RunFailedEvent | None
) -> Divergence:
    """The divergence of two halts, one of them (at least) a failure."""

    def said(event: RunFailedEvent | None) -> str:
        if event is None:
            return "did not fail (cancelled)"
        return f"failed with {event.error_type} in {event.executor!r}: {event.error}"

    return Divergence(
        session,
        stored.superstep,
        "error",
        executor=next(e.executor for e in (new, old) if e is not None),
        old=old.error_type if old is not None else None,
        new=new.error_type if new is not None else None,
        detail=f"in superstep {stored.superstep + 1} the stored run {said(old)}; the "
        f"replay {said(new)}",
    )


def _failure_of(cp: Checkpoint) -> RunFailedEvent | None:
    """The run failure a ``halt`` cut records (None: another cut, or a cancel). Only a
    halt counts: a failure whose halt could not be written (a policy that skips
    barriers) is in the history of a later cut, which the session went on past."""
    if cp.kind is not CheckpointKind.HALT:
        return None
    for entry in cp.history:
        if entry.kind == "run_failed":
            event = event_of(entry)
            assert isinstance(event, RunFailedEvent)
            return event
    return None


def _compare(
    store: CheckpointStore,
    workflow: Workflow,
    stored: Checkpoint,
    scratch: MemoryStore,
    mine: Checkpoint,
) -> Divergence | None:
    """The first executor state that differs between a stored cut and the replay's."""
    session = stored.session
    if all(list(stored.executors.get(e, ())) == list(mine.executors[e]) for e in mine.executors):
        return None
    try:  # the stored states, brought to the current code's versions as a resume would
        restored = load_for_resume(store, workflow._spec, session=None, checkpoint_id=stored.id)
    except ActorflowError as exc:
        return Divergence(session, stored.superstep, "error", detail=str(exc))
    for executor in sorted(mine.executors):
        old_chunks = [c for _, c in restored.snapshots[executor] if c is not None]
        new_chunks = list(_blobs(scratch, mine.executors[executor]).values())
        old, new = decode_state(old_chunks), decode_state(new_chunks)
        if issubclass(workflow._spec.programs[executor].cls, WorkflowExecutor):
            old, new = _nested_content(old), _nested_content(new)
        if old == new:
            continue
        for attribute in sorted(set(old) | set(new)):
            before, after = old.get(attribute, _MISSING), new.get(attribute, _MISSING)
            if before != after:
                return Divergence(
                    session,
                    stored.superstep,
                    "state",
                    executor=executor,
                    attribute=attribute,
                    old=None if before is _MISSING else before,
                    new=None if after is _MISSING else after,
                    detail=f"executor {executor!r}: {attribute} was "
                    f"{_show(before)} in the stored run, {_show(after)} in the replay",
                )
    return None


def _nested_content(state: dict[str, Any]) -> dict[str, Any]:
    """A sub-workflow's state as what its inner run decided, attribute by attribute:
    ``<inner executor>.<attribute>`` for each inner executor's state (nested ones
    likewise, their paths joined), and ``(inner run)`` for its superstep, kind and work
    in flight. The nested record's id, times and lineage differ per run, and its
    blobs are named by digest: neither says what differs."""
    record = state.get(NESTED_RECORD)
    if not isinstance(record, bytes):
        return state
    try:
        nested = decode_checkpoint(record)
    except ActorflowError:  # an inner executor's own attribute of that name
        return state
    blobs = {k: v for k, v in state.items() if k != NESTED_RECORD and type(v) is bytes}
    content = {k: v for k, v in state.items() if k != NESTED_RECORD and k not in blobs}
    runtime = decode_runtime(nested.runtime)
    runtime.pop("lineage", None)
    runtime.pop("lineages", None)
    content["(inner run)"] = (nested.superstep, nested.kind.value, runtime)
    for executor, digests in sorted(nested.executors.items()):
        try:
            inner = _nested_content(decode_state([blobs[d] for d in digests]))
        except (KeyError, ActorflowError):  # a blob missing, or a type the code lacks
            content[executor] = list(digests)
            continue
        for attribute, value in inner.items():
            content[f"{executor}.{attribute}"] = value
    return content


def _outputs(cuts: Iterable[Checkpoint]) -> list[tuple[int, str, Any]]:
    """(superstep, executor, value) of every output the cuts' history holds, in order."""
    found = []
    for cp in cuts:
        for entry in cp.history:
            if entry.kind == "output":
                event = event_of(entry)
                assert isinstance(event, OutputEvent)
                found.append((event.superstep, event.executor, event.value))
    return found


def _compare_outputs(
    session: str, upto: int, outputs: tuple[list[tuple[int, str, Any]], list[tuple[int, str, Any]]]
) -> Divergence | None:
    old = [o for o in outputs[0] if o[0] <= upto]
    new = [o for o in outputs[1] if o[0] <= upto]
    if old == new:
        return None
    index = next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
        min(len(old), len(new)),
    )
    before = old[index] if index < len(old) else None
    after = new[index] if index < len(new) else None
    superstep = (before or after or (upto, "", None))[0]
    executor = (before or after or (0, None, None))[1]
    return Divergence(
        session,
        superstep,
        "output",
        executor=executor,
        old=None if before is None else before[2],
        new=None if after is None else after[2],
        detail=f"output {index} of the run was {_show(before[2] if before else _MISSING)} "
        f"in the stored run, {_show(after[2] if after else _MISSING)} in the replay",
    )


def _show(value: object) -> str:
    if value is _MISSING:
        return "absent"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _blobs(store: CheckpointStore, digests: Iterable[str]) -> dict[str, bytes]:
    wanted = list(dict.fromkeys(digests))
    if isinstance(store, BlobBatchReader):
        found = store.load_blobs(wanted)
        return {d: found[d] for d in wanted}
    return {d: store.load_blob(d) for d in wanted}


class _Journal:
    """Gives each host's step requests the stored run's effect results (strict: an
    effect without one raises ``EffectNotRecorded``, never calls)."""

    __slots__ = ("_dialect", "_recorded")

    def __init__(self, recorded: Mapping[tuple[str, int], list[list[Any]]], dialect: str | None):
        self._recorded = recorded
        self._dialect = dialect

    def host(self, host: HostRef, program: HostedFactory) -> HostRef:
        return EffectFrameHost(host, getattr(program, "executor_id", ""), self.reframe)

    def reframe(self, executor: str, superstep: int, frame: EffectFrame) -> EffectFrame:
        scope, fencing = frame[:2]
        return [scope, fencing, self._dialect, self._recorded.get((executor, superstep), []), None]
