"""Effects with a journal (``ctx.effect``) and transactional writes (``ctx.sql``).

Each test is a row of the guarantee table in ``docs/effects.md``: what happens once,
what happens at least once with a stable key, and what a fork does.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.actors import decode
from actorflow.testing import replay
from tests.support import outbox, pg
from tests.support.effects import journaled_results

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


@af.message
@dataclass
class Receipt:
    order: int
    tags: list[str]


class Calls:
    """The outside world of an in-process test: every call, in order."""

    def __init__(self) -> None:
        self.made: list[Any] = []

    def __call__(self, order: int) -> Receipt:
        self.made.append(order)
        return Receipt(order, ["paid"])


CALLS = Calls()
FAILURES: list[str] = []
"""Executors that should fail once, right after their effect (taken as they fail)."""


@pytest.fixture(autouse=True)
def fresh_world() -> Iterator[None]:
    CALLS.made.clear()
    FAILURES.clear()
    yield
    FAILURES.clear()


class Pay(af.Executor):
    def __init__(self, executor_id: str) -> None:
        super().__init__(executor_id)
        self.keys: list[str] = []

    @af.handler
    def on_order(self, order: int, ctx: af.Context[int]) -> None:
        key = ctx.effect_key("charge")
        receipt = ctx.effect(CALLS, order, key="charge")
        receipt.tags.append("mine")  # a copy: the journal keeps what the call returned
        self.keys.append(key)
        if self.id in FAILURES:
            FAILURES.remove(self.id)
            raise RuntimeError("the connection dropped after the charge")
        ctx.output([receipt.order, receipt.tags, key])
        ctx.send(order)


class Sink(af.Executor):
    @af.handler
    def on_order(self, order: int, ctx: af.Context[None]) -> None:
        if self.id in FAILURES:
            FAILURES.remove(self.id)
            raise RuntimeError("the sink failed")


def _payments(restart: af.RestartPolicy | None = None) -> af.Workflow:
    pay = Pay("pay")
    builder = af.WorkflowBuilder("pay", start=pay, restart=restart)
    return builder.add_edge(pay, Sink("sink")).build()


def test_a_restarted_handler_gets_the_recorded_result_without_calling_again() -> None:
    FAILURES.append("pay")
    with _payments(af.RestartPolicy(max_restarts=1)) as wf:
        result = wf.run(7)
    assert CALLS.made == [7]
    [(order, tags, key)] = result.outputs
    assert (order, tags) == (7, ["paid", "mine"])  # each attempt got its own decoded copy
    assert key.startswith("af-")


def test_a_rolled_back_superstep_run_again_in_the_process_does_not_call_again(
    tmp_path: Path,
) -> None:
    with _payments() as wf, wf.session("s", store=af.SQLiteStore(tmp_path / "s.db")) as s:
        s.run(1)
        FAILURES.append("pay")  # superstep 1 of the next run fails: rolled back
        with pytest.raises(af.ExecutorFailed):
            s.run(2)
        result = s.run()  # run again: the recorded result, no second call
    assert CALLS.made == [1, 2]
    assert [o[0] for o in result.outputs] == [2]


def test_the_checkpoint_that_commits_a_superstep_records_its_effects(tmp_path: Path) -> None:
    store = af.SQLiteStore(tmp_path / "s.db")
    with _payments() as wf, wf.session("s", store=store) as s:
        s.run(3)
    [step_one] = [cp for cp in store.list(session="s") if cp.superstep == 1]
    [(executor, superstep, name, n, result)] = journaled_results(step_one)
    assert (executor, superstep, name, n) == ("pay", 1, "charge", 0)
    assert decode(result) == Receipt(3, ["paid"])
    store.close()


def test_keys_are_stable_per_attempt_and_unique_per_session_superstep_and_fork(
    tmp_path: Path,
) -> None:
    store = af.SQLiteStore(tmp_path / "s.db")
    with _payments(af.RestartPolicy(max_restarts=1)) as wf:
        with wf.session("a", store=store) as a:
            FAILURES.append("pay")
            first = a.run(1).outputs[0][2]
            second = a.run(1).outputs[0][2]
            entry = next(cp for cp in store.list(session="a") if cp.kind.value == "entry")
        with wf.session("b", store=store) as b:
            other_session = b.run(1).outputs[0][2]
        with wf.resume(store, session="a", checkpoint_id=entry.id) as fork:
            forked = fork.run().outputs[0][2]  # a new lineage: a new key, called again
    assert len({first, second, other_session, forked}) == 4
    assert CALLS.made == [1, 1, 1, 1]
    store.close()


def test_a_session_id_used_anew_gets_keys_of_its_own(tmp_path: Path) -> None:
    """Keys of one use of a session id are never another's: after the session is
    deleted, in another store, without a store. (A resume keeps its keys: see
    test_a_session_resumed_after_a_failure_gets_the_effect_result_without_calling_again.)"""
    store = af.SQLiteStore(tmp_path / "s.db")
    keys = []
    with _payments() as wf:
        with wf.session("a", store=store) as a:
            keys.append(a.run(1).outputs[0][2])
        af.delete_session(store, "a")
        with wf.session("a", store=store) as anew:
            keys.append(anew.run(1).outputs[0][2])
        with wf.session("a", store=af.MemoryStore()) as elsewhere:
            keys.append(elsewhere.run(1).outputs[0][2])
        for _ in range(2):
            with wf.session("a") as storeless:
                keys.append(storeless.run(1).outputs[0][2])
    assert len(set(keys)) == len(keys), keys
    store.close()


def test_a_reset_starts_a_lineage_whose_effects_are_called_again_with_new_keys(
    tmp_path: Path,
) -> None:
    store = af.SQLiteStore(tmp_path / "s.db")
    with _payments() as wf, wf.session("s", store=store) as s:
        before = s.run(4).outputs[0][2]
        s.reset()  # superstep 1 again, in a new lineage
        after = s.run(4).outputs[0][2]
    assert before != after
    assert CALLS.made == [4, 4]
    store.close()


def test_an_unencodable_result_names_the_executor_and_the_effect() -> None:
    class Leaky(af.Executor):
        @af.handler
        def on_text(self, text: str, ctx: af.Context[None]) -> None:
            ctx.effect(object, key="socket")

    workflow = af.WorkflowBuilder("leaky", start=Leaky("leaky")).build()
    with workflow as wf, pytest.raises(af.ExecutorFailed) as failed:
        wf.run("x")
    cause = failed.value.__cause__
    assert isinstance(cause, af.EncodeError)
    assert "'leaky'" in str(cause) and "'socket'" in str(cause)


@pytest.mark.parametrize("coroutine", [True, False], ids=["async fn", "plain fn"])
def test_an_async_effect_is_journaled_too(coroutine: bool) -> None:
    """await ctx.aeffect(fn): called once, its result recorded, whether ``fn`` is a
    coroutine function or a plain one (whose result is recorded as it is)."""
    seen: list[int] = []

    def double(n: int) -> int:
        seen.append(n)
        return n * 2

    async def fetch(n: int) -> int:
        return double(n)

    effect: Any = fetch if coroutine else double

    class Fetch(af.Executor):
        @af.handler
        async def on_n(self, n: int, ctx: af.Context[None]) -> None:
            doubled: int = await ctx.aeffect(effect, n)
            if len(seen) == 1 and not FAILURES:
                FAILURES.append("done")
                raise RuntimeError("once")
            ctx.output(doubled)

    builder = af.WorkflowBuilder("fetch", start=Fetch("f"), restart=af.RestartPolicy())
    with builder.build() as wf:
        assert wf.run(4).outputs == [8]
    assert seen == [4]


async def charge_slowly(order: int, delay: float) -> str:
    """Answers after ``delay``: calls made at once end in another order than they began."""
    CALLS.made.append(order)
    await asyncio.sleep(delay)
    return f"receipt-{order}"


@pytest.mark.parametrize("fails", [False, True])
def test_effects_made_at_once_each_get_their_own_result_and_are_called_once(
    fails: bool,
) -> None:
    """``asyncio.gather`` of three effects of one name: each call takes its occurrence
    as it starts, so each gets its own result (the slowest began first), a restart
    hands each its own recorded result, and a replay finds them in the same places."""

    class Batch(af.Executor):
        __actorflow_name__ = "tests.effects.Batch"

        @af.handler
        async def on_orders(self, orders: list[int], ctx: af.Context[None]) -> None:
            delays = [0.06, 0.0, 0.03]
            receipts = await asyncio.gather(
                *(
                    ctx.aeffect(charge_slowly, o, d, key="charge")
                    for o, d in zip(orders, delays, strict=True)
                )
            )
            if FAILURES:
                FAILURES.clear()
                raise RuntimeError("the connection dropped after the charges")
            ctx.output(list(receipts))

    def build() -> af.Workflow:
        return af.WorkflowBuilder(
            "batch", start=Batch("batch"), restart=af.RestartPolicy(max_restarts=1)
        ).build()

    FAILURES[:] = ["batch"] if fails else []
    store = af.MemoryStore()
    with build() as wf, wf.session("s", store=store) as s:
        assert s.run([1, 2, 3]).outputs == [["receipt-1", "receipt-2", "receipt-3"]]
    assert sorted(CALLS.made) == [1, 2, 3]  # each once, the restart's included
    with build() as wf:
        report = replay(store, wf)
    assert report.identical, str(report)


def test_a_context_used_after_its_handler_returned_refuses_instead_of_losing_it() -> None:
    """A thread the handler left behind: its ctx.output, ctx.send and ctx.effect would go
    into a superstep that has ended. Each raises ContextExpired, and nothing is called."""
    late: list[BaseException] = []
    started: list[threading.Thread] = []
    handler_returned = threading.Event()

    def later(ctx: af.Context[Any]) -> None:
        handler_returned.wait(10)
        for act in (
            lambda: ctx.output("late"),
            lambda: ctx.send(1),
            lambda: ctx.effect(CALLS, 9),
            lambda: ctx.effect_key("charge"),
        ):
            try:
                act()
            except af.ContextExpired as exc:
                late.append(exc)

    class Leaky(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[None]) -> None:
            thread = threading.Thread(target=later, args=(ctx,))
            started.append(thread)
            thread.start()
            ctx.output(n)

    with af.WorkflowBuilder("leaky", start=Leaky("leaky")).build() as wf:
        assert wf.run(1).outputs == [1]
        handler_returned.set()
        started[0].join(10)
    assert len(late) == 4 and CALLS.made == []
    assert "executor 'leaky' called ctx.output in superstep 1 after its handler returned" in str(
        late[0]
    )


def test_effect_of_a_coroutine_function_says_to_await_aeffect() -> None:
    """ctx.effect(async_fn) makes a coroutine it cannot record: the error says to
    await ctx.aeffect, and the coroutine is closed unrun (nothing called, no warning).
    A restart would make the same mistake, so none is made."""
    seen: list[int] = []

    async def fetch(n: int) -> int:
        seen.append(n)
        return n

    class Fetch(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[None]) -> None:
            ctx.output(ctx.effect(fetch, n))  # the mistake tested: a coroutine function

    policy = af.RestartPolicy(backoff=af.Backoff(initial=60.0, maximum=60.0))  # never waited
    with (
        af.WorkflowBuilder("fetch", start=Fetch("f"), restart=policy).build() as wf,
        pytest.raises(af.ExecutorFailed) as failed,
    ):
        wf.run(4)
    assert isinstance(failed.value.__cause__, af.ResultNotRecordable)
    assert "await ctx.aeffect(fetch" in str(failed.value.__cause__)
    assert seen == []


# --- transactional writes ----------------------------------------------------------


class Ledger(af.Executor):
    """Inserts one row per order through ctx.sql; fails once after it when told to."""

    table = "ledger"

    @af.handler
    def on_order(self, order: int, ctx: af.Context[None]) -> None:
        mark = "?" if ctx.sql_dialect == "sqlite" else "%s"
        ctx.sql(f"INSERT INTO {self.table} VALUES ({mark})", [order])
        if self.id in FAILURES:
            FAILURES.remove(self.id)
            raise RuntimeError("the handler failed after its write")
        ctx.output(order)


def _ledger_rows(durable: pg.Durable) -> list[int]:
    if durable.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(durable.where) as db:
            return sorted(r[0] for r in db.execute("SELECT n FROM ledger"))
    import psycopg

    with psycopg.connect(durable.where, autocommit=True) as db:
        return sorted(r[0] for r in db.execute(f"SELECT n FROM {durable.schema}.ledger"))


def _ledger_table(durable: pg.Durable) -> str:
    if durable.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(durable.where) as db:
            db.execute("CREATE TABLE ledger (n INTEGER)")
        return "ledger"
    import psycopg

    with psycopg.connect(durable.where, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA IF NOT EXISTS {durable.schema}")
        db.execute(f"CREATE TABLE {durable.schema}.ledger (n BIGINT)")
    return f"{durable.schema}.ledger"


def _ledger(table: str, checkpoint: af.CheckpointPolicy | None = None) -> af.Workflow:
    ledger = type("Ledger", (Ledger,), {"table": table})
    return af.WorkflowBuilder("ledger", start=ledger("ledger")).build()


def test_statements_commit_with_the_superstep_and_a_failed_one_commits_nothing(
    durable: pg.Durable,
) -> None:
    table = _ledger_table(durable)
    store = durable.open()
    with _ledger(table) as wf, wf.session("s", store=store) as s:
        assert s.run(1).outputs == [1]
        assert _ledger_rows(durable) == [1]
        FAILURES.append("ledger")
        with pytest.raises(af.ExecutorFailed):
            s.run(13)  # the handler queued its row, then failed: nothing of it commits
        assert _ledger_rows(durable) == [1]
        assert s.run(2).outputs == [13, 2]  # the rolled-back superstep runs again first
    assert _ledger_rows(durable) == [1, 2, 13]
    store.close()


def test_a_statement_the_database_refuses_stops_the_run_and_commits_nothing(
    durable: pg.Durable,
) -> None:
    _ledger_table(durable)
    store = durable.open()
    with _ledger("no_such_table") as wf, wf.session("s", store=store) as s:
        with pytest.raises(af.CheckpointWriteFailed) as failed:
            s.run(5)
        last = s.last_checkpoint_id
    cause = failed.value.__cause__
    assert isinstance(cause, af.StatementFailed)
    assert (cause.executor, cause.superstep) == ("ledger", 1)
    assert last is not None and store.load(last).superstep == 0  # only the entry cut
    assert _ledger_rows(durable) == []
    store.close()


def test_statements_of_supersteps_between_cuts_commit_with_the_next_cut(tmp_path: Path) -> None:
    durable = pg.Durable("sqlite", str(tmp_path / "s.db"))
    table = _ledger_table(durable)

    class Count(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[int]) -> None:
            ctx.sql(f"INSERT INTO {table} VALUES (?)", [n])
            if n < 5:
                ctx.send(n + 1)

    count = Count("count")
    workflow = af.WorkflowBuilder("count", start=count).add_edge(count, count).build()
    store = durable.open()
    policy = af.CheckpointPolicy(every=3)
    with workflow as wf, wf.session("s", store=store, checkpoint=policy) as s:
        s.run(1)
    assert _ledger_rows(durable) == [1, 2, 3, 4, 5]
    cuts = [cp.superstep for cp in store.list(session="s")]
    assert cuts == [0, 3, 5]
    store.close()


@pytest.mark.parametrize(
    "statement",
    [
        "BEGIN",
        "commit",
        "  SAVEPOINT x",
        "ATTACH DATABASE 'x' AS y",
        "INSERT INTO t VALUES (1); DROP TABLE t",
        "select * from t",
        "  VALUES (1)",
    ],
)
def test_transaction_control_and_several_statements_are_refused(
    statement: str, tmp_path: Path
) -> None:
    class Bad(af.Executor):
        @af.handler
        def on_text(self, text: str, ctx: af.Context[None]) -> None:
            ctx.sql(statement)

    store = af.SQLiteStore(tmp_path / "s.db")
    workflow = af.WorkflowBuilder("bad", start=Bad("bad")).build()
    raised = pytest.raises(af.ExecutorFailed)
    with raised as failed, workflow as wf, wf.session("s", store=store) as s:
        s.run("x")
    assert isinstance(failed.value.__cause__, af.StatementRefused)
    assert "'bad'" in str(failed.value.__cause__)
    store.close()


@pytest.mark.parametrize(
    "params", [[object()], [1 << 64], [{"a": 1}], [[1, 2]]], ids=["object", "int", "dict", "list"]
)
def test_parameters_sql_cannot_bind_are_refused(params: list[Any], tmp_path: Path) -> None:
    class Bad(af.Executor):
        @af.handler
        def on_text(self, text: str, ctx: af.Context[None]) -> None:
            ctx.sql("INSERT INTO t VALUES (?)", params)

    store = af.SQLiteStore(tmp_path / "s.db")
    workflow = af.WorkflowBuilder("bad", start=Bad("bad")).build()
    raised = pytest.raises(af.ExecutorFailed)
    with raised as failed, workflow as wf, wf.session("s", store=store) as s:
        s.run("x")
    assert isinstance(failed.value.__cause__, af.StatementRefused)
    store.close()


@pytest.mark.parametrize("kind", ["none", "memory", "file", "encrypted"])
def test_stores_that_commit_no_statements_refuse_ctx_sql(kind: str, tmp_path: Path) -> None:
    seen: list[str | None] = []

    class Writer(af.Executor):
        @af.handler
        def on_text(self, text: str, ctx: af.Context[None]) -> None:
            seen.append(ctx.sql_dialect)
            ctx.sql("INSERT INTO t VALUES (1)")

    store: af.CheckpointStore | None = None
    if kind == "memory":
        store = af.MemoryStore()
    elif kind == "file":
        store = af.FileStore(tmp_path / "f")
    elif kind == "encrypted":
        pytest.importorskip("cryptography")
        inner = af.SQLiteStore(tmp_path / "e.db")
        store = af.storage.EncryptedStore(inner, keys={"k1": os.urandom(32)}, close_inner=True)
    workflow = af.WorkflowBuilder("w", start=Writer("writer")).build()
    raised = pytest.raises(af.ExecutorFailed)
    with raised as failed, workflow as wf, wf.session("s", store=store) as s:
        s.run("x")
    assert seen == [None]
    assert isinstance(failed.value.__cause__, af.StatementRefused)
    assert "SQLiteStore and PostgresStore" in str(failed.value.__cause__)


def test_ctx_sql_inside_a_sub_workflow_is_refused_saying_why(tmp_path: Path) -> None:
    """The parent session's store commits statements; an inner executor's does not (it
    is private to one delivery): the refusal names that, not only the store."""

    class Writer(af.Executor):
        @af.handler
        def on_text(self, text: str, ctx: af.Context[None]) -> None:
            ctx.sql("INSERT INTO t VALUES (?)", [text])

    inner = af.WorkflowBuilder("inner", start=Writer("writer")).build()
    outer = af.WorkflowBuilder("outer", start=af.WorkflowExecutor(inner, "sub")).build()
    store = af.SQLiteStore(tmp_path / "s.db")
    raised = pytest.raises(af.ExecutorFailed)
    with raised as failed, store, inner, outer as wf, wf.session("s", store=store) as s:
        s.run("x")
    assert "inside a sub-workflow" in str(failed.value), failed.value


# --- crashes -----------------------------------------------------------------------


def _child(config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tests.support.outbox", json.dumps(config)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.mark.parametrize("where", ["after_call", "next_step"])
def test_a_killed_process_repeats_only_the_call_in_flight_and_writes_each_row_once(
    where: str, durable: pg.Durable, tmp_path: Path
) -> None:
    log = str(tmp_path / "calls.jsonl")
    db = [durable.kind, durable.where, durable.schema]
    config = {"store": durable.source(), "session": "s", "log": log, "db": db}
    killed = _child({**config, "orders": [1, 2, 3], "kill": [2, where]})
    assert killed.returncode == -9, killed.stderr
    finished = _child({**config, "orders": [3], "resume": True})
    assert finished.returncode == 0, finished.stderr
    made = outbox.calls(log)
    orders = [c["order"] for c in made]
    if where == "after_call":  # in flight: called again, with the same key
        assert orders == [1, 2, 2, 3]
        assert made[1]["key"] == made[2]["key"]
    else:  # its superstep committed: the recorded result, never called again
        assert orders == [1, 2, 3]
    assert outbox.rows(*db) == [1, 2, 3]


def test_a_finished_part_persisted_before_a_kill_is_not_run_again_and_commits_once(
    tmp_path: Path,
) -> None:
    """A crash mid-superstep: the finished executor's part (its effect's result and its
    statement) comes from the partial record; only the unfinished executor runs again."""
    db, log = str(tmp_path / "s.db"), str(tmp_path / "calls.log")
    argv = [sys.executable, "-m", "tests.support.partial_child", db, log]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = {"cwd": ROOT, "env": env, "capture_output": True, "text": True, "timeout": 90}
    killed = subprocess.run([*argv, "first"], check=False, **run)  # type: ignore[call-overload]
    assert killed.returncode == -9, killed.stderr
    resumed = subprocess.run([*argv, "resume"], check=False, **run)  # type: ignore[call-overload]
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "[7]"
    assert Path(log).read_text().split() == ["7"]  # the effect ran once, in the killed process
    import sqlite3

    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT * FROM ledger").fetchall() == [(7, "booked-7")]


class Inner(af.Executor):
    @af.handler
    def on_order(self, order: int, ctx: af.Context[None]) -> None:
        receipt = ctx.effect(CALLS, order, key="charge")
        if self.id in FAILURES:
            FAILURES.remove(self.id)
            raise RuntimeError("the inner run failed after its charge")
        ctx.output([receipt.order, ctx.effect_key("after")])


def _nested(restart: af.RestartPolicy | None = None) -> tuple[af.Workflow, af.Workflow]:
    """(the parent, its sub-workflow's inner workflow): the caller closes both."""
    inner = af.WorkflowBuilder("inner", start=Inner("inner")).build()
    sub = af.WorkflowExecutor(inner, "sub", outputs="output")

    class Forward(af.Executor):
        @af.handler
        def on_order(self, order: int, ctx: af.Context[int]) -> None:
            ctx.send(order)

    start = Forward("start")
    builder = af.WorkflowBuilder("nested", start=start, restart=restart)
    return builder.add_edge(start, sub).build(), inner


def test_an_inner_effect_of_a_failed_sub_workflow_is_not_called_again(tmp_path: Path) -> None:
    """The inner run fails after its effect: the parent's restart, and a resume of the
    parent elsewhere after it failed for good, are handed the result."""
    parent, inner = _nested(af.RestartPolicy(max_restarts=1))
    FAILURES.append("inner")
    with parent as wf, inner:
        [[order, _key]] = wf.run(6).outputs
    assert order == 6 and CALLS.made == [6]

    path = tmp_path / "s.db"
    FAILURES.append("inner")
    parent, inner = _nested()
    with (
        parent as wf,
        inner,
        af.SQLiteStore(path) as store,
        wf.session("s", store=store) as s,
        pytest.raises(af.ExecutorFailed),
    ):
        s.run(7)
    parent, inner = _nested()
    with parent as wf, inner, af.SQLiteStore(path) as store:
        with wf.resume(store, session="s") as s:
            [[order, _key]] = s.run().outputs
        assert order == 7
        report = replay(store, wf)
    assert CALLS.made == [6, 7]
    assert not report.identical  # the stored run failed in superstep 2; this code does not


class Ship(af.Executor):
    """The inner run's second superstep: ships what ``Inner`` charged (an effect too)."""

    @af.handler
    def on_order(self, order: int, ctx: af.Context[None]) -> None:
        ctx.effect(CALLS, order * 100, key="ship")
        if self.id in FAILURES:
            FAILURES.remove(self.id)
            raise RuntimeError("the inner run failed in its second superstep")
        ctx.output(order)


class ChargeThenSend(af.Executor):
    @af.handler
    def on_order(self, order: int, ctx: af.Context[int]) -> None:
        ctx.effect(CALLS, order, key="charge")
        ctx.send(order)


def _charge_then_ship(restart: af.RestartPolicy | None = None) -> tuple[af.Workflow, af.Workflow]:
    """(the parent, its inner workflow of two supersteps: charge, then ship)."""
    charge = ChargeThenSend("charge")
    inner = af.WorkflowBuilder("inner2", start=charge).add_edge(charge, Ship("ship")).build()
    sub = af.WorkflowExecutor(inner, "sub", outputs="output")
    return af.WorkflowBuilder("parent2", start=sub, restart=restart).build(), inner


def test_the_effects_of_every_inner_superstep_of_a_failed_sub_workflow_are_not_called_again(
    tmp_path: Path,
) -> None:
    """The inner run fails in its second superstep: the first superstep's charge (no
    inner cut holds it: the inner run is checkpointed when idle) and the second's
    shipping are not made again, neither by the parent's restart, nor by running the
    parent's session again, nor by a resume after the parent failed for good."""
    FAILURES.append("ship")
    parent, inner = _charge_then_ship(af.RestartPolicy(max_restarts=1))
    with parent as wf, inner:
        assert wf.run(3).outputs == [3]
    assert CALLS.made == [3, 300]

    CALLS.made.clear()
    path = tmp_path / "s.db"
    parent, inner = _charge_then_ship()
    with parent as wf, inner, af.SQLiteStore(path) as store:
        with wf.session("s", store=store) as s:
            FAILURES.append("ship")
            with pytest.raises(af.ExecutorFailed):
                s.run(4)
            assert s.run().outputs == [4]
            FAILURES.append("ship")
            with pytest.raises(af.ExecutorFailed):
                s.run(5)
        with wf.resume(store, session="s") as s:
            assert s.run().outputs == [5]
    assert CALLS.made == [4, 400, 5, 500]


def test_effects_inside_a_sub_workflow_are_keyed_by_the_parent_session_and_recorded(
    tmp_path: Path,
) -> None:
    store = af.SQLiteStore(tmp_path / "s.db")
    parent, inner = _nested()
    with parent as wf, inner:
        with wf.session("a", store=store) as a:
            [[order_a, key_a]] = a.run(5).outputs
        with wf.session("b", store=store) as b:
            [[order_b, key_b]] = b.run(5).outputs
    assert (order_a, order_b) == (5, 5)
    assert key_a != key_b  # the same sub-workflow id in two parent sessions: two keys
    [cut] = [cp for cp in store.list(session="a") if cp.kind.value == "step" and cp.superstep == 2]
    [(executor, superstep, name, n, _)] = journaled_results(cut)
    assert (executor, superstep, name, n) == ("sub", 2, "sub/inner@1/charge", 0)
    CALLS.made.clear()
    parent, inner = _nested()
    with parent as wf, inner:
        report = replay(store, wf)
    assert report.identical, str(report)
    assert CALLS.made == []  # the replay called nothing inside the sub-workflow either
    store.close()


class EveryThird(af.Executor):
    """Counts down to 0; every third number is charged (an effect), the others are not."""

    @af.handler
    def on_number(self, n: int, ctx: af.Context[int]) -> None:
        if n % 3 == 0:
            ctx.effect(CALLS, n, key="charge")
            if self.id in FAILURES:
                FAILURES.remove(self.id)
                raise RuntimeError("the connection dropped after the charge")
        if n:
            ctx.send(n - 1)


def test_an_effect_after_supersteps_without_any_is_called_once_across_a_restart() -> None:
    # A step whose handlers make no effect has no journal; the first effect after such
    # steps, and its retry after a restart, must still find each other.
    FAILURES.append("loop")
    counter = EveryThird("loop")
    builder = af.WorkflowBuilder("third", start=counter, restart=af.RestartPolicy(max_restarts=1))
    with builder.add_edge(counter, counter).build() as wf:
        result = wf.run(7)
    assert result.status is af.RunStatus.COMPLETED
    assert CALLS.made == [6, 3, 0]  # 6 failed once after its charge: not charged again


def test_effects_from_a_context_made_outside_a_superstep_name_the_executor() -> None:
    from actorflow.runtime._buffer import StepBuffer
    from actorflow.runtime._context import Context

    ctx: af.Context[None] = Context(StepBuffer("by-hand", (), 1), "caller")
    with pytest.raises(RuntimeError, match=r"'by-hand'.*outside a superstep"):
        ctx.effect(CALLS, 1)
    assert CALLS.made == []


# --- a superstep that fails for good -------------------------------------------------


def _fails_for_good(workflow: af.Workflow, path: Path, *given: int) -> None:
    """Run ``given`` (an input; none: resume the session and go on) in session ``s`` of
    the SQLite store at ``path``, and expect the run to fail for good."""
    with workflow as wf, af.SQLiteStore(path) as store:
        opened = wf.session("s", store=store) if given else wf.resume(store, session="s")
        with opened as s, pytest.raises(af.ExecutorFailed):
            s.run(*given)


def test_a_run_that_fails_after_an_effect_records_its_result_with_the_halt(
    tmp_path: Path,
) -> None:
    """The halt cut of a run that failed after an effect holds the effect's result:
    a replay of the same code finds it (and fails the same way: identical), a replay
    of code that no longer fails there gets the result and reports the difference."""
    store = af.SQLiteStore(tmp_path / "s.db")
    FAILURES.append("pay")
    with _payments() as wf, wf.session("s", store=store) as s, pytest.raises(af.ExecutorFailed):
        s.run(5)
    [halt] = [cp for cp in store.list(session="s") if cp.kind.value == "halt"]
    [(executor, superstep, name, n, result)] = journaled_results(halt)
    assert (executor, superstep, name, n) == ("pay", 1, "charge", 0)
    assert decode(result) == Receipt(5, ["paid"])

    FAILURES.append("pay")  # the same code: it fails the same way after the same effect
    with _payments() as wf:
        same = replay(store, wf)
    assert same.identical, str(same)
    with _payments() as wf:  # fixed: superstep 1 completes now
        fixed = replay(store, wf)
    assert not fixed.identical
    [found] = fixed.divergences
    assert (found.kind, found.superstep) == ("end", 0), found
    assert "RuntimeError" in found.detail, found.detail
    assert CALLS.made == [5]  # the replays called nothing
    store.close()


def test_a_session_resumed_after_a_failure_gets_the_effect_result_without_calling_again(
    tmp_path: Path,
) -> None:
    """The failed superstep's results go with the halt, so a resume elsewhere (a new
    workflow: new hosts, nothing remembered) runs it again without calling again."""
    path = tmp_path / "s.db"
    FAILURES.append("pay")
    _fails_for_good(_payments(), path, 6)
    with _payments() as wf, af.SQLiteStore(path) as store, wf.resume(store, session="s") as s:
        result = s.run()
    assert CALLS.made == [6]
    [(order, tags, _key)] = result.outputs
    assert (order, tags) == (6, ["paid", "mine"])


class Fork(af.Executor):
    @af.handler
    def on_order(self, order: int, ctx: af.Context[int]) -> None:
        ctx.send(order)


def _siblings(failing: str) -> tuple[af.WorkflowBuilder, list[str]]:
    """``fork`` sends to ``b`` and ``z``, which both charge; ``failing`` then raises
    while it is in FAILURES. The second item: who charged, in order."""
    charged: list[str] = []

    def charge(who: str) -> str:
        charged.append(who)
        return who

    class Leg(af.Executor):
        @af.handler
        def on_order(self, order: int, ctx: af.Context[None]) -> None:
            ctx.effect(charge, self.id, key="charge")
            if self.id in FAILURES and self.id == failing:
                raise RuntimeError(f"{self.id} failed after its charge")
            ctx.output(self.id)

    fork = Fork("fork")
    builder = af.WorkflowBuilder("siblings", start=fork)
    return builder.add_edge(fork, Leg("b")).add_edge(fork, Leg("z")), charged


@pytest.mark.parametrize("failing", ["b", "z"])
def test_a_failed_superstep_records_the_effects_of_the_executors_that_completed_it(
    failing: str, tmp_path: Path
) -> None:
    """Its sibling completed the superstep that failed: its charge is recorded with the
    halt too, so a resume elsewhere calls neither again, and a replay of the same
    code finds both (whichever of the two sorts first)."""
    builder, charged = _siblings(failing)
    path = tmp_path / "s.db"
    FAILURES.append(failing)
    _fails_for_good(builder.build(), path, 1)
    assert sorted(charged) == ["b", "z"]
    with af.SQLiteStore(path) as store, builder.build() as wf:
        FAILURES.append(failing)
        report = replay(store, wf)
        assert report.identical, str(report)
        FAILURES.clear()
        with wf.resume(store, session="s") as s:
            assert sorted(s.run().outputs) == ["b", "z"]
    assert sorted(charged) == ["b", "z"]


def test_results_of_every_attempt_survive_a_last_attempt_that_failed_before_its_effect(
    tmp_path: Path,
) -> None:
    """Attempt 1 charges and fails; attempt 2 (a restart), and later a resume, fail
    before reaching the charge. The charge is recorded with each halt, and the resume
    that finally gets past it is handed the result: one call in all."""
    before: list[bool] = []
    charged: list[int] = []

    def charge(order: int) -> int:
        charged.append(order)
        return order * 10

    class Flaky(af.Executor):
        @af.handler
        def on_order(self, order: int, ctx: af.Context[None]) -> None:
            if before and before.pop():
                raise ConnectionError("the database is not reachable yet")
            receipt = ctx.effect(charge, order, key="charge")
            if self.id in FAILURES:
                FAILURES.remove(self.id)
                raise RuntimeError("failed after the charge")
            ctx.output(receipt)

    def build() -> af.Workflow:
        return af.WorkflowBuilder(
            "flaky", start=Flaky("pay"), restart=af.RestartPolicy(max_restarts=1)
        ).build()

    path = tmp_path / "s.db"
    FAILURES.append("pay")
    before.extend([False, True])  # the restart fails before the charge: the policy gives up
    _fails_for_good(build(), path, 4)
    before.extend([True, True])  # a resume elsewhere fails before the charge twice
    _fails_for_good(build(), path)
    with build() as wf, af.SQLiteStore(path) as store, wf.resume(store, session="s") as s:
        assert s.run().outputs == [40]
    assert charged == [4]


class _RefusesSteps(af.MemoryStore):
    """A store that refuses ``step`` cuts while ``refuse`` holds (a disk gone full: the
    process stops there, as if killed)."""

    refuse = False

    def save_cut(self, cut: Any, blobs: Any, lease: Any = None) -> Any:
        if self.refuse and cut.kind == "step":
            raise OSError("disk full")
        return super().save_cut(cut, blobs, lease)


def test_every_cut_at_the_failed_barrier_carries_its_results() -> None:
    """After the failed run, the next run's entry cut (at the same barrier) is the
    head; if nothing more is stored, a resume of it is still handed the result."""
    store = _RefusesSteps()
    FAILURES.append("pay")
    with _payments() as wf, wf.session("s", store=store) as s:
        with pytest.raises(af.ExecutorFailed):
            s.run(1)
        store.refuse = True
        with pytest.raises(af.RunFailed):  # order 1 runs again, then its cut is refused
            s.run(2)
    store.refuse = False
    assert [cp.kind.value for cp in store.list(session="s")] == ["entry", "halt", "entry"]
    with _payments() as wf, wf.resume(store, session="s") as s:
        assert sorted(o[0] for o in s.run().outputs) == [1, 2]
    # order 1's result was recorded: never called again; order 2's was not (its cut
    # was refused after the call): called again, with its key (the in-flight row)
    assert CALLS.made.count(1) == 1 and CALLS.made.count(2) == 2


def test_a_resume_of_the_cut_before_the_halt_gets_the_results_too(tmp_path: Path) -> None:
    store = af.SQLiteStore(tmp_path / "s.db")
    FAILURES.append("sink")  # the superstep after pay's: sink fails, pay's cut is before it
    with _payments() as wf, wf.session("s", store=store) as s, pytest.raises(af.ExecutorFailed):
        s.run(3)
    FAILURES.append("pay")
    with _payments() as wf, wf.session("t", store=store) as t, pytest.raises(af.ExecutorFailed):
        t.run(4)
    [halt] = [cp for cp in store.list(session="t") if cp.kind.value == "halt"]
    assert halt.parent_id is not None
    with _payments() as wf, wf.resume(store, session="t", checkpoint_id=halt.parent_id) as t:
        assert [o[0] for o in t.run().outputs] == [4]
    assert CALLS.made == [3, 4]
    store.close()


def test_a_time_travel_branch_that_failed_hands_nothing_to_the_lineage_it_left(
    tmp_path: Path,
) -> None:
    """A branch (resumed from an older cut) charges and fails: its halt's parent is that
    cut. Resuming the cut again is another lineage, with its own key: it calls anew."""
    store = af.SQLiteStore(tmp_path / "s.db")
    with _payments() as wf, wf.session("s", store=store) as s:
        first = s.run(1).outputs[0][2]
    [entry] = [cp for cp in store.list(session="s") if cp.kind.value == "entry"]
    FAILURES.append("pay")
    with (
        _payments() as wf,
        wf.resume(store, session="s", checkpoint_id=entry.id) as branch,
        pytest.raises(af.ExecutorFailed),
    ):
        branch.run()
    with _payments() as wf, wf.resume(store, session="s", checkpoint_id=entry.id) as again:
        [(order, _tags, key)] = again.run().outputs
    assert order == 1 and key == first  # the cut's own lineage (the branch's head is its child)
    assert CALLS.made == [1, 1, 1]  # the first run, the branch, and this one: not handed
    store.close()


def test_an_exception_that_refuses_attributes_still_carries_the_results(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Declined(Exception):
        order: int

    class Strict(af.Executor):
        @af.handler
        def on_order(self, order: int, ctx: af.Context[None]) -> None:
            ctx.effect(CALLS, order, key="charge")
            raise Declined(order)

    store = af.SQLiteStore(tmp_path / "s.db")
    workflow = af.WorkflowBuilder("strict", start=Strict("pay")).build()
    with (
        workflow as wf,
        wf.session("s", store=store) as s,
        pytest.raises(af.ExecutorFailed) as failed,
    ):
        s.run(8)
    assert failed.value.__cause__ == Declined(8)  # the handler's own error, as raised
    [halt] = [cp for cp in store.list(session="s") if cp.kind.value == "halt"]
    assert [e[:4] for e in journaled_results(halt)] == [["pay", 1, "charge", 0]]
    store.close()


def test_a_failed_halt_write_leaves_no_result_recorded_twice() -> None:
    class RefusesHalts(af.MemoryStore):
        refused = False

        def save_cut(self, cut: Any, blobs: Any, lease: Any = None) -> Any:
            if cut.kind == "halt" and not self.refused:
                self.refused = True
                raise OSError("disk full")
            return super().save_cut(cut, blobs, lease)

    store = RefusesHalts()
    FAILURES.append("pay")
    with _payments() as wf, wf.session("s", store=store) as s:
        with pytest.raises(af.ExecutorFailed):
            s.run(5)
        assert [o[0] for o in s.run().outputs] == [5]
    recorded = [effect[:4] for cp in store.list(session="s") for effect in journaled_results(cp)]
    assert recorded == [["pay", 1, "charge", 0]]
    assert CALLS.made == [5]


def test_a_fork_into_a_session_id_used_before_gets_keys_of_its_own(tmp_path: Path) -> None:
    store = af.SQLiteStore(tmp_path / "s.db")
    keys = []
    with _payments() as wf:
        with wf.session("s", store=store) as s:
            s.run(1)
        for _ in range(2):
            with wf.resume(store, session="s", as_session="x") as x:
                keys.append(x.run(2).outputs[0][2])
            af.delete_session(store, "x")
    assert keys[0] != keys[1]
    store.close()


def test_an_effect_retried_inside_the_handler_keeps_its_key_and_replays() -> None:
    """An effect that raised used up nothing: the handler's retry is the same call
    (the same key, the same occurrence), so a replay of the code finds it."""
    keys: list[str] = []
    attempts: list[int] = []

    def flaky(n: int) -> int:
        attempts.append(n)
        if len(attempts) == 1:
            raise ConnectionError("reset by peer")
        return n + 100

    class Retry(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[None]) -> None:
            for _ in range(3):
                keys.append(ctx.effect_key("call"))
                try:
                    ctx.output(ctx.effect(flaky, n, key="call"))
                    ctx.output(ctx.effect_key("call"))  # the next call's: occurrence 1
                    return
                except ConnectionError:
                    continue

    store = af.MemoryStore()
    builder = af.WorkflowBuilder("retry", start=Retry("r"))
    with builder.build() as wf, wf.session("s", store=store) as s:
        out, next_key = s.run(1).outputs
    assert out == 101 and attempts == [1, 1]
    assert keys[0] == keys[1] != next_key
    with builder.build() as wf:
        report = replay(store, wf)
    assert report.identical, str(report)
    assert attempts == [1, 1]


def test_an_unencodable_result_is_not_called_again_nor_restarted() -> None:
    """A result that cannot be recorded is the handler's mistake, which no restart
    mends: a restart would raise it again without calling the outside world, so the
    restart policy makes none (nor waits out its backoff) and the run fails at once.
    The message says what to return (not to declare a resource, which is for clients,
    not results)."""
    made: list[int] = []

    def connect(n: int) -> object:
        made.append(n)
        return object()

    class Leaky(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[None]) -> None:
            ctx.effect(connect, n, key="socket")

    policy = af.RestartPolicy(backoff=af.Backoff(initial=60.0, maximum=60.0))  # never waited
    builder = af.WorkflowBuilder("leaky", start=Leaky("leaky"), restart=policy)
    store = af.MemoryStore()
    with builder.build() as wf:
        with wf.session("leaky", store=store) as session:
            with pytest.raises(af.ExecutorFailed) as failed:
                session.run(1)
            kinds = [type(e).__name__ for e in session.history()]
        assert made == [1]
        cause = failed.value.__cause__
        assert isinstance(cause, af.ResultNotRecordable) and isinstance(cause, af.EncodeError)
        assert cause.executor == "leaky" and cause.type_name == "object"
        message = str(cause)
        assert "'socket'" in message and "resource" not in message, message
        assert "no restart" in str(failed.value), str(failed.value)
        assert "RunRestartedEvent" not in kinds and kinds.count("ExecutorFailedEvent") == 1


def test_a_handler_timed_out_after_its_effect_calls_again_with_the_same_key() -> None:
    """The documented limit: a timed-out handler's host is abandoned with what it
    remembered, so its restart calls the effect again, with the same key."""
    keys: list[str] = []
    release = threading.Event()

    class Slow(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[None]) -> None:
            keys.append(ctx.effect_key("charge"))
            ctx.effect(CALLS, n, key="charge")
            if len(keys) == 1:
                release.wait(30)  # hangs past the timeout the first time
            ctx.output(n)

    builder = af.WorkflowBuilder(
        "slow", start=Slow("slow", timeout=0.3), restart=af.RestartPolicy(max_restarts=1)
    )
    try:
        with builder.build() as wf:
            assert wf.run(2).outputs == [2]
    finally:
        release.set()
    assert CALLS.made == [2, 2] and keys[0] == keys[1]
