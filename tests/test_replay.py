"""Replaying stored sessions against new code: ``actorflow.testing.replay`` and
``actorflow replay``. The stored run is played by one version of the classes, the
replay by another (the same ``__actorflow_name__``, as after a deploy)."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, ClassVar

import pytest

import actorflow as af
from actorflow.cli import main
from actorflow.cli._describe import describe_runtime
from actorflow.testing import ReplayReport, replay

pytestmark = pytest.mark.timeout(120)

CALLS: list[int] = []


def price(item: int) -> int:
    CALLS.append(item)
    return item * 10


def _old_classes() -> tuple[type[af.Executor], type[af.Executor]]:
    class Cart(af.Executor):
        __actorflow_name__ = "shop.Cart"

        def __init__(self, executor_id: str) -> None:
            super().__init__(executor_id)
            self.total = 0
            self.items: list[int] = []

        @af.handler
        def on_item(self, item: int, ctx: af.Context[int]) -> None:
            self.total += ctx.effect(price, item, key="price")
            self.items.append(item)
            ctx.send(self.total)

    class Audit(af.Executor):
        __actorflow_name__ = "shop.Audit"

        def __init__(self, executor_id: str) -> None:
            super().__init__(executor_id)
            self.seen = 0

        @af.handler
        def on_total(self, total: int, ctx: af.Context[None]) -> None:
            self.seen += 1
            if total > 100:
                ctx.request(total, bool)
            else:
                ctx.output(f"total {total}")

        @af.response_handler
        def on_approval(self, total: int, approved: bool, ctx: af.Context[None]) -> None:
            ctx.output(f"total {total} approved={approved}")

    return Cart, Audit


def _workflow(cart: type[af.Executor], audit: type[af.Executor]) -> af.Workflow:
    start = cart("cart")
    return af.WorkflowBuilder("shop", start=start).add_edge(start, audit("audit")).build()


def _record(path: Path, sessions: int = 3) -> af.SQLiteStore:
    """Run ``sessions`` sessions of the old code into a SQLite store at ``path``."""
    store = af.SQLiteStore(path)
    with _workflow(*_old_classes()) as wf:
        for n in range(sessions):
            with wf.session(f"s{n}", store=store) as s:
                s.run(n + 1)
                result = s.run(20)  # total > 100: a request, answered below
                [pending] = result.pending_requests
                s.respond({pending.request_id: True})
    return store


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_same_code_replays_identically_calls_nothing_and_writes_nothing(
    tmp_path: Path,
) -> None:
    store = _record(tmp_path / "s.db")
    ids = [cp.id for cp in store.list()]
    store.close()
    before = _digest(tmp_path / "s.db")
    CALLS.clear()
    with af.SQLiteStore(tmp_path / "s.db") as reopened, _workflow(*_old_classes()) as wf:
        report = replay(reopened, wf)
        assert [cp.id for cp in reopened.list()] == ids
    assert report.identical, str(report)
    assert (report.sessions, report.runs) == (3, 9)  # each: two inputs and an answer
    assert CALLS == []
    assert _digest(tmp_path / "s.db") == before


def test_a_nondeterministic_change_is_caught_with_where_and_what(tmp_path: Path) -> None:
    _record(tmp_path / "s.db").close()
    old_cart, audit = _old_classes()

    class Cart(old_cart):  # type: ignore[valid-type,misc]
        __actorflow_name__ = "shop.Cart"

        @af.handler
        def on_item(self, item: int, ctx: af.Context[int]) -> None:
            self.total += ctx.effect(price, item, key="price") + random.randint(1, 9)
            self.items.append(item)
            ctx.send(self.total)

    with af.SQLiteStore(tmp_path / "s.db") as store, _workflow(Cart, audit) as wf:
        report = replay(store, wf, ["s1"])
    [found] = report.divergences
    assert (found.session, found.superstep, found.kind) == ("s1", 1, "state")
    assert (found.executor, found.attribute, found.old) == ("cart", "total", 20)
    assert found.new != 20
    assert "total was 20 in the stored run" in str(found)


def test_a_changed_output_is_caught(tmp_path: Path) -> None:
    _record(tmp_path / "s.db").close()
    cart, old_audit = _old_classes()

    class Audit(old_audit):  # type: ignore[valid-type,misc]
        __actorflow_name__ = "shop.Audit"

        @af.handler
        def on_total(self, total: int, ctx: af.Context[None]) -> None:
            self.seen += 1
            if total > 100:
                ctx.request(total, bool)
            else:
                ctx.output(f"sum {total}")

    with af.SQLiteStore(tmp_path / "s.db") as store, _workflow(cart, Audit) as wf:
        report = replay(store, wf, ["s0"])
    [found] = report.divergences
    assert (found.kind, found.executor, found.old, found.new) == (
        "output",
        "audit",
        "total 10",
        "sum 10",
    )


def test_a_new_attribute_with_a_migration_and_a_renamed_handler_replay_identically(
    tmp_path: Path,
) -> None:
    _record(tmp_path / "s.db").close()
    _, audit = _old_classes()

    class Cart(af.Executor):
        __actorflow_name__ = "shop.Cart"
        state_version: ClassVar[int] = 2

        def __init__(self, executor_id: str) -> None:
            super().__init__(executor_id)
            self.total = 0
            self.items: list[int] = []
            self.count = 0

        @classmethod
        def migrate(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
            return {**state, "count": len(state["items"])}

        @af.handler
        def add_item(self, item: int, ctx: af.Context[int]) -> None:  # was on_item
            self.total += ctx.effect(price, item, key="price")
            self.items.append(item)
            self.count += 1
            ctx.send(self.total)

    with af.SQLiteStore(tmp_path / "s.db") as store, _workflow(Cart, audit) as wf:
        report = replay(store, wf)
    assert report.identical, str(report)


def test_a_graph_change_is_reported_as_such(tmp_path: Path) -> None:
    _record(tmp_path / "s.db").close()
    cart, audit = _old_classes()
    start = cart("cart")
    changed = (
        af.WorkflowBuilder("shop", start=start)
        .add_edge(start, audit("audit"))
        .add_edge(start, audit("audit2"))
        .build()
    )
    with af.SQLiteStore(tmp_path / "s.db") as store, changed as wf:
        report = replay(store, wf, ["s0"])
    [found] = report.divergences
    assert found.kind == "graph"
    assert "audit2" in found.detail


def _replay_changed_cart(
    path: Path, charged: Callable[[af.Context[int], int], int], sessions: list[str] | None = None
) -> ReplayReport:
    """Record the cart sessions with the old code, then replay them with a cart that
    adds ``charged(ctx, item)`` for an item (the old one: its ``price`` effect)."""
    _record(path).close()
    old_cart, audit = _old_classes()

    class Cart(old_cart):  # type: ignore[valid-type,misc]
        __actorflow_name__ = "shop.Cart"

        @af.handler
        def on_item(self, item: int, ctx: af.Context[int]) -> None:
            self.total += charged(ctx, item)
            self.items.append(item)
            ctx.send(self.total)

    CALLS.clear()
    with af.SQLiteStore(path) as store, _workflow(Cart, audit) as wf:
        return replay(store, wf, sessions)


def test_an_effect_the_stored_run_did_not_make_is_reported_not_called(tmp_path: Path) -> None:
    def charged(ctx: af.Context[int], item: int) -> int:
        price_ = ctx.effect(price, item, key="price")
        return price_ + ctx.effect(price, item, key="tax")  # new: calls the outside world

    report = _replay_changed_cart(tmp_path / "s.db", charged, ["s0"])
    [found] = report.divergences
    assert (found.kind, found.executor, found.attribute, found.superstep) == (
        "effect",
        "cart",
        "tax",
        1,
    )
    assert CALLS == []


def test_an_effect_called_with_other_arguments_is_reported(tmp_path: Path) -> None:
    # The same key, another argument: the stored result would hide the change.
    report = _replay_changed_cart(
        tmp_path / "s.db", lambda ctx, item: ctx.effect(price, item * 2, key="price"), ["s1"]
    )
    [found] = report.divergences
    assert (found.kind, found.executor, found.attribute, found.superstep) == (
        "effect",
        "cart",
        "price",
        1,
    ), found
    assert "other arguments" in found.detail, found.detail
    assert CALLS == []


def test_arguments_passed_by_keyword_instead_of_by_position_replay_identically(
    tmp_path: Path,
) -> None:
    report = _replay_changed_cart(
        tmp_path / "s.db", lambda ctx, item: ctx.effect(price, item=item, key="price")
    )
    assert report.identical and report.sessions == 3, str(report)


SENT: list[float] = []


def send(to: str, at: float) -> str:
    SENT.append(at)
    return f"sent to {to}"


@pytest.mark.parametrize("journaled", [False, True])
def test_an_argument_read_from_the_clock_diverges_unless_an_effect_gives_it(
    journaled: bool,
) -> None:
    """The documented way to pass a time to an effect: through ``ctx.effect(time.time)``,
    whose result the replay is handed; read directly, it differs in every replay."""

    class Mailer(af.Executor):
        __actorflow_name__ = "shop.Mailer"

        @af.handler
        def on_order(self, order: int, ctx: af.Context[None]) -> None:
            at = ctx.effect(time.time) if journaled else time.time()
            ctx.output(ctx.effect(send, "ops@example.com", at))

    store = af.MemoryStore()
    with af.WorkflowBuilder("mail", start=Mailer("mailer")).build() as wf:
        with wf.session("s", store=store) as s:
            assert s.run(1).outputs == ["sent to ops@example.com"]
        report = replay(store, wf)
    assert report.identical is journaled, str(report)
    assert len(SENT) == 1  # the replay sent nothing
    SENT.clear()


def test_an_effect_no_longer_made_is_reported(tmp_path: Path) -> None:
    """A deploy that stops charging (no longer asks the price service): the state does
    not show it."""
    report = _replay_changed_cart(tmp_path / "s.db", lambda ctx, item: item * 10, ["s0"])
    [found] = report.divergences
    assert (found.kind, found.executor, found.attribute, found.superstep) == (
        "effect",
        "cart",
        "price",
        1,
    ), found
    assert "no longer made it" in found.detail, found.detail


def quote(lines: dict[str, int], tags: set[str]) -> int:
    return sum(lines.values()) + len(tags)


def _quoting(names: list[str]) -> af.Workflow:
    """Asks for a quote of ``names`` (a dict and a set built in that order)."""

    class Quote(af.Executor):
        __actorflow_name__ = "shop.Quote"

        @af.handler
        def on_n(self, n: int, ctx: af.Context[None]) -> None:
            lines = dict.fromkeys(names, n)
            ctx.output(ctx.effect(quote, lines, set(names)))

    return af.WorkflowBuilder("quote", start=Quote("quote")).build()


def test_equal_arguments_built_in_another_order_replay_identically() -> None:
    store = af.MemoryStore()
    names = [f"item-{i}" for i in range(20)]
    with _quoting(names) as wf, wf.session("s", store=store) as s:
        assert s.run(2).outputs == [60]
    with _quoting(names[::-1]) as wf:
        same = replay(store, wf)
    with _quoting(names[1:]) as wf:
        other = replay(store, wf)
    assert same.identical, str(same)
    [found] = other.divergences
    assert "other arguments" in found.detail, found


def _booking(statement: str) -> af.Workflow:
    class Book(af.Executor):
        __actorflow_name__ = "shop.Book"

        @af.handler
        def on_order(self, order: int, ctx: af.Context[None]) -> None:
            ctx.sql(statement, [order])
            ctx.output(order)

    return af.WorkflowBuilder("book", start=Book("book")).build()


@pytest.mark.parametrize(
    ("statement", "same"),
    [
        ("INSERT INTO ledger VALUES (?)", True),
        ("INSERT INTO ledger VALUES (? + 1)", False),
        ("INSERT INTO ledger VALUES (?) ON CONFLICT DO NOTHING", False),
    ],
)
def test_a_changed_ctx_sql_statement_is_reported(
    statement: str, same: bool, tmp_path: Path
) -> None:
    import sqlite3

    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute("CREATE TABLE ledger (n INTEGER)")
    with af.SQLiteStore(tmp_path / "s.db") as store:
        with _booking("INSERT INTO ledger VALUES (?)") as wf, wf.session("s", store=store) as s:
            assert s.run(7).outputs == [7]
        with _booking(statement) as wf:
            report = replay(store, wf)
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("SELECT n FROM ledger").fetchall() == [(7,)]  # the replay wrote none
    assert report.identical is same, str(report)
    if not same:
        [found] = report.divergences
        assert (found.kind, found.executor, found.attribute, found.superstep) == (
            "effect",
            "book",
            "ctx.sql",
            1,
        ), found
        assert "ctx.sql statement 0 of superstep 1" in found.detail, found.detail


def _failing(error: type[Exception]) -> af.Workflow:
    """One executor that charges, then fails with ``error`` on a large item."""

    class Cart(af.Executor):
        __actorflow_name__ = "shop.Cart"

        @af.handler
        def on_item(self, item: int, ctx: af.Context[None]) -> None:
            charged = ctx.effect(price, item, key="price")
            if charged > 100:
                raise error(f"{charged} is over the limit")
            ctx.output(charged)

    return af.WorkflowBuilder("shop", start=Cart("cart")).build()


def test_a_run_that_failed_replays_identically_only_when_it_fails_the_same_way(
    tmp_path: Path,
) -> None:
    with af.SQLiteStore(tmp_path / "s.db") as store:
        with _failing(ValueError) as wf, wf.session("s0", store=store) as s:
            assert s.run(2).outputs == [20]
            with pytest.raises(af.ExecutorFailed):
                s.run(30)  # charged, then failed: the halt records the charge
        CALLS.clear()
        with _failing(ValueError) as wf:
            same = replay(store, wf)
        with _failing(KeyError) as wf:
            other = replay(store, wf)
    assert same.identical, str(same)
    [found] = other.divergences
    assert (found.kind, found.executor, found.old, found.new) == (
        "error",
        "cart",
        "ValueError",
        "KeyError",
    ), found
    assert "ValueError" in found.detail and "KeyError" in found.detail
    assert CALLS == []


class Declined(Exception):
    """An API's refusal, built from other parameters than its message."""

    def __init__(self, order: str, reason: str) -> None:
        super().__init__(f"order {order} declined: {reason}")
        self.order = order
        self.reason = reason


DECLINES: list[int] = []
"""How many more calls of ``charge`` are declined (the test sets it)."""


def charge(amount: int) -> str:
    CALLS.append(amount)
    if DECLINES and DECLINES[0] > 0:
        DECLINES[0] -= 1
        raise Declined(f"o{amount}", "insufficient funds")
    return f"receipt {amount}"


def _paying(catches: type[BaseException], retries: int) -> af.Workflow:
    """Charges each amount; a decline is noted and tried again, ``retries`` times."""

    class Pay(af.Executor):
        __actorflow_name__ = "shop.Pay"

        def __init__(self, executor_id: str) -> None:
            super().__init__(executor_id)
            self.declined: list[str] = []

        @af.handler
        def on_amount(self, amount: int, ctx: af.Context[None]) -> None:
            for _ in range(retries + 1):
                try:
                    ctx.output(ctx.effect(charge, amount))
                    return
                except catches as exc:
                    self.declined.append(getattr(exc, "reason", str(exc)))
            ctx.output("given up")

    return af.WorkflowBuilder("pay", start=Pay("pay")).build()


@pytest.mark.parametrize("declines", [1, 2, 5])
def test_an_effect_that_raised_and_was_caught_replays_as_it_raised(declines: int) -> None:
    """The stored run's raises are recorded: the replay raises them again, in order,
    where they were raised (the same type, args and attributes), calling nothing."""
    store = af.MemoryStore()
    DECLINES[:] = [declines]
    with _paying(Declined, retries=2) as wf, wf.session("s", store=store) as s:
        first = s.run(7).outputs
        second = s.run(8).outputs
    assert first == (["given up"] if declines > 2 else ["receipt 7"])
    assert second == ["receipt 8"]
    CALLS.clear()
    DECLINES[:] = [0]  # the outside world has changed since: the replay must not ask it
    with _paying(Declined, retries=2) as wf:
        report = replay(store, wf)
    assert report.identical and report.runs == 2, str(report)
    assert CALLS == []
    [cut] = [cp for cp in store.list(session="s") if cp.kind.value == "step" and cp.superstep == 1]
    shown = describe_runtime(cut.runtime)["effects"]
    raised = [e for e in shown if "raised" in e]
    assert len(raised) == min(declines, 3)  # each raise the handler caught, in order
    [called] = [e for e in shown if "arguments" in e]  # of the first call: one digest
    assert (called["effect"], called["n"], len(called["arguments"])) == ("charge", 0, 32)
    assert raised[0] == {
        "executor": "pay",
        "superstep": 1,
        "effect": "charge",
        "n": 0,
        "raised": "Declined: order o7 declined: insufficient funds",
    }


def test_a_raise_caught_inside_a_sub_workflow_replays_as_it_raised() -> None:
    def build() -> tuple[af.Workflow, af.Workflow]:
        inner = _paying(Declined, retries=1)
        sub = af.WorkflowExecutor(inner, "sub", outputs="output")
        return af.WorkflowBuilder("outer", start=sub).build(), inner

    store = af.MemoryStore()
    DECLINES[:] = [1]
    outer, inner = build()
    with outer as wf, inner, wf.session("s", store=store) as s:
        assert s.run(7).outputs == ["receipt 7"]
    CALLS.clear()
    outer, inner = build()
    with outer as wf, inner:
        report = replay(store, wf)
    assert report.identical and report.runs == 1, str(report)
    assert CALLS == []


def _nested_twice(factor: int) -> tuple[af.Workflow, ...]:
    """outer > top (sub-workflow) > mid > sub (sub-workflow) > inner: adds item x factor."""

    class Inner(af.Executor):
        __actorflow_name__ = "shop.Inner"

        def __init__(self, executor_id: str) -> None:
            super().__init__(executor_id)
            self.total = 0
            self.checkpoint = b"an attribute of this name, not a nested record"

        @af.handler
        def on_item(self, item: int, ctx: af.Context[None]) -> None:
            self.total += item * factor
            ctx.output(item)

    inner = af.WorkflowBuilder("inner", start=Inner("inner")).build()
    sub = af.WorkflowExecutor(inner, "sub", outputs="output")
    mid = af.WorkflowBuilder("mid", start=sub).build()
    top = af.WorkflowExecutor(mid, "top", outputs="output")
    return af.WorkflowBuilder("outer", start=top).build(), mid, inner


def test_a_state_change_inside_nested_sub_workflows_names_the_inner_attribute() -> None:
    store = af.MemoryStore()
    outer, *inner = _nested_twice(1)
    with outer as wf, inner[0], inner[1], wf.session("s", store=store) as s:
        assert s.run(3).outputs == [3]
    outer, *inner = _nested_twice(1)
    with outer as wf, inner[0], inner[1]:
        same = replay(store, wf)
    outer, *inner = _nested_twice(2)
    with outer as wf, inner[0], inner[1]:
        other = replay(store, wf)
    assert same.identical, str(same)
    [found] = other.divergences
    assert (found.kind, found.executor, found.attribute, found.old, found.new) == (
        "state",
        "top",
        "sub.inner.total",
        3,
        6,
    ), found


class NotReady(Exception):
    pass


def poll(body: str) -> str:
    """Not ready the first 300 calls: each raise carries a large body."""
    CALLS.append(0)
    if len(CALLS) <= 300:
        raise NotReady(body)
    return "ready"


def test_a_polled_effect_journals_a_bounded_record_and_still_replays() -> None:
    class Poller(af.Executor):
        __actorflow_name__ = "tests.Poller"

        @af.handler
        def on_job(self, job: str, ctx: af.Context[None]) -> None:
            while True:
                try:
                    ctx.output(ctx.effect(poll, "x" * 100_000))
                    return
                except NotReady:
                    pass

    store = af.MemoryStore()
    CALLS.clear()
    with af.WorkflowBuilder("poll", start=Poller("poller")).build() as wf:
        with wf.session("s", store=store) as s:
            assert s.run("job").outputs == ["ready"]
        [cut] = [cp for cp in store.list(session="s") if cp.kind.value == "step"]
        assert len(cut.runtime) < 50_000  # not 300 bodies of 100 kB
        CALLS.clear()
        report = replay(store, wf)
    assert report.identical, str(report)
    assert CALLS == []


def test_code_that_no_longer_catches_a_recorded_raise_diverges() -> None:
    store = af.MemoryStore()
    DECLINES[:] = [1]
    with _paying(Declined, retries=1) as wf, wf.session("s", store=store) as s:
        assert s.run(7).outputs == ["receipt 7"]
    CALLS.clear()
    with _paying(KeyError, retries=1) as wf:
        report = replay(store, wf)
    [found] = report.divergences
    assert found.kind == "error" and "Declined" in found.detail, found
    assert CALLS == []


def test_a_recorded_raise_of_a_type_the_code_no_longer_has_is_reported() -> None:
    class Gone(Exception):
        pass

    def refuse() -> None:
        raise Gone("no")

    def build() -> af.Workflow:
        class Ask(af.Executor):
            __actorflow_name__ = "shop.Ask"

            @af.handler
            def on_item(self, item: int, ctx: af.Context[None]) -> None:
                try:
                    ctx.effect(refuse, key="refuse")
                except Gone as exc:
                    ctx.output(type(exc).__name__)

        return af.WorkflowBuilder("ask", start=Ask("ask")).build()

    store = af.MemoryStore()
    with build() as wf, wf.session("s", store=store) as s:
        assert s.run(1).outputs == ["Gone"]
    with build() as wf:
        report = replay(store, wf)
    [found] = report.divergences
    assert (found.kind, found.executor, found.attribute) == ("effect", "ask", "refuse"), found
    assert "Gone" in found.detail and "module level" in found.detail, found.detail


def _giving_up(tries: int, calls: bool = True) -> af.Workflow:
    """Charges 7, trying ``tries`` times; ``calls`` False: gives up without calling."""

    class Pay(af.Executor):
        __actorflow_name__ = "shop.Pay"

        def __init__(self, executor_id: str) -> None:
            super().__init__(executor_id)
            self.declined = 0

        @af.handler
        def on_amount(self, amount: int, ctx: af.Context[None]) -> None:
            for _ in range(tries):
                self.declined += 1
                if calls:
                    try:
                        ctx.output(ctx.effect(charge, amount))
                        return
                    except Declined:
                        pass
            ctx.output("given up")

    return af.WorkflowBuilder("pay", start=Pay("pay")).build()


def test_an_effect_raising_more_often_than_journaled_replays_as_it_gave_up() -> None:
    """Only the first raises of a call are journaled; a replay that asks again past
    them, where the stored run never got a result, raises the last one again."""
    store = af.MemoryStore()
    DECLINES[:] = [1000]
    with _giving_up(80) as wf, wf.session("s", store=store) as s:
        assert s.run(7).outputs == ["given up"]
    CALLS.clear()
    with _giving_up(80) as wf:
        report = replay(store, wf)
    assert report.identical, str(report)
    assert CALLS == []


def test_an_effect_that_only_raised_and_is_no_longer_called_diverges() -> None:
    """The stored run's call raised (and was caught): no result is journaled, but the
    call was made, and new code that no longer makes it is a divergence."""
    store = af.MemoryStore()
    DECLINES[:] = [1000]
    with _giving_up(1) as wf, wf.session("s", store=store) as s:
        assert s.run(7).outputs == ["given up"]
    with _giving_up(1, calls=False) as wf:
        report = replay(store, wf)
    [found] = report.divergences
    assert (found.kind, found.executor, found.attribute) == ("effect", "pay", "charge"), found
    assert "raised" in found.detail and "no longer made that call" in found.detail


def refuse_oddly(amount: int) -> None:
    """Raises an error whose message and attribute hold a lone surrogate (bytes
    decoded with ``surrogateescape``, say), which UTF-8 cannot carry."""
    raise Declined(f"o{amount}", "bad name \udcff")


def test_an_error_that_cannot_be_journaled_as_it_is_still_reaches_the_handler() -> None:
    class Pay(af.Executor):
        __actorflow_name__ = "shop.PayOddly"

        @af.handler
        def on_amount(self, amount: int, ctx: af.Context[None]) -> None:
            try:
                ctx.effect(refuse_oddly, amount)
            except Declined as exc:
                ctx.output(f"caught {type(exc).__name__}: {str(exc)!a}")

    def build() -> af.Workflow:
        return af.WorkflowBuilder("pay", start=Pay("pay")).build()

    store = af.MemoryStore()
    with build() as wf, wf.session("s", store=store) as s:
        assert s.run(7).outputs == ["caught Declined: 'order o7 declined: bad name \\udcff'"]
    with build() as wf:
        report = replay(store, wf)
    # The replay raises it again with what encodes: its message, escaped.
    [found] = report.divergences
    assert found.kind == "output" and "name \\\\udcff" in str(found.new), found


def read_config(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_a_built_in_error_replays_with_what_its_arguments_gave_it(tmp_path: Path) -> None:
    """An ``OSError``'s file name is not among its ``args``: it is journaled all the
    same, and the replayed error says it."""

    class Load(af.Executor):
        __actorflow_name__ = "shop.Load"

        @af.handler
        def on_path(self, path: str, ctx: af.Context[None]) -> None:
            try:
                ctx.output(ctx.effect(read_config, path))
            except FileNotFoundError as exc:
                ctx.output([exc.errno, exc.filename, str(exc)])

    def build() -> af.Workflow:
        return af.WorkflowBuilder("load", start=Load("load")).build()

    store = af.MemoryStore()
    missing = str(tmp_path / "absent.toml")
    with build() as wf, wf.session("s", store=store) as s:
        [said] = s.run(missing).outputs
    assert said[1] == missing and missing in said[2]
    with build() as wf:
        report = replay(store, wf)
    assert report.identical, str(report)


def charge_order(order: dict[str, int], fee: int = 0) -> int:
    return sum(order.values()) + fee


@pytest.mark.parametrize("changed", [False, True])
def test_the_arguments_bound_in_a_partial_are_compared(changed: bool) -> None:
    def build(fee: int) -> af.Workflow:
        class Bill(af.Executor):
            __actorflow_name__ = "shop.Bill"

            @af.handler
            def on_order(self, order: dict[str, int], ctx: af.Context[None]) -> None:
                ctx.output(ctx.effect(functools.partial(charge_order, {**order, "fee": fee})))

        return af.WorkflowBuilder("bill", start=Bill("bill")).build()

    store = af.MemoryStore()
    with build(1) as wf, wf.session("s", store=store) as s:
        assert s.run({"a": 2}).outputs == [3]
    with build(5 if changed else 1) as wf:
        report = replay(store, wf)
    assert report.identical is not changed, str(report)
    if changed:
        assert "other arguments" in report.divergences[0].detail


_DIGEST_SCRIPT = """
from dataclasses import dataclass

from actorflow import message
from actorflow.runtime._effects import _arguments_digest

@message
@dataclass
class Order:
    tags: set[str]
    lines: dict[str, int]

def fn(a, b, order):
    pass

names = [f"n{i}" for i in range(30)]
mixed = {1, "a", b"b", 2.5, (1, "x"), None, frozenset({1, 2}), frozenset({3})}
order = Order(tags=set(names), lines=dict.fromkeys(set(names), 1))
print(_arguments_digest(fn, (mixed, {k: 1 for k in mixed if k is not None}, order), {}).hex())
"""


def test_an_arguments_digest_does_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    """Sets of mixed types, and sets and dicts inside a message, come out in another
    order with another hash seed: the digest must not."""
    script = tmp_path / "digest.py"
    script.write_text(_DIGEST_SCRIPT)
    digests = set()
    for seed in ("1", "2", "3"):
        done = subprocess.run(
            [sys.executable, str(script)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        digests.add(done.stdout.strip())
    assert len(digests) == 1 and len(next(iter(digests))) == 32, digests


_MAIN_SCRIPT = """
import sys
import actorflow as af


class Refused(Exception):
    pass


def ask(item):
    raise Refused(f"no {item}")


class Ask(af.Executor):
    __actorflow_name__ = "shop.AskMain"

    @af.handler
    def on_item(self, item: int, ctx: af.Context[None]) -> None:
        try:
            ctx.effect(ask, item)
        except Refused as exc:
            ctx.output(str(exc))


def build():
    return af.WorkflowBuilder("ask", start=Ask("ask")).build()


if __name__ == "__main__":
    with af.SQLiteStore(sys.argv[1]) as store, build() as wf, wf.session("s", store=store) as s:
        print(s.run(3).outputs)
"""


def test_an_error_class_of_the_script_replays_through_the_command(tmp_path: Path) -> None:
    """A run made by ``python app.py`` raised an error class of ``__main__``; the
    command imports the script as ``app``, and finds the class there."""
    (tmp_path / "askapp.py").write_text(_MAIN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    run = subprocess.run(
        [sys.executable, "askapp.py", "s.db"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert run.stdout.strip() == "['no 3']", run
    done = subprocess.run(
        [sys.executable, "-m", "actorflow", "replay", "s.db", "--workflow", "askapp:build"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "all replay identically" in done.stdout, done


def test_a_sub_workflow_that_fails_otherwise_inside_diverges(tmp_path: Path) -> None:
    def build(error: type[Exception]) -> tuple[af.Workflow, af.Workflow]:
        inner = _failing(error)
        sub = af.WorkflowExecutor(inner, "sub", outputs="output")
        return af.WorkflowBuilder("outer", start=sub).build(), inner

    store = af.MemoryStore()
    outer, inner = build(ValueError)
    with (
        outer as wf,
        inner,
        wf.session("s", store=store) as s,
        pytest.raises(af.ExecutorFailed) as failed,
    ):
        s.run(30)
    assert (failed.value.executor, failed.value.error_type) == ("sub", "ValueError")
    reports = []
    for error in (ValueError, KeyError):
        outer, inner = build(error)
        with outer as wf, inner:
            reports.append(replay(store, wf))
    same, other = reports
    assert same.identical, str(same)
    [found] = other.divergences
    assert (found.kind, found.executor, found.old, found.new) == (
        "error",
        "sub",
        "ValueError",
        "KeyError",
    ), found


def test_runs_stopped_by_a_cancel_or_the_superstep_limit_replay_identically() -> None:
    """The replay stops where the stored run was stopped, instead of running on."""
    running: list[af.Session] = []

    class Loop(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[int]) -> None:
            if n == 2 and running:
                running.pop().cancel()
            if n < 5:
                ctx.send(n + 1)
            else:
                ctx.output(n)

    def build() -> af.Workflow:
        loop = Loop("loop")
        return af.WorkflowBuilder("loop", start=loop).add_edge(loop, loop).build()

    store = af.MemoryStore()
    with build() as wf:
        with wf.session("limit", store=store) as s, pytest.raises(af.SuperstepLimitExceeded):
            s.run(0, max_supersteps=3)
        with wf.session("cancel", store=store) as s:
            running.append(s)
            assert s.run(0).status is af.RunStatus.CANCELLED
    with build() as wf:
        report = replay(store, wf)
    assert report.identical, str(report)
    assert report.runs == 2


def _counting_loop(limit: int, factor: int | None = None) -> af.Workflow:
    """One executor sending ``n + 1`` to itself up to ``limit``; there it outputs
    ``limit * factor`` (nothing without a factor)."""

    class Loop(af.Executor):
        __actorflow_name__ = "tests.Loop"

        @af.handler
        def on_n(self, n: int, ctx: af.Context[int]) -> None:
            if n < limit:
                ctx.send(n + 1)
            elif factor is not None:
                ctx.output(n * factor)

    loop = Loop("loop")
    return af.WorkflowBuilder("loop", start=loop).add_edge(loop, loop).build()


def test_runs_after_a_halt_without_new_input_are_replayed_too() -> None:
    """A session that goes on after a stop (``run()`` with no input) writes its cuts
    after the halt: they are a run of their own, compared like any other."""

    def build(factor: int) -> af.Workflow:
        return _counting_loop(4, factor)

    store = af.MemoryStore()
    with build(1) as wf:
        with wf.session("s", store=store) as s, pytest.raises(af.SuperstepLimitExceeded):
            s.run(0, max_supersteps=2)
        with wf.resume(store, session="s") as s:
            assert s.run().outputs == [4]
    with build(1) as wf:
        same = replay(store, wf)
    with build(1000) as wf:
        changed = replay(store, wf)
    assert same.identical and same.runs == 2, str(same)
    [found] = changed.divergences
    assert (found.kind, found.old, found.new) == ("output", 4, 4000), found


def test_a_run_cancelled_in_its_first_superstep_replays_identically() -> None:
    release = threading.Event()
    running: list[af.Session] = []

    class Slow(af.Executor):
        @af.handler
        def on_n(self, n: int, ctx: af.Context[int]) -> None:
            if running:
                running.pop().cancel()
                release.wait(30)  # still in the handler when the barrier gives up on it
            if n < 3:
                ctx.send(n + 1)

    def build() -> af.Workflow:
        slow = Slow("slow")
        return af.WorkflowBuilder("slow", start=slow).add_edge(slow, slow).build()

    store = af.MemoryStore()
    try:
        with build() as wf, wf.session("s", store=store) as s:
            running.append(s)
            assert s.run(1).status is af.RunStatus.CANCELLED
    finally:
        release.set()
    assert [cp.kind.value for cp in store.list(session="s")] == ["entry", "halt"]
    with build() as wf:
        report = replay(store, wf)
    assert report.identical, str(report)


def test_a_request_no_longer_asked_is_reported() -> None:
    def build(asks: bool) -> af.Workflow:
        class Approvals(af.Executor):
            __actorflow_name__ = "tests.Approvals"

            @af.handler
            def on_cents(self, cents: int, ctx: af.Context[None]) -> None:
                if asks:
                    ctx.request(cents, bool)

            @af.response_handler
            def on_decision(self, cents: int, ok: bool, ctx: af.Context[None]) -> None:
                ctx.output(f"{cents}:{ok}")

        return af.WorkflowBuilder("exp", start=Approvals("approvals")).build()

    store = af.MemoryStore()
    with build(True) as wf, wf.session("s", store=store) as s:
        [pending] = s.run(250).pending_requests
        assert s.respond({pending.request_id: True}).outputs == ["250:True"]
    with build(False) as wf:  # no longer asks for approval
        report = replay(store, wf)
    [found] = report.divergences
    assert (found.kind, found.attribute, found.old, found.new) == (
        "request",
        "approvals:1:0",
        250,
        None,
    )
    assert "not asked in the replay" in found.detail


DRAWS: list[int] = []


def draw() -> int:
    return DRAWS[0]


def _drawing(bonus_for: int | None) -> af.Workflow:
    """Adds a drawn number each superstep for 4 supersteps, then outputs the total
    (plus 1 for each draw of ``bonus_for``: a change only that number shows)."""

    class Draws(af.Executor):
        __actorflow_name__ = "tests.Draws"

        def __init__(self, executor_id: str) -> None:
            super().__init__(executor_id)
            self.total = 0

        @af.handler
        def on_n(self, n: int, ctx: af.Context[int]) -> None:
            drawn = ctx.effect(draw, key="draw")
            self.total += drawn + (drawn == bonus_for)
            if n < 4:
                ctx.send(n + 1)
            else:
                ctx.output(self.total)

    loop = Draws("loop")
    return af.WorkflowBuilder("draws", start=loop).add_edge(loop, loop).build()


@pytest.mark.parametrize("fork", [False, True])
def test_a_branch_from_the_middle_of_a_run_is_replayed_too(fork: bool) -> None:
    """Time travel (or a fork into a new id) continues a cut in the middle of a run: the
    branch is a run of its own, compared like any other."""
    store = af.MemoryStore()
    DRAWS[:] = [1]
    with _drawing(None) as wf:
        with wf.session("s", store=store) as s:
            assert s.run(1).outputs == [4]
        [middle] = [
            c for c in store.list(session="s") if c.kind.value == "step" and c.superstep == 2
        ]
        DRAWS[:] = [5]
        into = "t" if fork else None
        with wf.resume(store, session="s", checkpoint_id=middle.id, as_session=into) as branch:
            assert branch.run().outputs == [12]  # 1 + 1, then 5 + 5
    DRAWS[:] = [0]
    with _drawing(None) as wf:
        same = replay(store, wf)
    with _drawing(5) as wf:
        other = replay(store, wf)
    assert same.identical and same.runs == 2, str(same)
    [found] = other.divergences
    assert (found.session, found.kind, found.attribute, found.old, found.new) == (
        "t" if fork else "s",
        "state",
        "total",
        7,
        8,
    ), found


def test_a_fork_whose_source_session_was_deleted_is_reported_as_not_replayed() -> None:
    store = af.MemoryStore()
    DRAWS[:] = [1]
    with _drawing(None) as wf:
        with wf.session("s", store=store) as s:
            assert s.run(1).outputs == [4]
        [middle] = [
            c for c in store.list(session="s") if c.kind.value == "step" and c.superstep == 2
        ]
        with wf.resume(store, session="s", checkpoint_id=middle.id, as_session="t") as branch:
            branch.run()
        for cut in store.list(session="s"):
            store.delete(cut.id)
        report = replay(store, wf, ["t"])
    assert report.identical and report.runs == 0, str(report)
    [why] = report.skipped
    assert "session 't'" in why and middle.id in why and "no longer holds" in why
    assert "1 run(s) not replayed" in str(report)


def test_a_run_that_goes_on_past_the_stored_end_says_so() -> None:
    def build(limit: int) -> af.Workflow:
        return _counting_loop(limit)

    store = af.MemoryStore()
    with build(3) as wf, wf.session("s", store=store) as s:
        s.run(0)
    with build(4) as wf:
        report = replay(store, wf)
    [found] = report.divergences
    assert found.kind == "end" and "went on to superstep 5" in found.detail, found.detail


_CLI_WORKFLOW: list[Callable[[], af.Workflow]] = []


def build_for_cli() -> af.Workflow:
    """What ``--workflow tests.test_replay:build_for_cli`` builds (set by the test)."""
    return _CLI_WORKFLOW[0]()


def test_the_command_says_identical_or_diverges_in_its_exit_status(tmp_path: Path) -> None:
    _record(tmp_path / "s.db", sessions=2).close()
    old_cart, audit = _old_classes()

    class Cart(old_cart):  # type: ignore[valid-type,misc]
        __actorflow_name__ = "shop.Cart"

        @af.handler
        def on_item(self, item: int, ctx: af.Context[int]) -> None:
            self.total += ctx.effect(price, item, key="price") * 2
            self.items.append(item)
            ctx.send(self.total)

    argv = [
        "replay",
        str(tmp_path / "s.db"),
        "--workflow",
        "tests.test_replay:build_for_cli",
    ]
    _CLI_WORKFLOW[:] = [lambda: _workflow(*_old_classes())]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(argv) == 0
    assert "2 session(s), 6 run(s): all replay identically" in out.getvalue()
    _CLI_WORKFLOW[:] = [lambda: _workflow(Cart, audit)]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*argv, "--session", "s1"]) == 1
    assert "session 's1', superstep 1: executor 'cart': total was 20" in out.getvalue()


def test_a_session_or_a_workflow_the_store_does_not_hold_is_a_clear_error(
    tmp_path: Path,
) -> None:
    _record(tmp_path / "s.db", sessions=1).close()
    missing = pytest.raises(af.CheckpointNotFound, match="'nobody'")
    with af.SQLiteStore(tmp_path / "s.db") as store, _workflow(*_old_classes()) as wf, missing:
        replay(store, wf, ["nobody"])
    cart, audit = _old_classes()
    start = cart("cart")
    other = af.WorkflowBuilder("other", start=start).add_edge(start, audit("audit")).build()
    none = pytest.raises(af.CheckpointNotFound, match="no session of workflow 'other'")
    with af.SQLiteStore(tmp_path / "s.db") as store, other as wf, none:
        replay(store, wf)
    err = io.StringIO()
    argv = ["replay", str(tmp_path / "s.db"), "--workflow", "tests.test_replay:build_for_cli"]
    _CLI_WORKFLOW[:] = [lambda: _workflow(*_old_classes())]
    with redirect_stderr(err):
        assert main([*argv, "--session", "nobody"]) == 2
    assert "'nobody'" in err.getvalue()
