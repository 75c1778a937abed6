"""The langgraph-sdk client (a client nobody here wrote) against the service."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.client import SyncLangGraphClient
from langgraph_sdk.errors import NotFoundError

from actorflow.serve import Server

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sdk(server: Server) -> Iterator[SyncLangGraphClient]:
    client = get_sync_client(url=server.url, api_key=None)
    try:
        yield client
    finally:
        client.close()


def _order(n: int, *items: str) -> Any:
    """An Order as a client sends it: a JSON object of its fields."""
    return {"id": n, "items": list(items)}


def test_create_wait_search_state_and_history(sdk: SyncLangGraphClient) -> None:
    """threads.create, runs.wait, threads.search, get_state and get_history."""
    assert [a["graph_id"] for a in sdk.assistants.search()] == ["orders"]
    thread = sdk.threads.create(metadata={"user": "ada"})
    tid = thread["thread_id"]
    order: Any = {"id": 1, "items": ["a", "b"]}
    result: Any = sdk.runs.wait(tid, "orders", input=order)
    assert result == {"outputs": ["a", "b"]}
    found = sdk.threads.search(metadata={"user": "ada"})
    assert [t["thread_id"] for t in found] == [tid]
    state: Any = sdk.threads.get_state(tid)
    assert state["values"]["intake"] == {"orders": [1]}
    parent = state["parent_checkpoint"]["checkpoint_id"]
    earlier = sdk.threads.get_state(tid, checkpoint_id=parent)
    assert earlier["checkpoint"]["checkpoint_id"] == parent
    history = sdk.threads.get_history(tid, limit=3)
    assert len(history) == 3
    assert history[0]["checkpoint"] == state["checkpoint"]


def test_threads_update_and_delete(sdk: SyncLangGraphClient) -> None:
    """threads.update merges metadata (search finds it); threads.delete removes the
    thread: reading it afterwards is a 404."""
    tid = sdk.threads.create(metadata={"user": "ada"})["thread_id"]
    sdk.runs.wait(tid, "orders", input=_order(4, "a"))
    updated = sdk.threads.update(tid, metadata={"tier": "gold"})
    assert updated["metadata"] == {"user": "ada", "tier": "gold"}
    assert [t["thread_id"] for t in sdk.threads.search(metadata={"tier": "gold"})] == [tid]
    sdk.threads.delete(tid)
    with pytest.raises(NotFoundError):
        sdk.threads.get(tid)
    assert sdk.threads.search() == []


def test_stream_values_updates_events(sdk: SyncLangGraphClient) -> None:
    """runs.stream in the modes the service speaks."""
    tid = sdk.threads.create()["thread_id"]
    parts = list(
        sdk.runs.stream(
            tid,
            "orders",
            input=_order(2, "x", "y"),
            stream_mode=["values", "updates", "events"],
        )
    )
    assert parts[0].event == "metadata"
    assert [p.data for p in parts if p.event == "values"][-1] == {"outputs": ["x", "y"]}
    assert [p.data for p in parts if p.event == "updates"] == [{"ship": "x"}, {"ship": "y"}]
    assert [p.data["event"] for p in parts if p.event == "events"][-1] == "run_completed"


def test_an_interrupt_is_answered_with_command_resume(sdk: SyncLangGraphClient) -> None:
    """A pending request is an interrupt; Command(resume=...) on a new run answers it."""
    tid = sdk.threads.create()["thread_id"]
    waiting: Any = sdk.runs.wait(tid, "orders", input={"id": 3})
    [interrupt] = waiting["__interrupt__"]
    state = sdk.threads.get_state(tid)
    assert state["interrupts"] == [interrupt]
    assert state["tasks"][0]["interrupts"] == [interrupt]
    assert sdk.threads.get(tid)["status"] == "interrupted"
    done: Any = sdk.runs.wait(
        tid, "orders", command={"resume": {"approved": False, "note": "no budget"}}
    )
    assert done == {"outputs": ["rejected 3: no budget"]}


def test_the_async_client_streams_and_waits(server: Server) -> None:
    """The async client does the same over its own event loop."""

    async def use() -> tuple[Any, list[Any]]:
        async with get_client(url=server.url, api_key=None) as client:
            tid = (await client.threads.create())["thread_id"]
            waited = await client.runs.wait(tid, "orders", input=_order(1, "a"))
            parts = [
                p
                async for p in client.runs.stream(
                    tid, "orders", input=_order(2, "b"), stream_mode="updates"
                )
            ]
            return waited, parts

    waited, parts = asyncio.run(use())
    assert waited == {"outputs": ["a"]}
    assert [p.data for p in parts if p.event == "updates"] == [{"ship": "b"}]


def test_the_sdk_joins_a_run_and_a_thread_with_its_own_defaults(sdk: SyncLangGraphClient) -> None:
    """``runs.join_stream`` sends ``stream_mode=`` (empty: its None) and
    ``threads.join_stream`` ``run_modes``, ``lifecycle`` or ``state_update``."""
    tid = sdk.threads.create()["thread_id"]
    run = sdk.runs.create(tid, "orders", input=_order(1, "a", "b"), stream_mode="updates")
    joined = list(sdk.runs.join_stream(tid, run["run_id"]))
    assert joined[0].event == "metadata" and joined[0].data["run_id"] == run["run_id"]
    assert [p.data for p in joined if p.event == "updates"] == [{"ship": "a"}, {"ship": "b"}]

    def until_run_completed(mode: Any) -> list[Any]:
        parts = []
        for part in sdk.threads.join_stream(tid, stream_mode=mode):
            parts.append(part)
            if part.event == "events" and part.data["event"] == "run_completed":
                return parts
        raise AssertionError(f"the thread's stream ended before its run did: {parts}")

    lifecycle = until_run_completed("lifecycle")
    assert [p.data["event"] for p in lifecycle] == ["run_started", "run_completed"]
    everything = until_run_completed("run_modes")
    assert [p.data["event"] for p in everything] == [
        "run_started",
        "output",
        "output",
        "run_completed",
    ]
    states = until_run_completed(["state_update", "lifecycle"])
    assert [p.data for p in states if p.event == "values"] == [
        {"outputs": ["a"]},
        {"outputs": ["a", "b"]},
    ]
