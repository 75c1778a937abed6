"""The inspector's server over HTTP: pages, safety checks, actions, a damaged store, the CLI.

A real server on 127.0.0.1 (uvicorn), read with urllib. The same flows through a
real browser are in ``test_ui_browser.py``.
"""

from __future__ import annotations

import html
import re
import signal
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import actorflow as af
from actorflow.storage import Checkpoint
from actorflow.ui import Inspector
from tests.support import ui_scenario
from tests.support.signals import CHILD_PRELUDE

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
        assert 'data-session="order-1"' in index and 'data-session="order-1-fork"' in index
        assert index.count("state-waiting") == 2
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
        assert status == 400 and "bool" in body
        status, body = post(url, {**form, "request_id": "nope", "answer": "true"})
        assert status == 400 and "nope" in body
        status, body = post(url, {**form, "answer": "false"})
        assert status == 200 and "Session" in body  # redirected to the session page
        inspector.app.join()
        (action,) = inspector.app.actions
        assert action.status == "completed", action.error
        assert action.outputs == "['approved=False']"
    final = latest_final(store, "order-1")
    assert final.parent_id is not None and final.id != cp.id


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
            s.respond({"review:5:0": True})
        _, after = get(f"{inspector.url}/sessions/order-1/live")
        first, second = version.search(before), version.search(after)
        assert first and second and first.group(1) != second.group(1)
        assert "state-idle" in after
        # A poll that names the version it shows gets "nothing new" until it changes.
        current = urllib.parse.quote(html.unescape(second.group(1)))
        assert get(f"{inspector.url}/sessions/order-1/live?v={current}") == (204, "")
        stale = urllib.parse.quote(html.unescape(first.group(1)))
        assert get(f"{inspector.url}/sessions/order-1/live?v={stale}")[0] == 200


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
    code = (
        CHILD_PRELUDE + "import sys; from actorflow.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, "ui", str(path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert url, line + (child.stderr.read() if child.stderr else "")
        status, page = get(url.group(0) + "/")
        assert status == 200 and "order-1" in page and "Read-only" in page
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


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


def test_a_stopped_lineage_is_running_while_leased_and_failed_after(
    workflow: af.Workflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lineage that stopped before going idle: running while an owner holds the
    session (the index names the owner), failed once nobody does and it went quiet."""
    from actorflow.ui import _model

    store = af.MemoryStore()
    with workflow.session("stuck", store=store) as s, pytest.raises(af.SuperstepLimitExceeded):
        s.run(ui_scenario.Order(9, ["x"]), max_supersteps=1)
    lease = store.acquire_lease("stuck", "pid 4242 (worker-3)", 60)
    with Inspector(store, port=0) as inspector:
        _, index = get(inspector.url + "/")
        assert "state-running" in index and "open by pid 4242 (worker-3)" in index
        store.release_lease(lease)
        monkeypatch.setattr(_model, "RUNNING_WINDOW", 0.0)
        _, index = get(inspector.url + "/")
        assert "state-failed" in index and "open by" not in index
