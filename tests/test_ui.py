"""The inspector's server over HTTP: pages, safety checks, actions, a damaged store, the CLI.

A real server on 127.0.0.1 (uvicorn), read with urllib. The same flows through a
real browser are in ``test_ui_browser.py``.
"""

from __future__ import annotations

import dataclasses
import html
import re
import sqlite3
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.runtime import decode_runtime
from actorflow.runtime.checkpoints import at_rest
from actorflow.storage import Checkpoint, new_checkpoint_id
from actorflow.ui import Inspector
from tests.support import ui_scenario
from tests.support.signals import cli_child

# Straight to 127.0.0.1: never through a proxy the environment may name.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with OPENER.open(request, timeout=20) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def post(url: str, form: dict[str, str], headers: dict[str, str] | None = None) -> tuple[int, str]:
    data = urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST")
    try:
        with OPENER.open(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def token_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no action form"
    return found.group(1)


@pytest.fixture
def store() -> af.MemoryStore:
    made = af.MemoryStore()
    ui_scenario.make_store(made)
    return made


@pytest.fixture
def workflow() -> Iterator[af.Workflow]:
    with ui_scenario.workflow() as wf:
        yield wf


def latest_final(store: af.CheckpointStore, session: str) -> Checkpoint:
    return next(c for c in reversed(store.list(session=session)) if c.kind.value == "final")


def test_index_lists_sessions_with_state_and_the_pages_escape_every_value(
    store: af.MemoryStore,
) -> None:
    """Sessions with their state; a state holding markup arrives as escaped text."""
    with Inspector(store, port=0) as inspector:
        status, index = get(inspector.url + "/")
        assert status == 200
        assert "<title>Sessions - actorflow inspector</title>" in index
        assert 'data-session="order-1"' in index
        assert f'data-session="{ui_scenario.FORK}"' in index
        assert index.count("state-waiting") == 2 and index.count("state-failed") == 1
        assert "review: ValueError: order 7: " in html.unescape(index)  # the reason, listed
        cp = latest_final(store, "order-1")
        status, page = get(f"{inspector.url}/checkpoints/{cp.id}")
        assert status == 200
        assert "<script>window.__pwned" not in page and "<img src=x" not in page
        assert html.escape(ui_scenario.SCRIPT, quote=False) in page
        assert "onerror=&#34;window.__pwned" in page or "onerror=&quot;window.__pwned" in page
        assert (
            "script-src 'self'"
            in OPENER.open(inspector.url, timeout=20).headers["Content-Security-Policy"]
        )


def test_read_only_without_a_workflow_says_why_and_refuses_actions(
    store: af.MemoryStore,
) -> None:
    """No workflow: the page says it is read-only, shows no action, and refuses one."""
    cp = latest_final(store, "order-1")
    with Inspector(store, port=0) as inspector:
        _, page = get(f"{inspector.url}/sessions/order-1")
        assert "Read-only: no workflow was given" in page
        assert "answer-form" not in page
        status, body = post(
            f"{inspector.url}/checkpoints/{cp.id}/respond",
            {"csrf": inspector.app.token, "request_id": "review:5:0", "answer": "true"},
        )
        assert status == 409 and "Read-only" in body


def test_actions_need_the_token_and_the_own_origin_and_the_own_host(
    store: af.MemoryStore, workflow: af.Workflow
) -> None:
    """Cross-site posts, posts without the token, and a foreign Host are refused."""
    cp = latest_final(store, "order-1")
    with Inspector(store, workflow=workflow, port=0) as inspector:
        _, page = get(f"{inspector.url}/checkpoints/{cp.id}")
        token = token_of(page)
        url = f"{inspector.url}/checkpoints/{cp.id}/respond"
        form = {"request_id": "review:5:0", "answer": "true", "session": "order-1"}
        assert post(url, form)[0] == 403
        assert post(url, {**form, "csrf": "guess"})[0] == 403
        status, body = post(url, {**form, "csrf": token}, {"Origin": "http://127.0.0.1:1"})
        assert status == 403 and "cross-site request refused" in body
        status, body = post(url, {**form, "csrf": token}, {"Sec-Fetch-Site": "cross-site"})
        assert status == 403
        assert get(inspector.url + "/", {"Host": "rebind.example:80"})[0] == 421
        assert latest_final(store, "order-1").id == cp.id  # nothing ran


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[af.CheckpointStore]:
    made: af.CheckpointStore = (
        af.MemoryStore() if request.param == "memory" else af.SQLiteStore(str(tmp_path / "s.db"))
    )
    ui_scenario.make_store(made)
    yield made
    made.close()


def test_an_answer_is_validated_like_respond_then_runs_to_idle(
    any_store: af.CheckpointStore, workflow: af.Workflow
) -> None:
    """A wrong type is refused with the reason and nothing runs; a right one runs (the
    page reads the store while the run writes it)."""
    store = any_store
    cp = latest_final(store, "order-1")
    with Inspector(store, workflow=workflow, port=0) as inspector:
        _, page = get(f"{inspector.url}/checkpoints/{cp.id}")
        url = f"{inspector.url}/checkpoints/{cp.id}/respond"
        form = {"csrf": token_of(page), "request_id": "review:5:0", "session": "order-1"}
        status, body = post(url, {**form, "answer": '"yes"'})
        assert status == 400 and "Decision" in body
        status, body = post(url, {**form, "answer": '{"approved": "no", "note": ""}'})
        assert status == 400 and "approved" in body and "bool" in body
        status, body = post(url, {**form, "request_id": "nope", "answer": "true"})
        assert status == 400 and "nope" in body
        status, body = post(url, {**form, "answer": '{"approved": false, "note": "no cake"}'})
        assert status == 200 and "Session" in body  # redirected to the session page
        inspector.app.join()
        (action,) = inspector.app.actions
        assert action.status == "completed", action.error
        assert action.outputs == "['approved=False']"
    final = latest_final(store, "order-1")
    assert final.parent_id is not None and final.id != cp.id


def test_an_answer_sent_twice_runs_once(store: af.MemoryStore, workflow: af.Workflow) -> None:
    """The same form posted again (a double click, the back button) after its answer
    ran is refused: the session has gone on, and the handler does not run again."""
    cp = latest_final(store, "order-1")
    with Inspector(store, workflow=workflow, port=0) as inspector:
        _, page = get(f"{inspector.url}/checkpoints/{cp.id}")
        url = f"{inspector.url}/checkpoints/{cp.id}/respond"
        form = {
            "csrf": token_of(page),
            "request_id": "review:5:0",
            "session": "order-1",
            "answer": '{"approved": true, "note": ""}',
        }
        assert post(url, form)[0] == 200
        inspector.app.join()
        cuts = store.list(session="order-1")
        status, body = post(url, form)
        assert status == 409 and "Answered already" in body and "fork" in body
        inspector.app.join()
        assert len(inspector.app.actions) == 1
        assert store.list(session="order-1") == cuts  # nothing ran, nothing was written


def test_a_session_the_store_does_not_hold_is_404(store: af.MemoryStore) -> None:
    with Inspector(store, port=0) as inspector:
        status, body = get(f"{inspector.url}/sessions/nobody")
        assert status == 404 and "no checkpoint of session" in html.unescape(body)
        assert get(f"{inspector.url}/sessions/order-1")[0] == 200


def test_run_again_from_an_older_checkpoint_forks_into_a_new_session(
    store: af.MemoryStore, workflow: af.Workflow
) -> None:
    """'Run again from here' on an entry checkpoint re-runs its input in a new session."""
    entry = next(c for c in store.list(session="order-1") if c.kind.value == "entry")
    with Inspector(store, workflow=workflow, port=0) as inspector:
        _, page = get(f"{inspector.url}/checkpoints/{entry.id}")
        assert "Run again from here (fork)" in page
        status, _ = post(
            f"{inspector.url}/checkpoints/{entry.id}/run",
            {"csrf": token_of(page), "session": "again"},
        )
        assert status == 200
        inspector.app.join()
        (action,) = inspector.app.actions
        assert action.status == "idle_with_pending_requests", action.error
        assert store.list(session="again")[0].parent_id == entry.id
        _, live = get(f"{inspector.url}/sessions/again/live")
        assert 'id="live"' in live and "state-waiting" in live


def test_the_live_fragment_changes_when_a_checkpoint_is_added(
    store: af.MemoryStore, workflow: af.Workflow
) -> None:
    """The fragment the page polls carries a version that moves with the lineage."""
    with Inspector(store, port=0) as inspector:
        version = re.compile(r'data-version="([^"]+)"')
        _, before = get(f"{inspector.url}/sessions/order-1/live")
        with workflow.resume(store, session="order-1") as s:
            s.respond({"review:5:0": ui_scenario.Decision(True, "")})
        _, after = get(f"{inspector.url}/sessions/order-1/live")
        first, second = version.search(before), version.search(after)
        assert first and second and first.group(1) != second.group(1)
        assert "state-idle" in after
        # A poll that names the version it shows gets "nothing new" until it changes.
        current = urllib.parse.quote(html.unescape(second.group(1)))
        assert get(f"{inspector.url}/sessions/order-1/live?v={current}") == (204, "")
        stale = urllib.parse.quote(html.unescape(first.group(1)))
        assert get(f"{inspector.url}/sessions/order-1/live?v={stale}")[0] == 200


class _FinishingStore(af.MemoryStore):
    """A store that holds the run answering from the page just after its final cut is
    saved, until a page render, armed by the test, reads an executor's state: the run
    then ends (and the inspector's thread for it) in the middle of that render."""

    def __init__(self) -> None:
        super().__init__()
        self.pausing = threading.Event()
        self.final_saved = threading.Event()
        self.armed = threading.Event()
        self.go = threading.Event()

    def save_cut(self, cut: Any, blobs: Any, lease: Any = None) -> None:
        super().save_cut(cut, blobs, lease)
        if self.pausing.is_set() and cut.kind == "final" and not self.final_saved.is_set():
            self.final_saved.set()
            assert self.go.wait(20), "no render reached the armed store"

    def load_blob(self, digest: str) -> bytes:
        if self.armed.is_set() and not self.go.is_set():
            self.go.set()
            (run,) = [t for t in threading.enumerate() if t.name == "inspector-run-order-1"]
            run.join(20)
            assert not run.is_alive()
        return super().load_blob(digest)


def test_a_run_that_ends_while_its_page_renders_is_shown_ended_by_the_next_poll(
    workflow: af.Workflow,
) -> None:
    """The live fragment's version and the state it shows are read at one moment: a run
    that ends in the middle of a render leaves a fragment whose version the next poll
    finds stale, so the page never stays on "running" after the run ended."""
    store = _FinishingStore()
    ui_scenario.make_store(store)
    store.pausing.set()
    cp = latest_final(store, "order-1")
    version = re.compile(r'data-version="([^"]+)"')
    with Inspector(store, workflow=workflow, port=0) as inspector:
        form = {"csrf": inspector.app.token, "request_id": "review:5:0", "session": "order-1"}
        answer = '{"approved": true, "note": ""}'
        url = f"{inspector.url}/checkpoints/{cp.id}/respond"
        assert post(url, {**form, "answer": answer})[0] == 200
        assert store.final_saved.wait(20)
        store.armed.set()
        _, during = get(f"{inspector.url}/sessions/order-1/live")
        assert store.go.is_set()
        shown = version.search(during)
        assert shown, during
        polled = urllib.parse.quote(html.unescape(shown.group(1)))
        status, after = get(f"{inspector.url}/sessions/order-1/live?v={polled}")
        assert "state-running" in during  # the render began while the run went on
        assert status == 200 and "state-idle" in after, (status, after)


def test_a_damaged_store_shows_its_errors_and_the_server_keeps_serving(tmp_path: Path) -> None:
    """A corrupt record and a corrupt blob: pages show what failed, with status 200."""
    path = tmp_path / "runs.db"
    store = af.SQLiteStore(str(path))
    ui_scenario.make_store(store)
    cp = latest_final(store, "order-1")
    digest = cp.executors["intake"][-1]
    store.close()
    db = sqlite3.connect(path)
    db.execute("update blobs set data = x'00ff00' where digest = ?", (digest,))
    db.commit()
    db.close()
    store = af.SQLiteStore(str(path))
    try:
        with Inspector(store, port=0) as inspector:
            status, page = get(f"{inspector.url}/checkpoints/{cp.id}")
            assert status == 200
            assert "Problems reading the store" in page and "cannot show this state" in page
            status, diff = get(f"{inspector.url}/diff?executor=intake&a={cp.parent_id}&b={cp.id}")
            assert status == 200 and "errors" in diff
            status, missing = get(f"{inspector.url}/checkpoints/no-such-id")
            assert status == 404 and "Checkpoint not found" in missing
            assert get(inspector.url + "/")[0] == 200
    finally:
        store.close()


def test_the_cli_serves_a_store_on_loopback(tmp_path: Path) -> None:
    """``actorflow ui STORE --port 0`` prints its URL on 127.0.0.1 and serves the index."""
    path = tmp_path / "runs.db"
    store = af.SQLiteStore(str(path))
    ui_scenario.make_store(store)
    store.close()
    # The child handles SIGINT itself: the tests may run with it ignored (nohup).
    with cli_child("ui", str(path), "--port", "0") as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert url, line + (child.stderr.read() if child.stderr else "")
        status, page = get(url.group(0) + "/")
        assert status == 200 and "order-1" in page and "Read-only" in page


def test_import_actorflow_and_its_cli_imports_no_web_framework() -> None:
    """The ui extra is imported only when a server is made."""
    code = (
        "import sys, actorflow, actorflow.cli\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'uvicorn', 'jinja2', 'opentelemetry') or m.startswith('actorflow.ui')]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_lineage_that_stopped_midway_is_running_while_leased_and_interrupted_after(
    workflow: af.Workflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lineage whose newest cut is neither final nor halt (its process stopped in the
    middle of a run): running while an owner holds the session (the index names the
    owner), interrupted once nobody does and it went quiet, and the page says so."""
    from actorflow.ui import _sessions

    store = af.MemoryStore()
    ui_scenario.make_store(store)
    # A copy of order-1's lineage up to a step cut: what a process killed there leaves.
    stopped = [c for c in store.list(session="order-1") if c.kind.value == "step"][-1]
    ids: dict[str, str] = {}
    for cp in store.list(session="order-1"):
        blobs = {d: store.load_blob(d) for ds in cp.executors.values() for d in ds}
        ids[cp.id] = new_checkpoint_id()
        parent = None if cp.parent_id is None else ids.get(cp.parent_id)
        copy = dataclasses.replace(cp, id=ids[cp.id], parent_id=parent, session="stuck", history=())
        store.save(copy, blobs)
        if cp.id == stopped.id:
            break
    lease = store.acquire_lease("stuck", "pid 4242 (worker-3)", 60)
    with Inspector(store, port=0) as inspector:
        _, index = get(inspector.url + "/?q=stuck")
        assert "state-running" in index and "open by pid 4242 (worker-3)" in index
        _, live = get(f"{inspector.url}/sessions/stuck/live")
        shown = re.search(r'data-version="([^"]+)"', live)
        assert shown and "state-running" in live
        store.release_lease(lease)
        monkeypatch.setattr(_sessions, "RUNNING_WINDOW", 0.0)
        _, index = get(inspector.url + "/?q=stuck")
        assert "state-interrupted" in index and "open by" not in index
        assert "the process running it stopped" in index
        # The open page's next poll shows it too, though the lineage did not change.
        polled = urllib.parse.quote(html.unescape(shown.group(1)))
        status, live = get(f"{inspector.url}/sessions/stuck/live?v={polled}")
        assert status == 200 and "state-interrupted" in live, (status, live)


def test_a_fork_saved_from_the_middle_of_a_run_is_idle_open_or_not(
    store: af.MemoryStore, workflow: af.Workflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork of a step cut, saved before its first run, has a step cut with messages
    in flight as its newest, as a process killed mid-run leaves; but no run wrote it:
    it is idle, neither running while it is open nor interrupted once it is closed."""
    from actorflow.ui import _sessions

    step = next(
        c
        for c in store.list(session="order-1")
        if c.kind.value == "step" and any(decode_runtime(c.runtime)["inbox"].values())
    )
    with Inspector(store, port=0) as inspector:
        with workflow.resume(store, checkpoint_id=step.id, as_session="forked") as fork:
            fork.save()
            saved = store.latest(session="forked")
            assert saved is not None and saved.kind.value == "step" and at_rest(saved)
            _, index = get(inspector.url + "/?q=forked")  # open: its lease is held
            assert "state-idle" in index and "state-running" not in index
        monkeypatch.setattr(_sessions, "RUNNING_WINDOW", 0.0)
        _, index = get(inspector.url + "/?q=forked")
        assert "state-idle" in index and "state-interrupted" not in index


def test_a_failed_session_says_why_and_its_timeline_tells_the_story(
    store: af.MemoryStore,
) -> None:
    """The failed session's page names the executor, the error, the restarts and the
    traceback; its timeline holds the run's start with its input, each failure and
    restart, the rollback and the end, each linked to the checkpoint holding it."""
    with Inspector(store, port=0) as inspector:
        _, page = get(f"{inspector.url}/sessions/{ui_scenario.FAILED}")
        text = html.unescape(page)
        assert 'id="why-failed"' in page
        assert re.search(r'id="failed-executor">review<', page)
        assert re.search(r'id="failed-error-type">ValueError<', page)
        assert f"order 7: {ui_scenario.POISON}" in text
        assert "3 used before the run gave up" in text
        assert 'raise ValueError(f"order {order.id}: {POISON}")' in text  # the traceback
        kinds = re.findall(r'data-kind="([a-z_]+)"', page)
        assert kinds[:2] == ["run_started", "checkpoint"]
        assert kinds.count("executor_failed") == 4 and kinds.count("run_restarted") == 3
        assert kinds[-4:] == [
            "executor_failed",
            "superstep_rolled_back",
            "run_failed",
            "checkpoint",
        ]
        assert "Order(id=7, items=[&#39;soup&#39;, &#39;poison&#39;])" in page  # the input
        halt = store.latest(session=ui_scenario.FAILED)
        assert halt is not None and halt.kind.value == "halt"
        assert page.count(f'href="/checkpoints/{halt.id}"') >= 9  # its entries link to it
        _, order = get(f"{inspector.url}/sessions/order-1")
        outputs = re.findall(r'<pre class="value output">([^<]*)</pre>', order)
        assert [html.unescape(o) for o in outputs] == [
            "'received order 2'",
            "'approved=True'",
            "'received order 1'",
        ]


def test_a_dataclass_answer_through_its_form_runs_to_idle(
    store: af.MemoryStore, workflow: af.Workflow
) -> None:
    """The request's answer type is a registered dataclass: the page offers a checkbox
    and a text input; what the form posts becomes a Decision, and the run goes on.
    A number that is not one is refused with the field's name, and nothing runs."""
    cp = latest_final(store, "order-1")
    with Inspector(store, workflow=workflow, port=0) as inspector:
        _, page = get(f"{inspector.url}/sessions/order-1")
        assert 'type="checkbox" name="field.approved"' in page
        assert 'type="text" name="field.note"' in page
        url = f"{inspector.url}/checkpoints/{cp.id}/respond"
        form = {"csrf": token_of(page), "request_id": "review:5:0", "session": "order-1"}
        status, body = post(url, {**form, "mode": "fields", "field.note": "fine"})
        assert status == 200, body
        inspector.app.join()
        (action,) = inspector.app.actions
        assert action.status == "completed", action.error
        assert action.outputs == "['approved=False']"  # an unticked box is False
    answered = [e for e in store.session_history("order-1") if e.kind == "request_answered"]
    assert len(answered) == 2


def test_the_sessions_list_searches_filters_and_pages(tmp_path: Path) -> None:
    """On an SQLiteStore (its one-query summary): a search by id substring, a filter
    by state with counts, and pages of 50, newest activity first."""
    store = af.SQLiteStore(str(tmp_path / "many.db"))
    try:
        ui_scenario.make_store(store)
        ui_scenario.crowd(store, 60)
        with Inspector(store, port=0) as inspector:
            _, first = get(inspector.url + "/")
            assert first.count("<tr data-session=") == 50
            assert "page 1 of 2 · 63 matching" in first
            _, second = get(inspector.url + "/?page=2")
            assert second.count("<tr data-session=") == 13
            rows = re.findall(r'<tr data-session="([^"]+)"', first + second)
            assert len(set(rows)) == 63
            _, found = get(inspector.url + "/?q=CROWD-04")
            assert re.findall(r'<tr data-session="([^"]+)"', found) == [
                f"crowd-04{n}" for n in range(9, -1, -1)
            ]
            _, failed = get(inspector.url + "/?state=failed")
            names = re.findall(r'<tr data-session="([^"]+)"', failed)
            assert sorted(names) == sorted(
                [ui_scenario.FAILED] + [f"crowd-{n:03d}" for n in range(0, 60, 5)]
            )
            assert ">failed (13)</option>" in failed and ">waiting (50)</option>" in failed
            _, none = get(inspector.url + "/?q=nobody")
            assert 'id="no-match"' in none
    finally:
        store.close()


def test_a_running_session_is_cancelled_from_its_page(tmp_path: Path) -> None:
    """A session another process runs shows a cancel button while it runs. The button
    (with the page's token) asks the holder through the store, and the run ends
    cancelled; once nothing runs, the page shows no button and a post says so."""
    from tests.runtime.test_cancel_requests import ticking

    path = str(tmp_path / "runs.db")
    with (
        ticking(limit=2000) as wf,
        af.SQLiteStore(path) as runner_store,
        af.SQLiteStore(path) as ui_store,
        wf.session("s", store=runner_store) as session,
    ):
        ended: list[af.Event] = []
        started = threading.Event()

        def run() -> None:
            for event in session.stream(0):
                if isinstance(event, af.OutputEvent) and event.value == 2:
                    started.set()
                ended[:] = [event]

        runner = threading.Thread(target=run)
        runner.start()
        try:
            assert started.wait(30)
            with Inspector(ui_store, workflow=wf, port=0) as inspector:
                _, page = get(f"{inspector.url}/sessions/s")
                assert 'action="/sessions/s/cancel"' in page and "state-running" in page
                url = f"{inspector.url}/sessions/s/cancel"
                token = token_of(page)
                assert post(url, {})[0] == 403  # no token
                status, body = post(url, {"csrf": token})
                assert status == 200 and "Session <span" in body, body  # back on its page
                runner.join(30)
                assert not runner.is_alive() and isinstance(ended[0], af.RunCancelledEvent)
                _, page = get(f"{inspector.url}/sessions/s")
                assert "/sessions/s/cancel" not in page
                status, body = post(url, {"csrf": token})
                assert status == 409 and "no run going on" in body
        finally:
            runner.join(30)
