"""The inspector in a real headless Chromium (the system's), driven as a person would.

Playwright drives ``/usr/bin/chromium`` (never a browser of its own: nothing is
downloaded). Screenshots go to the test's temp folder. With
``ACTORFLOW_REFRESH_PICTURES=1`` (``make pictures``) the session page's also
becomes ``docs/inspector.png``, the failed session's ``docs/inspector-failed.png``
and the trace's ``docs/trace.png``, the README's
pictures; a plain test run never writes into the checkout. Under ``CI=true`` a
missing Chromium is a failure, elsewhere a skip.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.ui import Inspector
from tests.support import ui_scenario

CHROMIUM = os.environ.get("ACTORFLOW_CHROMIUM", "/usr/bin/chromium")
DOCS = Path(__file__).resolve().parent.parent / "docs"
REFRESH_PICTURES = os.environ.get("ACTORFLOW_REFRESH_PICTURES") == "1"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # A foreign name that resolves to loopback: the page's DNS-rebinding check.
    "--host-resolver-rules=MAP rebind.test 127.0.0.1",
]

if os.environ.get("CI") == "true":
    from playwright import sync_api  # under CI a missing driver fails, never skips
else:
    sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/chromium.sh installs it")
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Chromium for the module, on a fresh profile folder."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1200, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    made = browser.new_page()
    made.set_default_timeout(20_000)
    yield made
    made.close()


@pytest.fixture
def store() -> af.MemoryStore:
    made = af.MemoryStore()
    ui_scenario.make_store(made)
    return made


def shot(page: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    # Written here rather than by Playwright (path=...), whose loop would start a
    # worker thread for the file that outlives the test.
    path.write_bytes(page.screenshot(full_page=True))
    return path


def refresh_picture(picture: Path, name: str) -> None:
    """Copy a screenshot over the README's picture ``docs/<name>``, when asked to."""
    if REFRESH_PICTURES:
        shutil.copyfile(picture, DOCS / name)


def test_find_the_session_open_lineage_checkpoint_diff_and_answer(
    page: Any, store: af.MemoryStore, tmp_path: Path
) -> None:
    """Through the page only: find the session, open its lineage, open a checkpoint,
    diff two states, answer the pending request, and see the run finish without a reload."""
    with ui_scenario.workflow() as wf, Inspector(store, workflow=wf, port=0) as inspector:
        page.goto(inspector.url)
        assert page.title() == "Sessions - actorflow inspector"
        row = page.locator('tr[data-session="order-1"]')
        assert row.locator(".state").inner_text() == "waiting"
        shot(page, tmp_path, "index")
        with page.expect_navigation():  # a click returns before the next page has loaded
            row.locator("a.session-link").click()

        assert page.title() == "Session order-1 - actorflow inspector"
        lineage = page.locator("svg#lineage")
        assert lineage.locator("circle.node").count() == len(store.list(session="order-1")) + 1
        assert f"fork into session {ui_scenario.FORK}" in (lineage.text_content() or "")
        assert page.locator("svg#graph g.gnode").count() == 2
        assert page.locator('svg#graph g.gnode.asking[data-executor="review"]').count() == 1
        session_png = shot(page, tmp_path, "session")
        refresh_picture(session_png, "inspector.png")

        # The response checkpoint: answers queued, not yet handled.
        with page.expect_navigation():
            lineage.locator("a.node-response").first.click()
        assert page.title().startswith("Checkpoint ")
        assert page.locator("#cp-kind").inner_text() == "response"
        assert page.locator("#answered li").inner_text() == "review:2:0"
        assert "True" in page.locator("#inflight").inner_text()  # the answer, queued
        intake = page.locator('section.executor[data-executor="intake"] pre')
        assert ui_scenario.SCRIPT in intake.inner_text()  # shown as text, never run
        assert page.evaluate("window.__pwned") is None
        shot(page, tmp_path, "checkpoint")

        page.select_option("#diff-executor", "review")
        first = page.locator("#diff-against option").first.get_attribute("value")
        page.select_option("#diff-against", first)
        with page.expect_navigation():
            page.click("#diff-button")
        assert page.title() == "Diff of review - actorflow inspector"
        assert page.locator("#diff .add").count() >= 1
        shot(page, tmp_path, "diff")

        page.goto(f"{inspector.url}/sessions/order-1")
        drawn = page.locator("svg#lineage circle.node").count()
        # The answer is a Decision: a form of its fields, a checkbox and a text input.
        form = page.locator('#pending .request[data-request="review:5:0"] form.answer-fields')
        form.get_by_label("approved").check()
        form.get_by_label("note").fill("the customer asked twice")
        with page.expect_navigation():
            form.locator("button").click()
        assert page.url == f"{inspector.url}/sessions/order-1", page.content()
        page.evaluate("window.__stay = 'same page'")
        # The run goes on in the server; the page follows it without reloading.
        page.locator("#session-state", has_text="idle").wait_for()
        assert page.evaluate("window.__stay") == "same page"
        assert page.locator(".action-completed .outputs").inner_text() == "['approved=True']"
        assert page.locator("#pending").count() == 0
        # The run's checkpoints (response, steps, final) joined the picture.
        assert page.locator("svg#lineage circle.node").count() >= drawn + 3
        shot(page, tmp_path, "answered")
    assert store.latest(session="order-1") is not None


def test_a_failed_session_found_by_its_state_explains_itself(
    page: Any, store: af.MemoryStore, tmp_path: Path
) -> None:
    """Filter the sessions by "failed", open the one found: the page says which executor
    failed with which error after how many restarts, and its timeline shows the run's
    input, each failure with its traceback, each restart, the rollback and the end."""
    with Inspector(store, port=0) as inspector:
        page.goto(inspector.url)
        page.select_option("#state-filter", "failed")
        with page.expect_navigation():
            page.click("#find-button")
        rows = page.locator("#sessions tbody tr")
        assert rows.count() == 1
        assert ui_scenario.POISON in rows.locator(".reason").inner_text()
        assert rows.locator(".reason").inner_text().startswith("review: ValueError: order 7")
        with page.expect_navigation():
            rows.locator("a.session-link").click()

        assert page.title() == f"Session {ui_scenario.FAILED} - actorflow inspector"
        assert page.locator("#session-state").inner_text() == "failed"
        why = page.locator("#why-failed")
        assert page.locator("#failed-executor").inner_text() == "review"
        assert page.locator("#failed-error-type").inner_text() == "ValueError"
        assert ui_scenario.POISON in page.locator("#failed-error").inner_text()
        assert page.locator("#failed-restarts").inner_text().startswith("3 ")
        assert "in on_order" in why.locator("#failed-traceback").inner_text()
        run = page.locator("#runs tbody tr")
        assert "Order(id=7, items=['soup', 'poison'])" in run.locator(".run-input").inner_text()
        assert run.locator(".run-status").inner_text() == "failed"

        timeline = page.locator("#timeline")
        failures = timeline.locator('li[data-kind="executor_failed"]')
        assert failures.count() == 4
        assert "review failed: ValueError: order 7" in failures.last.inner_text()
        failures.last.locator("summary").click()
        assert "raise ValueError" in failures.last.locator("pre.traceback").inner_text()
        assert timeline.locator('li[data-kind="run_restarted"]').count() == 3
        assert (
            "rolled back" in timeline.locator('li[data-kind="superstep_rolled_back"]').inner_text()
        )
        assert (
            "run failed: review: ValueError"
            in timeline.locator('li[data-kind="run_failed"]').inner_text()
        )
        picture = shot(page, tmp_path, "failed")
        refresh_picture(picture, "inspector-failed.png")
        with page.expect_navigation():
            timeline.locator('li[data-kind="run_failed"] a.cp-link').click()
        assert page.locator("#cp-kind").inner_text() == "halt"


def test_outputs_appear_per_run(page: Any, store: af.MemoryStore) -> None:
    """Each run of a session lists its outputs, newest run first, and the timeline too."""
    with Inspector(store, port=0) as inspector:
        page.goto(f"{inspector.url}/sessions/order-1")
        runs = page.locator("#runs tbody tr")
        assert runs.count() == 3
        assert runs.nth(0).locator(".output").all_inner_texts() == ["'received order 2'"]
        assert runs.nth(1).locator(".output").all_inner_texts() == ["'approved=True'"]
        assert runs.nth(2).locator(".output").all_inner_texts() == ["'received order 1'"]
        assert runs.nth(0).locator(".run-status").inner_text() == "waiting"
        outputs = page.locator('#timeline li[data-kind="output"]')
        assert outputs.count() == 3


def test_search_filter_and_pages_of_sessions(page: Any, store: af.MemoryStore) -> None:
    """A search by id, a state filter and the pages, through the form and the links."""
    ui_scenario.crowd(store, 60)
    with Inspector(store, port=0) as inspector:
        page.goto(inspector.url)
        rows = page.locator("#sessions tbody tr")
        assert rows.count() == 50
        assert page.locator("#page-of").inner_text() == "page 1 of 2 · 63 matching"
        with page.expect_navigation():
            page.click("#older")
        assert rows.count() == 13
        assert page.locator("#page-of").inner_text().startswith("page 2 of 2")
        with page.expect_navigation():
            page.click("#newer")
        assert rows.count() == 50
        page.fill("#search", "crowd-01")
        with page.expect_navigation():
            page.press("#search", "Enter")
        assert rows.count() == 10
        page.select_option("#state-filter", "waiting")
        with page.expect_navigation():
            page.click("#find-button")
        names = [r.get_attribute("data-session") for r in rows.all()]
        assert names == [f"crowd-01{n}" for n in (9, 8, 7, 6, 4, 3, 2, 1)]
        assert all(s.inner_text() == "waiting" for s in rows.locator(".state").all())
        page.fill("#search", "nobody")
        with page.expect_navigation():
            page.press("#search", "Enter")
        assert "No session matches" in page.locator("#no-match").inner_text()


def test_a_long_fork_label_is_fully_visible(page: Any, store: af.MemoryStore) -> None:
    """The lineage's lane labels (a fork into a session with a long id, and the fork's
    own "forked from ... at <checkpoint id>") are whole and inside their picture."""
    with Inspector(store, port=0) as inspector:
        for sid, wanted in (
            ("order-1", f"fork into session {ui_scenario.FORK}"),
            (ui_scenario.FORK, "forked from order-1 at "),
        ):
            page.goto(f"{inspector.url}/sessions/{sid}")
            label = page.locator("svg#lineage text.lane-label", has_text=wanted)
            assert label.count() == 1
            text = label.text_content() or ""
            assert text.startswith(wanted) and "…" not in text
            if sid == ui_scenario.FORK:
                assert len(text) == len(wanted) + len(store.list(session="order-1")[0].id)
            box = label.bounding_box()
            picture = page.locator("svg#lineage").bounding_box()
            assert box is not None and picture is not None
            assert box["x"] >= picture["x"]
            assert box["x"] + box["width"] <= picture["x"] + picture["width"], (box, picture)
            # The picture is as wide as the text, which the browser measures itself.
            measured = label.evaluate("t => t.getComputedTextLength()")
            assert box["width"] >= measured - 1


def test_markup_in_state_and_requests_stays_text(
    page: Any, store: af.MemoryStore, tmp_path: Path
) -> None:
    """Every decoded value is escaped: no script runs, the markup reads as text."""
    with Inspector(store, port=0) as inspector:
        final = next(c for c in reversed(store.list(session="order-1")) if c.kind.value == "final")
        page.goto(f"{inspector.url}/checkpoints/{final.id}")
        review = page.locator('section.executor[data-executor="review"] pre').inner_text()
        assert ui_scenario.IMG in review
        assert page.locator("img").count() == 0
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#read-only").is_visible()
        assert page.locator("form.answer-form").count() == 0
        shot(page, tmp_path, "escaped")


class _Attacker(BaseHTTPRequestHandler):
    """Another origin on loopback, whose page posts to the inspector on load."""

    target = ""
    timeout = 1  # an idle connection Chromium opened ahead of time closes, with its thread

    def do_GET(self) -> None:
        body = (
            f'<form id="f" method="post" action="{self.target}">'
            '<input name="request_id" value="review:5:0"><input name="answer" value="false">'
            '<input name="csrf" value="guessed"></form>'
            '<script>document.getElementById("f").submit()</script>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_cross_site_posts_and_foreign_hosts_are_refused_in_the_browser(
    page: Any, store: af.MemoryStore, tmp_path: Path
) -> None:
    """A page of another origin that submits an answer is refused, and nothing runs; the
    inspector reached under another host name (DNS rebinding) answers nothing."""
    with ui_scenario.workflow() as wf, Inspector(store, workflow=wf, port=0) as inspector:
        final = next(c for c in reversed(store.list(session="order-1")) if c.kind.value == "final")
        _Attacker.target = f"{inspector.url}/checkpoints/{final.id}/respond"
        attacker = ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
        thread = threading.Thread(target=attacker.serve_forever, name="attacker")
        thread.start()
        try:
            page.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
            page.wait_for_url(f"{inspector.url}/**")
            assert page.title() == "Refused - actorflow inspector"
            assert "cross-site request refused" in page.locator("#error").inner_text()
            shot(page, tmp_path, "refused")
        finally:
            attacker.shutdown()
            attacker.server_close()
            thread.join(10)
        assert inspector.app.actions == []
        response = page.goto(f"http://rebind.test:{inspector.port}/")
        assert response is not None and response.status == 421
        assert "order-1" not in page.content()


def test_a_traced_run_drawn_for_the_readme(page: Any, tmp_path: Path) -> None:
    """The spans of a traced fan-out/fan-in run with a restart, drawn as a waterfall:
    saved as docs/trace.png, so the README's picture of a trace is a real one."""
    from tests.support import trace_page

    spans = trace_page.traced_run()
    names = [s.name for s in spans]
    assert names.count("executor.process right") == 2 and "executor.restart" in names
    page.set_content(trace_page.waterfall(spans))
    assert page.title() == "A traced run"
    assert page.locator("svg rect").count() == len(spans)
    assert page.locator("svg path.l").count() >= 4  # each send linked to its receiver
    picture = tmp_path / "trace.png"
    picture.write_bytes(page.locator("body").screenshot())
    refresh_picture(picture, "trace.png")
