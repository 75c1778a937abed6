"""A session's history: numbered events stored with their cuts, read back, followed, resumed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import actorflow as af
from actorflow.runtime.supervisor import RECENT, RECENT_BYTES
from actorflow.storage import Checkpoint, CheckpointKind, Lease

WAIT_S = 10.0
FAIL = threading.Event()
"""Set: Worker fails on the next value it handles (and clears it)."""
HOLD = threading.Event()
"""Set: Worker waits for RELEASE before handling (so a run can be cancelled mid-handler)."""
RELEASE = threading.Event()
HELD = threading.Event()
"""Set by Worker once it waits for RELEASE."""


@af.message
@dataclass
class Ruling:
    approved: bool
    note: str


class Start(af.Executor):
    @af.handler
    def on_int(self, n: int, ctx: af.Context[int]) -> None:
        ctx.output(f"start {n}")
        ctx.send(n)


class Worker(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_int(self, n: int, ctx: af.Context[None]) -> None:
        if HOLD.is_set():
            HELD.set()
            RELEASE.wait(WAIT_S)
        if FAIL.is_set():
            FAIL.clear()
            raise ValueError(f"worker refuses {n}")
        self.seen.append(n)
        ctx.output(n * 10)
        if n < 0:
            ctx.request(n, Ruling)

    @af.response_handler
    def on_decision(self, asked: int, answer: Ruling, ctx: af.Context[None]) -> None:
        ctx.output(f"{asked}: {answer.approved} ({answer.note})")


def build(restart: af.RestartPolicy | None = None) -> af.Workflow:
    builder = af.WorkflowBuilder("history", start=Start("start"), restart=restart)
    return builder.add_edge("start", Worker("worker")).build()


@pytest.fixture(autouse=True)
def _clear_flags() -> Iterator[None]:
    yield
    for flag in (FAIL, HOLD, RELEASE, HELD):
        flag.clear()


@pytest.fixture(params=["memory", "file", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[af.CheckpointStore]:
    """A fresh store of each built-in kind (PostgreSQL runs the same entries in the kit)."""
    kind = request.param
    opened: af.CheckpointStore
    if kind == "memory":
        opened = af.MemoryStore()
    elif kind == "file":
        opened = af.FileStore(tmp_path / "store")
    else:
        opened = af.SQLiteStore(tmp_path / "runs.db")
    yield opened
    opened.close()


def kinds(events: list[af.Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_runs_history_is_numbered_and_stored_with_its_cuts(store: af.CheckpointStore) -> None:
    """Each history event gets the session's next number; the store holds the same
    entries, each in the cut it belongs to; ``since`` starts the list at a number."""
    with build() as wf, wf.session("s", store=store) as s:
        result = s.run(4)
        live = [e for e in result.events if e.seq is not None]
        history = s.history()
    assert kinds(history) == [
        "RunStartedEvent",
        "OutputEvent",
        "OutputEvent",
        "RunCompletedEvent",
    ]
    assert [e.seq for e in history] == [0, 1, 2, 3]
    assert history == live, "the run's own events carry the same numbers"
    started = history[0]
    assert isinstance(started, af.RunStartedEvent) and started.input == 4
    assert [e.value for e in history if isinstance(e, af.OutputEvent)] == ["start 4", 40]
    stored = store.session_history("s")
    assert [e.seq for e in stored] == [0, 1, 2, 3]
    by_kind = {cp.id: cp.kind for cp in store.list(session="s")}
    assert [by_kind[e.checkpoint_id] for e in stored] == [
        CheckpointKind.ENTRY,
        CheckpointKind.STEP,
        CheckpointKind.STEP,
        CheckpointKind.FINAL,
    ]
    with build() as wf, wf.resume(store, session="s") as s:
        assert s.history(since=2) == history[2:]
        s.run(5)
        assert [e.seq for e in s.history()] == list(range(8)), "a resume continues the numbers"


def test_a_failed_run_says_why_in_a_halt_cut(store: af.CheckpointStore) -> None:
    """A run that fails for good leaves a ``halt`` cut whose entries name the executor,
    the error and where it was raised, the rolled-back superstep and the failure; the
    session resumes from it with the failed message in flight again."""
    with build() as wf:
        with wf.session("s", store=store) as s:
            s.run(1)
            FAIL.set()
            with pytest.raises(af.ExecutorFailed):
                s.run(2)
            history = s.history(since=4)
        assert kinds(history) == [
            "RunStartedEvent",
            "OutputEvent",
            "ExecutorFailedEvent",
            "SuperstepRolledBackEvent",
            "RunFailedEvent",
        ]
        failed, rolled, ended = history[2], history[3], history[4]
        assert isinstance(failed, af.ExecutorFailedEvent)
        assert failed.executor == "worker" and failed.error_type == "ValueError"
        assert "worker refuses 2" in failed.error
        assert 'raise ValueError(f"worker refuses {n}")' in failed.traceback
        assert "_runner.py" not in failed.traceback, "only the handler's own frames"
        assert isinstance(rolled, af.SuperstepRolledBackEvent)
        assert rolled.executors == ("worker",) and "worker refuses 2" in rolled.reason
        assert isinstance(ended, af.RunFailedEvent) and ended.executor == "worker"
        latest = store.latest(session="s")
        assert latest is not None and latest.kind is CheckpointKind.HALT
        assert [e.seq for e in latest.history] == [6, 7, 8]
        with wf.resume(store, session="s") as s:
            assert s.run().outputs == [20], "the failed message runs again from the halt cut"
            assert kinds(s.history(since=9)) == [
                "RunStartedEvent",
                "OutputEvent",
                "RunCompletedEvent",
            ]


def test_restarts_and_their_backoff_are_recorded() -> None:
    """A failure the restart policy covers is recorded with the restart and its backoff."""
    policy = af.RestartPolicy(max_restarts=3, backoff=af.Backoff(initial=0.01, multiplier=1.0))
    with build(restart=policy) as wf, wf.session("s") as s:
        FAIL.set()
        assert s.run(3).outputs == ["start 3", 30]
        history = s.history()
    assert kinds(history) == [
        "RunStartedEvent",
        "OutputEvent",
        "ExecutorFailedEvent",
        "RunRestartedEvent",
        "OutputEvent",
        "RunCompletedEvent",
    ]
    restarted = history[3]
    assert isinstance(restarted, af.RunRestartedEvent)
    assert restarted.executor == "worker" and restarted.attempt == 1
    assert restarted.backoff == pytest.approx(0.01)


def test_requests_and_answers_are_recorded(store: af.CheckpointStore) -> None:
    """A request asked and the answer given are both in the history, values decoded."""
    with build() as wf, wf.session("s", store=store) as s:
        [pending] = s.run(-1).pending_requests
        s.respond({pending.request_id: Ruling(True, "fine")})
        history = s.history()
    asked = [e for e in history if isinstance(e, af.RequestEvent)]
    answered = [e for e in history if isinstance(e, af.RequestAnsweredEvent)]
    assert [(e.request_id, e.value, e.response_type) for e in asked] == [
        (pending.request_id, -1, pending.response_type)
    ]
    assert [(e.request_id, e.executor, e.value) for e in answered] == [
        (pending.request_id, "worker", Ruling(True, "fine"))
    ]
    completed = [e for e in history if isinstance(e, af.RunCompletedEvent)]
    assert [e.status for e in completed] == [
        af.RunStatus.IDLE_WITH_PENDING_REQUESTS,
        af.RunStatus.COMPLETED,
    ]


def test_a_cancelled_run_is_recorded_in_a_halt_cut(tmp_path: Path) -> None:
    """cancel() while a handler is stuck: the handler is abandoned, its superstep rolled
    back, and the run's end is in the history and in a halt cut."""
    store = af.SQLiteStore(tmp_path / "runs.db")
    with build() as wf, wf.session("s", store=store) as s:
        HOLD.set()
        for event in s.stream(7):
            if isinstance(event, af.ExecutorInvokedEvent) and event.executor == "worker":
                s.cancel()
        RELEASE.set()  # the abandoned handler may finish now
        history = s.history()
    assert kinds(history)[-2:] == ["SuperstepRolledBackEvent", "RunCancelledEvent"]
    latest = store.latest(session="s")
    assert latest is not None and latest.kind is CheckpointKind.HALT
    assert latest.history[-1].kind == "run_cancelled"
    store.close()


def test_follow_resumes_with_nothing_missed_or_repeated() -> None:
    """A follower that stops after a few events and follows again from the last number
    it saw plus one gets every event exactly once, in order."""
    with build() as wf, wf.session("s") as s:
        done = threading.Event()

        def runs() -> None:
            for n in range(20):
                s.run(n)
            done.set()

        runner = threading.Thread(target=runs)
        runner.start()
        seen: list[af.Event] = []
        follower = s.follow(forever=True)
        for event in follower:
            seen.append(event)
            if len(seen) == 7:
                break
        follower.close()
        for event in s.follow(since=seen[-1].seq + 1, forever=True):  # type: ignore[operator]
            seen.append(event)
            if isinstance(event, af.RunCompletedEvent) and event.seq == 79:
                break
        runner.join(WAIT_S)
        assert done.is_set()
        assert [e.seq for e in seen] == list(range(80))
        assert seen == s.history()


def test_follow_of_an_idle_session_ends_after_the_backlog() -> None:
    """Without ``forever``, following an idle session yields its history and ends."""
    with build() as wf, wf.session("s") as s:
        s.run(1)
        assert [e.seq for e in s.follow(since=1)] == [1, 2, 3]


def test_following_a_closed_session_forever_ends_after_the_backlog() -> None:
    """With ``forever``, following a closed session yields its history and ends: no
    run of it will ever add to it."""
    with build() as wf:
        with wf.session("s") as s:
            s.run(1)
        assert [e.seq for e in s.follow(since=1, forever=True)] == [1, 2, 3]

        async def follow() -> list[int | None]:
            return [e.seq async for e in s.afollow(since=2, forever=True)]

        assert asyncio.run(asyncio.wait_for(follow(), WAIT_S)) == [2, 3]


def test_afollow_and_astream_since() -> None:
    """The async twins: afollow yields the history then ends for an idle session;
    astream(since=) replays the history before the run's own events."""

    async def main() -> tuple[list[int | None], list[int | None]]:
        with build() as wf:
            async with wf.session("s") as s:
                await s.arun(1)
                followed = [e.seq async for e in s.afollow(since=2)]
                streamed = [e.seq async for e in s.astream(2, since=3)]
        return followed, streamed

    followed, streamed = asyncio.run(main())
    assert followed == [2, 3]
    assert [seq for seq in streamed if seq is not None] == [3, 4, 5, 6, 7]


def test_stream_since_replays_the_history_first(store: af.CheckpointStore) -> None:
    """stream(since=) yields the stored history from that number, then the new run."""
    with build() as wf:
        with wf.session("s", store=store) as s:
            s.run(1)
        with wf.resume(store, session="s") as s:
            events = list(s.stream(2, since=2))
    numbered = [e for e in events if e.seq is not None]
    assert [e.seq for e in numbered] == [2, 3, 4, 5, 6, 7]
    assert kinds(numbered)[:2] == ["OutputEvent", "RunCompletedEvent"]


def test_time_travel_and_fresh_lineages_never_repeat_a_number(store: af.CheckpointStore) -> None:
    """Resuming an older checkpoint of the session, or starting a fresh lineage beside it,
    numbers its events after every number the session's history holds."""
    with build() as wf:
        with wf.session("s", store=store) as s:
            s.run(1)
            s.run(2)
        first_final = next(cp for cp in store.list(session="s") if cp.kind is CheckpointKind.FINAL)
        with wf.resume(store, session="s", checkpoint_id=first_final.id) as s:
            s.run(3)
        with wf.session("s", store=store, if_exists="fresh") as s:
            s.run(4)
    seqs = [e.seq for e in store.session_history("s")]
    assert seqs == list(range(16))


def test_history_of_a_session_without_a_store_is_kept_in_memory() -> None:
    """Without a store the session keeps its history in memory, reset included."""
    with build() as wf, wf.session() as s:
        s.run(1)
        s.reset()
        s.run(2)
        assert [e.seq for e in s.history()] == list(range(8))
        assert kinds(s.history(since=4))[0] == "RunStartedEvent"


def test_since_must_be_a_number() -> None:
    """A bad ``since`` is refused with the reason."""
    with build() as wf, wf.session() as s:
        with pytest.raises(ValueError, match="since="):
            s.history(since=-1)
        with pytest.raises(ValueError, match="since="):
            s.follow(since="3")  # type: ignore[arg-type]


class RefusingFinal(af.MemoryStore):
    """Refuses the first ``final`` cut, as a full disk would."""

    refused = False

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        if checkpoint.kind == "final" and not self.refused:
            self.refused = True
            raise OSError("disk full (simulated)")
        super().save(checkpoint, blobs, lease=lease)


def test_a_run_whose_final_cut_fails_is_recorded_as_failed_not_completed() -> None:
    """The completion is numbered before its cut is written; when that write fails the
    run fails instead, and the history says so without a gap in its numbers."""
    store = RefusingFinal()
    with build() as wf, wf.session("s", store=store) as s:
        with pytest.raises(af.CheckpointWriteFailed):
            s.run(1)
        s.run(2)
        history = s.history()
    assert [e.seq for e in history] == list(range(len(history)))
    assert kinds(history) == [
        "RunStartedEvent",
        "OutputEvent",
        "OutputEvent",
        "RunFailedEvent",
        "RunStartedEvent",
        "OutputEvent",
        "OutputEvent",
        "RunCompletedEvent",
    ]
    assert [e.seq for e in store.session_history("s")] == list(range(8))


# --- what a session keeps in memory ------------------------------------------------


class Blob(af.Executor):
    """Outputs ``n`` MiB of text."""

    @af.handler
    def on_int(self, n: int, ctx: af.Context[None]) -> None:
        ctx.output("x" * (n << 20))


def held(session: af.Session) -> list[int | None]:
    """The numbers of the history events the session holds in memory."""
    return [e.seq for e in session._history.log.recent(0)]


def test_without_a_store_the_latest_events_are_kept_up_to_the_bound() -> None:
    """A session without a store keeps its last RECENT history events: the oldest go
    first, and what it keeps has no gap."""
    runs = RECENT // 4 + 10  # four history events a run
    with build() as wf, wf.session() as s:
        for n in range(runs):
            s.run(n)
        history = s.history()
        assert held(s) == [e.seq for e in history]
    total = runs * 4
    assert [e.seq for e in history] == list(range(total - RECENT, total))
    assert isinstance(history[-1], af.RunCompletedEvent)


def test_without_a_store_large_values_bound_what_is_kept() -> None:
    """Outputs of 1 MiB each: the events kept hold at most RECENT_BYTES of values, the
    newest ones."""
    with af.WorkflowBuilder("blobs", start=Blob("blob")).build() as wf, wf.session() as s:
        for _ in range(20):
            s.run(1)
        outputs = [e for e in s.history() if isinstance(e, af.OutputEvent)]
    assert 1 <= len(outputs) <= RECENT_BYTES >> 20
    assert outputs[-1].seq == 20 * 3 - 2  # the last run's output (three events a run)
    assert len(outputs[-1].value) == 1 << 20


def test_with_a_store_memory_keeps_only_what_is_not_stored(store: af.CheckpointStore) -> None:
    """Once a run's cuts are stored, the session holds none of its events in memory; the
    history is read from the store, whole, and a stream resumes from it."""
    with build() as wf, wf.session("s", store=store) as s:
        for n in range(5):
            s.run(n)
        assert held(s) == []
        assert [e.seq for e in s.history()] == list(range(20))
        events = list(s.stream(9, since=18))
    assert [e.seq for e in events if e.seq is not None] == [18, 19, 20, 21, 22, 23]


def test_reads_during_runs_see_the_whole_history_while_cuts_are_stored_behind(
    tmp_path: Path,
) -> None:
    """With background writes, a cut is stored (and its events dropped from memory) while
    a reader reads: every read is still the whole history up to some number, no gap."""
    policy = af.CheckpointPolicy(durability=af.Durability.ASYNC)
    store = af.SQLiteStore(tmp_path / "runs.db")
    reads: list[list[int | None]] = []
    with build() as wf, wf.session("s", store=store, checkpoint=policy) as s:
        done = threading.Event()

        def reader() -> None:
            while not done.is_set():
                reads.append([e.seq for e in s.history()])

        watching = threading.Thread(target=reader)
        watching.start()
        try:
            for n in range(40):
                s.run(n)
        finally:
            done.set()
            watching.join(WAIT_S)
        assert held(s) == []
        assert [e.seq for e in s.history()] == list(range(160))
    store.close()
    assert len(reads) > 10
    for seqs in reads:
        assert seqs == list(range(len(seqs))), "a read skipped events"


class Chatty(af.Executor):
    """Outputs ``n`` numbers, then passes ``n`` on."""

    @af.handler
    def on_int(self, n: int, ctx: af.Context[int]) -> None:
        for i in range(n):
            ctx.output(i)
        ctx.send(n)


def test_with_a_store_events_between_cuts_are_all_held_until_stored(tmp_path: Path) -> None:
    """A run that checkpoints only when idle and outputs more than a session without a
    store would keep: read while it is held in a handler, the history has every event
    (none is stored yet, and none is dropped from memory)."""
    builder = af.WorkflowBuilder("chatty", start=Chatty("chatty"))
    builder.add_edge("chatty", Worker("worker"))
    store = af.SQLiteStore(tmp_path / "runs.db")
    policy = af.CheckpointPolicy(on_idle_only=True)
    with builder.build() as wf, wf.session("s", store=store, checkpoint=policy) as s:
        HOLD.set()
        running = threading.Thread(target=s.run, args=(RECENT + 50,))
        running.start()
        try:
            assert HELD.wait(WAIT_S), "the worker never started"
            during = s.history()
        finally:
            RELEASE.set()
            running.join(WAIT_S)
        after = s.history()
        assert held(s) == []
    store.close()
    assert [e.seq for e in during] == list(range(RECENT + 51)), "the start and every output"
    assert [e.seq for e in after] == list(range(RECENT + 53))
