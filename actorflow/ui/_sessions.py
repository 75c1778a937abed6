"""The sessions page: every session of a store with its state and why, searched,
filtered by state and paged.

One read summarises every session (``actorflow.storage.session_summaries``: one
query on the SQL stores, which decodes only each session's newest record); a
session's state comes from that record and the history entries it carries, so
10,000 sessions cost one query and 10,000 record decodes, not 10,000 listings.
Nothing is cached between requests: every page reads the store afresh.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from actorflow.errors import ActorflowError
from actorflow.runtime import (
    ExecutorFailedEvent,
    RunCompletedEvent,
    RunFailedEvent,
    RunRestartedEvent,
    RunStatus,
    event_of,
)
from actorflow.runtime.checkpoints import at_rest, cancelled
from actorflow.storage import (
    Checkpoint,
    CheckpointKind,
    CheckpointStore,
    HistoryEntry,
    SessionSummary,
    session_summaries,
)

from ._values import decode_runtime_safely, decoded_or_note, failure

__all__ = [
    "PAGE_SIZE",
    "RUNNING_WINDOW",
    "STATES",
    "SessionRow",
    "SessionsPage",
    "lease_owner",
    "session_state",
    "sessions_page",
]

RUNNING_WINDOW = 30.0
"""A lineage whose newest record is neither ``final`` nor ``halt`` and whose session
no live lease holds counts as running this many seconds after its last record; after
that it was interrupted (its process stopped before the run ended)."""

PAGE_SIZE = 50
"""Sessions per page."""

STATES = ("running", "waiting", "idle", "failed", "cancelled", "interrupted", "damaged")
"""Every state a session can be shown in, in the order the filter offers them."""


@dataclass
class SessionRow:
    """One session in the index."""

    session: str
    workflow: str = ""
    state: str = "damaged"
    reason: str = ""
    """Why it is in that state, when that needs saying: a failure's executor, error and
    restarts; a cancellation; an interruption."""
    checkpoints: int = 0
    first_activity: float = 0.0
    last_activity: float = 0.0
    latest: str = ""
    latest_kind: str = ""
    superstep: int = 0
    error: str = ""
    """Why the session cannot be read (state ``damaged``)."""
    owner: str = ""
    """Who holds the session's live lease (the session is open somewhere), if anyone."""


@dataclass
class SessionsPage:
    """What the sessions page shows for one query."""

    rows: list[SessionRow]
    """This page's sessions, newest activity first."""
    total: int
    """Sessions in the store."""
    matching: int
    """Sessions that match the search and the state filter."""
    counts: dict[str, int]
    """State -> sessions in it among those matching the search."""
    page: int
    """This page's number, from 1."""
    pages: int
    """How many pages the matching sessions fill (at least 1)."""
    errors: list[str] = field(default_factory=list)


def lease_owner(store: CheckpointStore, session: str) -> str:
    """The owner of ``session``'s live lease, or '' (none, or the store keeps none)."""
    current = getattr(store, "current_lease", None)
    if current is None:
        return ""
    lease = current(session)
    return str(lease.owner) if lease is not None else ""


def _events(entries: Iterable[HistoryEntry], kinds: frozenset[str]) -> list[Any]:
    """The typed events of ``entries`` of these kinds (malformed ones are left out:
    the session page shows them as errors)."""
    found: list[Any] = []
    for entry in entries:
        if entry.kind in kinds:
            try:
                found.append(event_of(entry, decode_value=decoded_or_note))
            except ActorflowError:
                continue
    return found


_ENDS = frozenset(
    {"run_completed", "run_failed", "run_cancelled", "run_restarted", "executor_failed"}
)


def failure_reason(
    failed: RunFailedEvent, restarts: int, cause: ExecutorFailedEvent | None = None
) -> str:
    """A failed run's reason in one line: executor, error type and message (the
    executor's own error when ``cause`` is its last failure), restarts used."""
    where = f"{failed.executor}: " if failed.executor else ""
    used = f" · {restarts} restart{'s' if restarts != 1 else ''}" if restarts else ""
    if cause is not None:
        return f"{where}{cause.error_type}: {cause.error}{used}"
    return f"{where}{failed.error_type}: {failed.error}{used}"


def session_state(
    latest: Checkpoint,
    *,
    busy: bool,
    last_at: float,
    now: float,
    owner: Callable[[], str],
    explain: bool = True,
) -> tuple[str, str]:
    """(state, reason) of a session from its newest record and the entries it carries
    (with ``explain`` False, a failure's reason is left '': the state needs only the
    entries' kinds, the reason decodes them).

    - ``running``: a run started from the page (``busy``), or a newest record that is
      neither ``final`` nor ``halt`` while a live lease holds the session (``owner``,
      asked only then) or within :data:`RUNNING_WINDOW` of it;
    - ``waiting`` / ``idle``: a ``final`` cut, with or without pending requests (its
      ``run_completed`` entry says which; else its runtime record); or a step cut no
      run wrote (a fork from the middle of a run, saved: see ``checkpoints.at_rest``);
    - ``failed`` / ``cancelled``: a ``halt`` cut, whose ``run_failed`` entry gives
      the reason (executor, error, restarts in its superstep) or ``run_cancelled``;
    - ``interrupted``: a newest record that is not an end, nobody holds the session
      and it went quiet: the process running it stopped before the run ended.
    """
    if busy:
        return "running", ""
    if latest.kind is CheckpointKind.FINAL:
        for event in _events(latest.history, frozenset({"run_completed"})):
            if isinstance(event, RunCompletedEvent):
                pending = event.status is RunStatus.IDLE_WITH_PENDING_REQUESTS
                return ("waiting" if pending else "idle"), ""
        body, _ = decode_runtime_safely(latest)
        return ("waiting" if body and body["pending"] else "idle"), ""
    if at_rest(latest) and not cancelled(latest):  # not final: a step cut Session.save wrote
        body, _ = decode_runtime_safely(latest)
        return ("waiting" if body and body["pending"] else "idle"), ""
    if latest.kind is CheckpointKind.HALT:
        if cancelled(latest):
            return "cancelled", "cancelled: the run stopped at a barrier"
        if not explain:
            return "failed", ""
        events = _events(latest.history, _ENDS)
        restarts = sum(isinstance(e, RunRestartedEvent) for e in events)
        for event in reversed(events):
            if isinstance(event, RunFailedEvent):
                causes = [
                    e
                    for e in events
                    if isinstance(e, ExecutorFailedEvent) and e.executor == event.executor
                ]
                return "failed", failure_reason(event, restarts, causes[-1] if causes else None)
        return "failed", "the run halted, and its history does not say why"
    held = owner()
    if held or now - last_at < RUNNING_WINDOW:
        return "running", ""
    return "interrupted", (
        f"stopped after a {latest.kind.value} checkpoint of superstep {latest.superstep} "
        "without ending the run: the process running it stopped"
    )


def _row(
    summary: SessionSummary,
    busy: set[str],
    now: float,
    store: CheckpointStore,
    explain: bool = False,
) -> SessionRow:
    latest = summary.latest
    row = SessionRow(
        summary.session,
        workflow=latest.workflow,
        checkpoints=summary.records,
        first_activity=summary.first_at,
        last_activity=summary.last_at,
        latest=latest.id,
        latest_kind=latest.kind.value,
        superstep=latest.superstep,
    )
    owners: list[str] = []

    def owner() -> str:
        owners.append(lease_owner(store, summary.session))
        return owners[-1]

    try:
        row.state, row.reason = session_state(
            latest,
            busy=summary.session in busy,
            last_at=summary.last_at,
            now=now,
            owner=owner,
            explain=explain,
        )
    except Exception as exc:  # noqa: BLE001 - one damaged session must not hide the rest
        row.state, row.error = "damaged", failure(exc)
    if owners:
        row.owner = owners[0]
    return row


def _rows_by_listing(
    store: CheckpointStore, busy: set[str], now: float, errors: list[str]
) -> list[SessionRow]:
    """Every session read one by one: the slow way, taken when the one read of every
    session failed (a damaged record), so each damaged session is named on its own."""
    try:
        sessions = store.sessions()
    except Exception as exc:  # noqa: BLE001 - a damaged store is shown, not raised
        errors.append(f"listing sessions failed: {failure(exc)}")
        return []
    rows: list[SessionRow] = []
    for sid in sessions:
        try:
            records = store.list(session=sid)
            if not records:
                continue
            times = [c.created_at for c in records]
            summary = SessionSummary(sid, len(records), min(times), max(times), records[-1])
            rows.append(_row(summary, busy, now, store, explain=True))
        except Exception as exc:  # noqa: BLE001 - one damaged lineage must not hide the rest
            row = SessionRow(sid, state="damaged", error=failure(exc))
            errors.append(f"session {sid!r}: {row.error}")
            rows.append(row)
    return rows


def sessions_page(
    store: CheckpointStore,
    busy: set[str],
    *,
    search: str = "",
    state: str = "",
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> SessionsPage:
    """The sessions whose id contains ``search`` (ignoring case) and whose state is
    ``state`` ('' for any), newest activity first, page ``page`` of them; and how many
    sessions are in each state among those the search finds."""
    errors: list[str] = []
    now = time.time()
    by_session: dict[str, SessionSummary] = {}
    try:
        by_session = {s.session: s for s in session_summaries(store)}
        rows = [_row(s, busy, now, store) for s in by_session.values()]
    except Exception as exc:  # noqa: BLE001 - read each session on its own to name the damage
        errors.append(f"reading every session at once failed: {failure(exc)}")
        rows = _rows_by_listing(store, busy, now, errors)
    total = len(rows)
    needle = search.strip().lower()
    if needle:
        rows = [r for r in rows if needle in r.session.lower()]
    counts = dict.fromkeys(STATES, 0)
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    if state:
        rows = [r for r in rows if r.state == state]
    rows.sort(key=lambda r: (r.last_activity, r.session), reverse=True)
    pages = max(1, math.ceil(len(rows) / page_size))
    page = min(max(1, page), pages)
    shown = rows[(page - 1) * page_size : page * page_size]
    shown = [  # reasons are decoded for the rows shown only
        _row(by_session[r.session], busy, now, store, explain=True)
        if r.state == "failed" and r.session in by_session
        else r
        for r in shown
    ]
    for r in shown:
        if not r.owner and r.state != "damaged":
            try:
                r.owner = lease_owner(store, r.session)
            except Exception as exc:  # noqa: BLE001 - shown in the row
                r.error = failure(exc)
    return SessionsPage(shown, total, len(rows), counts, page, pages, errors)
