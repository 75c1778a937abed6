"""What session(), resume(), delete_session(), run() and respond() refuse, before anything
is opened, queued or stored: each refusal names the argument and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from tests.support import owners
from tests.support.owners import Order


@pytest.mark.parametrize(
    ("session_id", "fix"),
    [
        (123, "non-empty string, got .*; pass '123'"),
        (1.5, "non-empty string, got .*; pass '1.5'"),
        ("", "non-empty string, got .*; pass a string"),
        (b"s", "non-empty string, got .*; pass a string"),
        ("order-\udc80", "cannot be stored as text"),
    ],
)
def test_a_session_id_that_is_not_a_string_is_refused_at_open(
    tmp_path: Path, session_id: Any, fix: str
) -> None:
    """Ids are stored as text: an int id would be written as a record no store reads
    back (an SQLite store's every listing would then fail); it is refused at open."""
    store = af.SQLiteStore(tmp_path / "s.db")
    with owners.build() as wf:
        for open_it in (
            lambda: wf.session(session_id, store=store),
            lambda: wf.session(session_id),
            lambda: wf.resume(store, session=session_id),
            lambda: wf.resume(store, session="s", as_session=session_id),
            lambda: af.delete_session(store, session_id),
        ):
            with pytest.raises(ValueError, match=fix):
                open_it()
        with wf.session("s", store=store) as session:
            session.run(Order(1))
    assert store.sessions() == ["s"]
    assert store.verify() == []
    store.close()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"wait": "5"}, r"wait= must be a number of seconds >= 0, got '5'"),
        ({"lease_ttl": None}, r"lease_ttl= must be a number of seconds > 0, got None"),
        ({"checkpoint": "every"}, r"checkpoint= takes an af.CheckpointPolicy, got 'every'"),
        ({"restart": 3}, r"restart= takes an af.RestartPolicy, got 3"),
    ],
)
def test_options_of_another_type_are_refused_at_open(options: dict[str, Any], match: str) -> None:
    """session() and resume() check their options before they touch the store."""
    store = af.MemoryStore()
    with owners.build() as wf:
        with pytest.raises(ValueError, match=match):
            wf.session("s", store=store, **options)
        with pytest.raises(ValueError, match=match):
            wf.resume(store, session="s", **options)
    assert store.current_lease("s") is None


@pytest.mark.parametrize("bound", ["10", 0, -1, True, 2.5])
def test_a_bad_max_supersteps_queues_nothing(bound: Any) -> None:
    """A bound that is not a whole number >= 1 is refused before the input is queued:
    the next run sees only its own input."""
    with owners.build() as wf, wf.session("s") as session:
        with pytest.raises(ValueError, match=r"max_supersteps= must be a whole number >= 1"):
            session.run(Order(1), max_supersteps=bound)
        [request] = session.run(Order(2), max_supersteps=5).pending_requests
        assert request.value == Order(2)
        assert list(session.pending_requests) == [request]


def test_an_answer_keyed_by_another_type_than_a_request_id_consumes_nothing() -> None:
    """respond({1: ...}): a RequestError naming the pending ids; the request still waits."""
    with owners.build() as wf, wf.session("s") as session:
        [request] = session.run(Order(1)).pending_requests
        with pytest.raises(af.RequestError, match=r"request ids are strings, got 1.*desk:1:0"):
            session.respond({1: True})  # type: ignore[dict-item]  # the mistake tested
        assert session.respond({request.request_id: True}).outputs == [[1, True]]
