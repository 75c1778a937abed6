"""Inspector: browse a store's sessions in a local web page (``actorflow[ui]``).

The command is ``actorflow ui runs.db [--workflow module:attr]``; here the same
server runs in-process on a free port of 127.0.0.1, is read once over HTTP, and stops.
"""

from __future__ import annotations

import re
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import actorflow as af
from actorflow.ui import Inspector


@af.message
@dataclass
class Ticket:
    id: int
    text: str


class Triage(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_ticket(self, ticket: Ticket, ctx: af.Context) -> None:
        self.seen.append(ticket.id)
        ctx.request(f"escalate ticket {ticket.id}: {ticket.text}?", bool)

    @af.response_handler
    def on_answer(self, question: str, escalate: bool, ctx: af.Context) -> None:
        ctx.output(f"{question} -> {escalate}")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = af.SQLiteStore(str(Path(folder) / "runs.db"))
        workflow = af.WorkflowBuilder("support", start=Triage("triage")).build()
        with workflow, workflow.session("ticket-7", store=store) as session:
            session.run(Ticket(7, "printer on fire"))  # now waiting for an answer
        # With workflow=..., the page could also answer the request and run again.
        with Inspector(store, port=0) as inspector:
            print("inspector on", inspector.url)
            direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with direct.open(inspector.url + "/sessions/ticket-7", timeout=20) as response:
                page = response.read().decode()
        store.close()
    state = re.search(r'id="session-state">(\w+)<', page)
    assert state is not None and state.group(1) == "waiting"
    print("session ticket-7 is", state.group(1), "- pending:", "escalate ticket 7" in page)


if __name__ == "__main__":
    main()
