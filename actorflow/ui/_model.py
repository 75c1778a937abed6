"""What the inspector shows, read from a store: plain values, never live objects.

Every read that can fail (a damaged record, a missing blob, a type this process does
not know) is caught where it happens and becomes an error text on the page, so a
damaged store never takes the server down. Values are decoded only through the
safe decoder (registered types only) and shown as text; the templates escape it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from actorflow.actors import decode_state
from actorflow.runtime import decode_runtime
from actorflow.storage import Checkpoint, CheckpointKind, CheckpointStore

from ._answer_form import answer_fields
from ._values import decode_text, show, show_state
from ._values import failure as _failure

__all__ = [
    "CheckpointView",
    "checkpoint_view",
    "describe_graph",
    "diff_state",
    "executor_state",
]


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
    pending: list[dict[str, Any]] = field(default_factory=list)
    """Each pending request: id, executor, request text, response type, and the
    inputs of a form for the answer (``fields``: None when the type has none)."""
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
                "fields": answer_fields(str(response_type)),
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
