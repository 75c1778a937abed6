"""What the inspector shows, read from a store: plain values, never live objects.

Every read that can fail (a damaged record, a missing blob, a type this process does
not know) is caught where it happens and becomes an error text on the page, so a
damaged store never takes the server down. Values are decoded only through the
safe decoder (registered types only) and shown as text; the templates escape it.
"""

from __future__ import annotations

import difflib
import pprint
import time
from dataclasses import dataclass, field
from typing import Any

from actorflow.actors import decode, decode_state
from actorflow.errors import ActorflowError
from actorflow.runtime import decode_runtime
from actorflow.storage import Checkpoint, CheckpointKind, CheckpointStore

__all__ = [
    "CheckpointView",
    "SessionRow",
    "checkpoint_view",
    "describe_graph",
    "diff_state",
    "executor_state",
    "session_rows",
    "show",
]

RUNNING_WINDOW = 30.0
"""A lineage whose newest cut is not ``final`` and whose session no live lease holds
counts as running this many seconds after its last checkpoint; after that it stopped
before going idle (failed, cancelled or its process died)."""


def show(value: Any) -> str:
    """A decoded value as readable text (the template escapes it)."""
    return pprint.pformat(value, width=88, sort_dicts=False)


def show_state(state: dict[str, Any]) -> str:
    """An executor's state as text: one ``name = value`` entry per attribute, so a diff
    names the attribute that changed."""
    return "\n".join(f"{name} = {show(value)}" for name, value in state.items())


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def decode_text(payload: Any) -> str:
    """A payload as text: decoded when this process knows its types, else why not."""
    if isinstance(payload, list):  # a fan-in delivery: one payload per source
        return show([_decoded_or_note(p) for p in payload])
    return show(_decoded_or_note(payload))


class _Note(str):
    """Shown as is by pprint (no quotes): a placeholder for what could not be decoded."""

    def __repr__(self) -> str:
        return str(self)


def _decoded_or_note(payload: Any) -> Any:
    if not isinstance(payload, bytes):
        return payload
    try:
        return decode(payload)
    except ActorflowError as exc:
        return _Note(f"<cannot decode {len(payload)} bytes: {exc}>")


@dataclass
class SessionRow:
    """One session in the index."""

    session: str
    workflow: str = ""
    state: str = "unknown"
    checkpoints: int = 0
    last_activity: float = 0.0
    latest: str = ""
    latest_kind: str = ""
    superstep: int = 0
    error: str = ""
    owner: str = ""
    """Who holds the session's live lease (the session is open somewhere), if anyone."""


def lease_owner(store: CheckpointStore, session: str) -> str:
    """The owner of ``session``'s live lease, or '' (none, or the store keeps none)."""
    current = getattr(store, "current_lease", None)
    if current is None:
        return ""
    lease = current(session)
    return str(lease.owner) if lease is not None else ""


def _pending(cp: Checkpoint) -> dict[str, Any]:
    pending: dict[str, Any] = decode_runtime(cp.runtime)["pending"]
    return pending


def session_state(cps: list[Checkpoint], busy: bool, now: float, leased: bool = False) -> str:
    """running, idle, waiting (on requests) or failed, from a lineage's newest cut and
    whether an owner holds the session (``leased``)."""
    cuts = [c for c in cps if c.kind is not CheckpointKind.PARTIAL]
    if busy:
        return "running"
    if cuts and cuts[-1].kind is CheckpointKind.FINAL:
        return "waiting" if _pending(cuts[-1]) else "idle"
    if leased or now - max(c.created_at for c in cps) < RUNNING_WINDOW:
        return "running"
    return "failed"


def session_rows(store: CheckpointStore, busy: set[str]) -> tuple[list[SessionRow], list[str]]:
    """Every session with its state and last activity; and errors met on the way."""
    errors: list[str] = []
    try:
        sessions = store.sessions()
    except Exception as exc:  # noqa: BLE001 - a damaged store is shown, not raised
        return [], [f"listing sessions failed: {_failure(exc)}"]
    rows: list[SessionRow] = []
    now = time.time()
    for sid in sessions:
        row = SessionRow(sid)
        try:
            cps = store.list(session=sid)
            if cps:
                latest = cps[-1]
                row.workflow = latest.workflow
                row.checkpoints = len(cps)
                row.last_activity = max(c.created_at for c in cps)
                row.latest, row.latest_kind = latest.id, latest.kind.value
                row.superstep = latest.superstep
                row.owner = lease_owner(store, sid)
                row.state = session_state(cps, sid in busy, now, bool(row.owner))
        except Exception as exc:  # noqa: BLE001 - one damaged lineage must not hide the rest
            row.state, row.error = "damaged", _failure(exc)
            errors.append(f"session {sid!r}: {row.error}")
        rows.append(row)
    rows.sort(key=lambda r: r.last_activity, reverse=True)
    return rows, errors


@dataclass
class CheckpointView:
    """A checkpoint's detail page."""

    checkpoint: Checkpoint
    states: dict[str, str] = field(default_factory=dict)
    """Executor id -> its decoded state as text (or the reason it cannot be shown)."""
    inbox: list[tuple[str, str, str]] = field(default_factory=list)
    """(target, source, message text) of each message in flight."""
    fan_in: list[tuple[str, str, str]] = field(default_factory=list)
    """(group, source, buffered values text)."""
    pending: list[dict[str, str]] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    metadata: str = ""
    errors: list[str] = field(default_factory=list)
    graph: dict[str, Any] = field(default_factory=dict)


def executor_state(store: CheckpointStore, cp: Checkpoint, executor: str) -> dict[str, Any]:
    """An executor's state at ``cp``, decoded by the safe decoder.

    Raises:
        KeyError: no such executor in ``cp``; ActorflowError: a blob is missing or corrupt,
            or the state holds a type this process does not know.
    """
    digests = cp.executors[executor]
    return decode_state([store.load_blob(d) for d in digests])


def checkpoint_view(store: CheckpointStore, cp: Checkpoint) -> CheckpointView:
    """Everything the detail page shows; each part that cannot be read says why."""
    view = CheckpointView(cp, metadata=show(dict(cp.metadata)) if cp.metadata else "")
    for eid in sorted(cp.executors):
        try:
            view.states[eid] = show_state(executor_state(store, cp, eid))
        except Exception as exc:  # noqa: BLE001 - shown in place of the state
            view.states[eid] = f"<cannot show this state: {_failure(exc)}>"
            view.errors.append(f"state of {eid!r}: {_failure(exc)}")
    if cp.kind is CheckpointKind.PARTIAL:
        return view
    try:
        body = decode_runtime(cp.runtime)
    except Exception as exc:  # noqa: BLE001 - a damaged runtime record is shown, not raised
        view.errors.append(f"runtime record: {_failure(exc)}")
        return view
    for target, deliveries in sorted(body["inbox"].items()):
        for source, _group, payload in deliveries:
            view.inbox.append((str(target), str(source), decode_text(payload)))
    for group, sources in sorted(body["fan_in"].items()):
        for source, payloads in sorted(sources.items()):
            view.fan_in.append((str(group), str(source), decode_text(payloads)))
    for request_id, (executor, payload, response_type) in sorted(body["pending"].items()):
        view.pending.append(
            {
                "id": str(request_id),
                "executor": executor,
                "request": decode_text(payload),
                "response_type": response_type,
            }
        )
    view.answered = list(body["answered"])
    graph = body.get("graph")
    view.graph = graph if isinstance(graph, dict) else {}
    return view


def describe_graph(store: CheckpointStore, cp: Checkpoint) -> dict[str, Any]:
    """The graph description stored with a checkpoint ({} if there is none)."""
    if cp.kind is CheckpointKind.PARTIAL:
        return {}
    graph = decode_runtime(cp.runtime).get("graph")
    return graph if isinstance(graph, dict) else {}


def diff_state(
    store: CheckpointStore, a: Checkpoint, b: Checkpoint, executor: str
) -> tuple[list[tuple[str, str]], str]:
    """(kind, line) pairs of a unified diff of ``executor``'s state from ``a`` to ``b``
    (kind: ``add``, ``del``, ``same``, ``hunk``), and an error text ('' if none)."""
    texts: list[list[str]] = []
    for cp in (a, b):
        try:
            texts.append(show_state(executor_state(store, cp, executor)).splitlines())
        except KeyError:
            return [], f"checkpoint {cp.id} has no executor {executor!r}"
        except Exception as exc:  # noqa: BLE001 - shown on the page
            return [], f"state of {executor!r} at {cp.id}: {_failure(exc)}"
    lines: list[tuple[str, str]] = []
    for line in difflib.unified_diff(texts[0], texts[1], lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "same")
        lines.append((kind, line))
    return lines, ""
