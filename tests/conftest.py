"""Shared fixtures: every test must leave no actor (or any other) thread behind."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pg  # tests/ is on sys.path


@pytest.fixture(autouse=True)
def no_thread_outlives_the_test() -> Iterator[None]:
    """Fail a test that leaves a thread it started running (bounded join, no sleep)."""
    before = set(threading.enumerate())
    yield
    leftover = [t for t in threading.enumerate() if t not in before]
    for thread in leftover:
        thread.join(timeout=5)
    alive = [t.name for t in leftover if t.is_alive()]
    assert not alive, f"threads outlived the test: {alive}"


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[pg.Durable]:
    """A fresh durable store shared across processes: SQLite, then PostgreSQL."""
    with pg.durable(request.param, str(tmp_path / "store.db")) as found:
        yield found
