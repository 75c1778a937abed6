"""Service: a workflow behind an HTTP API that the langgraph-sdk client speaks.

The command is ``actorflow serve examples.service:build --store runs.db``; here the
same server runs in-process on a free port of 127.0.0.1, a client creates a thread,
runs it, streams a run, answers a request (an interrupt), reads the state, deletes
the thread, and the server stops. Needs ``actorflow[serve]`` and, for the client,
``langgraph-sdk``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph_sdk import get_sync_client

import actorflow as af
from actorflow.serve import Server, ServiceApp


@af.message
@dataclass
class Expense:
    employee: str
    cents: int


@af.message
@dataclass
class Decision:
    approved: bool
    note: str = ""


class Approvals(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.decided: list[str] = []

    @af.handler
    def on_expense(self, expense: Expense, ctx: af.Context[Any]) -> None:
        if expense.cents < 10_000:
            ctx.output(f"auto-approved {expense.employee}")
        else:
            ctx.request(expense, Decision)

    @af.response_handler
    def on_decision(self, expense: Expense, decision: Decision, ctx: af.Context[Any]) -> None:
        self.decided.append(expense.employee)
        verdict = "approved" if decision.approved else "rejected"
        ctx.output(f"{verdict} {expense.employee} ({decision.note})")


def build() -> af.Workflow:
    return af.WorkflowBuilder("expenses", start=Approvals("approvals")).build()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = af.SQLiteStore(str(Path(tmp) / "runs.db"))
        with build() as wf, Server(ServiceApp(wf, store, token="s3cret")) as server:
            client = get_sync_client(url=server.url, api_key="s3cret")
            thread = client.threads.create(metadata={"team": "finance"})
            tid = thread["thread_id"]
            small: Any = {"employee": "ada", "cents": 1_200}
            print("wait:", client.runs.wait(tid, "expenses", input=small))
            big: Any = {"employee": "bob", "cents": 25_000}
            for part in client.runs.stream(tid, "expenses", input=big, stream_mode="updates"):
                print("stream:", part.event, part.data)
            [interrupt] = client.threads.get_state(tid)["interrupts"]
            print("waiting on:", interrupt["value"])
            answer: Any = {"approved": True, "note": "receipt attached"}
            print("answer:", client.runs.wait(tid, "expenses", command={"resume": answer}))
            state: Any = client.threads.get_state(tid)
            print("state:", state["values"])
            assert state["values"] == {"approvals": {"decided": ["bob"]}}
            print("threads:", [t["thread_id"] == tid for t in client.threads.search()])
            client.threads.delete(tid)  # its state and history leave the store
            print("after delete:", client.threads.search(), store.sessions())
            assert client.threads.search() == [] and store.sessions() == []
            client.close()
        store.close()


if __name__ == "__main__":
    main()
