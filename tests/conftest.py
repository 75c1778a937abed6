"""Shared fixtures: every test must leave no actor (or any other) thread behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest


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
