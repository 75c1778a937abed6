"""The inspector's web application (Starlette, Jinja2 with autoescape).

Pages are rendered on the server; the one script (``static/live.js``) only refreshes
a session's lineage while it grows. Safety: the server binds 127.0.0.1 only; a
request whose ``Host`` is not this server's is refused (DNS rebinding); every
action is a POST that must carry this server's random token and come from its own
origin (cross-site requests); a Content-Security-Policy allows no inline script.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from actorflow.actors import from_json, type_named
from actorflow.errors import ActorflowError
from actorflow.runtime import Workflow, run_going_on
from actorflow.storage import CancelRequests, Checkpoint, CheckpointKind, CheckpointStore

from . import _model as model
from ._answer_form import answer_fields, form_data
from ._sessions import STATES, lease_owner, session_state, sessions_page
from ._svg import graph_picture, lineage_picture
from ._timeline import timeline
from ._values import decode_runtime_safely, show

__all__ = ["Action", "InspectorApp"]

HERE = Path(__file__).resolve().parent
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make form posts send Origin: null
    "Cache-Control": "no-store",
}


@dataclass
class Action:
    """A run started from the page (an answer, or a run from a checkpoint)."""

    what: str
    session: str
    started: float = field(default_factory=time.time)
    status: str = "running"
    outputs: str = ""
    error: str = ""


def _ago(ts: float) -> str:
    seconds = max(0, int(time.time() - ts))
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


class InspectorApp:
    """The ASGI app over one store; ``workflow`` enables the actions."""

    def __init__(self, store: CheckpointStore, workflow: Workflow | None = None) -> None:
        self.store = store
        self.workflow = workflow
        self.token = secrets.token_urlsafe(32)
        self.hosts: set[str] = set()
        """Accepted ``Host`` headers (set when the server knows its port)."""
        self.actions: list[Action] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        env.filters["ago"] = _ago
        env.filters["clock"] = lambda ts: time.strftime("%H:%M:%S", time.localtime(ts))
        env.filters["when"] = lambda ts: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
        self.env = env
        self.app = Starlette(
            routes=[
                Route("/", self.index),
                Route("/sessions/{sid:path}/live", self.live),
                Route("/sessions/{sid:path}/cancel", self.cancel, methods=["POST"]),
                Route("/sessions/{sid:path}", self.session),
                Route("/checkpoints/{cid}", self.checkpoint),
                Route("/checkpoints/{cid}/respond", self.respond, methods=["POST"]),
                Route("/checkpoints/{cid}/run", self.run_from, methods=["POST"]),
                Route("/diff", self.diff),
                Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
            ]
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if self.hosts and host not in self.hosts:
                response: Response = PlainTextResponse(
                    "unknown host: the inspector answers only as 127.0.0.1", status_code=421
                )
                await response(scope, receive, send)
                return

            async def send_with_headers(message: Any) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = list(message.get("headers", [])) + [
                        (k.lower().encode(), v.encode()) for k, v in HEADERS.items()
                    ]
                await send(message)

            await self.app(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send)

    def join(self, timeout: float = 30.0) -> None:
        """Wait for runs started from the page (the server is stopping)."""
        for thread in list(self._threads):
            thread.join(timeout)

    # --- rendering ----------------------------------------------------------------

    def page(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        values.setdefault("read_only_reason", self.read_only_reason)
        values.setdefault("token", self.token)
        return HTMLResponse(self.env.get_template(name).render(**values), status_code=status)

    @property
    def read_only_reason(self) -> str:
        if self.workflow is None:
            return (
                "Read-only: no workflow was given. Start with "
                "`actorflow ui STORE --workflow module:attr` to answer requests and run again."
            )
        return ""

    def _busy(self) -> set[str]:
        with self._lock:
            return {a.session for a in self.actions if a.status == "running"}

    def _load(self, cid: str) -> tuple[Checkpoint | None, str]:
        try:
            return self.store.load(cid), ""
        except Exception as exc:  # noqa: BLE001 - shown on the page
            return None, f"{type(exc).__name__}: {exc}"

    # --- pages --------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        q = request.query_params
        search, state = q.get("q", ""), q.get("state", "")
        state = state if state in STATES else ""
        try:
            number = int(q.get("page", "1"))
        except ValueError:
            number = 1
        found = sessions_page(self.store, self._busy(), search=search, state=state, page=number)
        return self.page(
            "index.html",
            found=found,
            rows=found.rows,
            errors=found.errors,
            search=search,
            state=state,
            states=STATES,
            store=_store_name(self.store),
        )

    def _session_values(self, sid: str) -> dict[str, Any]:
        # One copy of the page's runs, taken before the store is read, gives both the
        # state shown and the fragment's version: a run that ends during the render is
        # then newer than the version, and the next poll shows it ended. (Read twice, a
        # render could show "running" under the version of the ended run, which every
        # later poll found current.) The version holds the state shown for the same
        # reason: a lease let go changes it, not the lineage.
        actions = self._actions_of(sid)
        errors: list[str] = []
        cps: list[Checkpoint] = []
        try:
            cps = self.store.list(session=sid)
        except Exception as exc:  # noqa: BLE001 - a damaged lineage is shown, not raised
            errors.append(f"listing checkpoints failed: {type(exc).__name__}: {exc}")
        state, reason = "unknown", ""
        latest_view = None
        graph = None
        if cps:
            try:
                state, reason = self._state(sid, cps, actions)
            except Exception as exc:  # noqa: BLE001
                state = "damaged"
                errors.append(f"{type(exc).__name__}: {exc}")
            cuts = [c for c in cps if c.kind is not CheckpointKind.PARTIAL]
            if cuts:
                latest_view = model.checkpoint_view(self.store, cuts[-1])
                errors.extend(latest_view.errors)
                if latest_view.graph:
                    graph = _graph_of(latest_view)
        story = timeline(cps)
        errors.extend(story.errors)
        version = _version(cps, actions, state)
        forked_from, forks_out = self._forks(sid, cps)
        return {
            "sid": sid,
            "cps": list(reversed(cps)),
            "lineage": lineage_picture(cps, forked_from=forked_from, forks_out=forks_out),
            "state": state,
            "reason": reason,
            "timeline": story,
            "latest": latest_view,
            "graph": graph,
            "errors": errors,
            "actions": actions,
            "version": version,
        }

    def _forks(
        self, sid: str, cps: list[Checkpoint]
    ) -> tuple[tuple[str, str] | None, list[tuple[str, str, str]]]:
        """Where this session was forked from, and the sessions forked from it."""
        ids = {c.id for c in cps}
        forked_from = None
        if cps and cps[0].parent_id is not None and cps[0].parent_id not in ids:
            parent, _ = self._load(cps[0].parent_id)
            if parent is not None:
                forked_from = (parent.session, parent.id)
        forks_out: list[tuple[str, str, str]] = []
        try:
            for other in self.store.sessions():
                if other == sid:
                    continue
                for c in self.store.list(session=other):
                    if c.parent_id in ids:
                        forks_out.append((c.parent_id, other, c.id))
                        break
        except Exception:  # noqa: BLE001 - forks are a nicety; errors show elsewhere
            pass
        return forked_from, forks_out

    async def session(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        values = self._session_values(sid)
        if not values["cps"] and not values["errors"] and not values["actions"]:
            return self.page(
                "error.html",
                status=404,
                title="Session not found",
                error=f"the store holds no checkpoint of session {sid!r}: it was never run "
                "here, or it was deleted; the sessions it holds are listed on the first page",
            )
        return self.page("session.html", **values)

    def _state(
        self, sid: str, cps: list[Checkpoint], actions: list[Action], *, explain: bool = True
    ) -> tuple[str, str]:
        """(state, reason) of session ``sid``, whose records are ``cps`` (not empty) and
        whose runs started here are ``actions`` (see :func:`session_state`)."""
        return session_state(
            cps[-1],
            busy=any(a.status == "running" for a in actions),
            last_at=max(c.created_at for c in cps),
            now=time.time(),
            owner=lambda: lease_owner(self.store, sid),
            explain=explain,
        )

    def _actions_of(self, sid: str) -> list[Action]:
        """Copies of the last runs started here on ``sid``, as they are now (a run's
        thread fills in its own as it ends)."""
        with self._lock:
            return [replace(a) for a in self.actions if a.session == sid][-5:]

    async def live(self, request: Request) -> Response:
        """The session's live part; 204 when the caller's ``v`` is still current (a poll
        of an unchanged session lists its checkpoints and nothing else)."""
        sid = request.path_params["sid"]
        seen = request.query_params.get("v")
        if seen is not None:
            try:
                actions = self._actions_of(sid)
                cps = self.store.list(session=sid)
                state = self._state(sid, cps, actions, explain=False)[0] if cps else "unknown"
                current = _version(cps, actions, state)
            except Exception:  # noqa: BLE001 - the full render shows the error
                current = None
            if current == seen:
                return Response(status_code=204)
        return self.page("_live.html", **self._session_values(sid))

    async def checkpoint(self, request: Request) -> Response:
        cp, error = self._load(request.path_params["cid"])
        if cp is None:
            return self.page("error.html", status=404, title="Checkpoint not found", error=error)
        view = model.checkpoint_view(self.store, cp)
        try:
            lineage = list(self.store.list(session=cp.session))
        except Exception as exc:  # noqa: BLE001
            lineage = [cp]
            view.errors.append(f"listing the session failed: {type(exc).__name__}: {exc}")
        latest = [c for c in lineage if c.kind is not CheckpointKind.PARTIAL]
        is_latest = bool(latest) and latest[-1].id == cp.id
        fork_id = cp.session if is_latest else f"{cp.session}-fork-{cp.id[-8:]}"
        return self.page(
            "checkpoint.html",
            cp=cp,
            view=view,
            lineage=lineage,
            fork_id=fork_id,
            is_latest=is_latest,
            graph=_graph_of(view) if view.graph else None,
        )

    async def diff(self, request: Request) -> Response:
        q = request.query_params
        executor, a_id, b_id = q.get("executor", ""), q.get("a", ""), q.get("b", "")
        a, error_a = self._load(a_id)
        b, error_b = self._load(b_id)
        lines: list[tuple[str, str]] = []
        error = error_a or error_b
        if a is not None and b is not None:
            lines, error = model.diff_state(self.store, a, b, executor)
        return self.page("diff.html", executor=executor, a=a, b=b, lines=lines, error=error)

    # --- actions ------------------------------------------------------------------

    async def _guard(self, request: Request) -> tuple[dict[str, Any], Response | None]:
        """The form, or a refusal: cross-site, token missing or wrong, or read-only."""
        origin = request.headers.get("origin")
        own = {f"http://{h}" for h in self.hosts}
        site = request.headers.get("sec-fetch-site")
        if (origin is not None and self.hosts and origin not in own) or site not in (
            None,
            "same-origin",
            "none",
        ):
            return {}, self.page(
                "error.html",
                status=403,
                title="Refused",
                error="cross-site request refused: actions come only from the inspector's pages",
            )
        form = dict(await request.form())
        token = str(form.get("csrf", ""))
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            return {}, self.page(
                "error.html",
                status=403,
                title="Refused",
                error="the form's token is missing or stale: reload the page and try again",
            )
        if self.workflow is None:
            return {}, self.page(
                "error.html", status=409, title="Read-only", error=self.read_only_reason
            )
        return {k: str(v) for k, v in form.items()}, None

    async def respond(self, request: Request) -> Response:
        form, refused = await self._guard(request)
        if refused is not None:
            return refused
        cp, error = self._load(request.path_params["cid"])
        if cp is None:
            return self.page("error.html", status=404, title="Checkpoint not found", error=error)
        request_id = form.get("request_id", "")
        body, _ = decode_runtime_safely(cp)
        asked = (body or {}).get("pending", {}).get(request_id)
        if not asked:
            return self._refused(f"checkpoint {cp.id} has no pending request {request_id!r}")
        session_id = form.get("session") or cp.session
        if session_id == cp.session:
            try:
                latest = self.store.latest(session=cp.session)
            except ActorflowError as exc:
                return self._refused(f"the session's latest checkpoint cannot be read: {exc}")
            if latest is not None and latest.id != cp.id:
                # The form of a page loaded before the request was answered (or sent
                # twice): answering it here would run the answer's handler again.
                return self.page(
                    "error.html",
                    status=409,
                    title="Answered already",
                    error=f"session {cp.session!r} has gone on since checkpoint {cp.id} (its "
                    f"request {request_id!r} was answered); reload the session's page to see "
                    "what it waits on now, or answer it again in a new session id (a fork)",
                )
        label = str(asked[2])
        data: Any
        if form.get("mode") == "fields":
            fields = answer_fields(label)
            if fields is None:
                return self._refused(f"answers of type {label} have no form: answer as JSON")
            try:
                data = form_data(fields, form)
            except ValueError as exc:
                return self._refused(str(exc))
            answer_text = json.dumps(data)
        else:
            answer_text = form.get("answer", "")
            try:
                data = json.loads(answer_text)
            except ValueError:
                data = answer_text  # plain text answers a str request without quotes
        try:
            answer = _as_type(data, label)
        except ActorflowError as exc:
            return self._refused(f"the answer is not a {label}: {exc}")
        return self._start(
            f"answer {request_id!r} with {answer_text}",
            cp,
            session_id,
            lambda s: s.queue_answers({request_id: answer}),
        )

    async def cancel(self, request: Request) -> Response:
        """Ask whatever process runs the session to cancel the run its history shows
        going on, through the store (``CancelRequests``); back to its page."""
        _, refused = await self._guard(request)
        if refused is not None:
            return refused
        sid = request.path_params["sid"]
        store = self.store
        if not isinstance(store, CancelRequests):
            return self.page(
                "error.html",
                status=409,
                title="Cannot cancel",
                error=f"{type(store).__name__} carries no cancel requests: stop the run in "
                "the process that runs it",
            )
        try:
            run_id = run_going_on(store, sid)
            asked = run_id is not None and store.request_cancel(sid, run_id)
        except ActorflowError as exc:
            return self.page("error.html", status=400, title="Cannot cancel", error=str(exc))
        if not asked:
            return self.page(
                "error.html",
                status=409,
                title="Nothing to cancel",
                error=f"session {sid!r} has no run going on: its history shows none, or no "
                "process holds it",
            )
        return RedirectResponse(f"/sessions/{urllib.parse.quote(sid)}", status_code=303)

    def _refused(self, why: str) -> Response:
        return self.page("error.html", status=400, title="Answer refused", error=why)

    async def run_from(self, request: Request) -> Response:
        form, refused = await self._guard(request)
        if refused is not None:
            return refused
        cp, error = self._load(request.path_params["cid"])
        if cp is None:
            return self.page("error.html", status=404, title="Checkpoint not found", error=error)
        session_id = form.get("session") or cp.session
        return self._start(f"run again from {cp.id}", cp, session_id, lambda s: None)

    def _start(
        self, what: str, cp: Checkpoint, session_id: str, prepare: Callable[[Any], None]
    ) -> Response:
        """Resume ``cp`` as ``session_id``, ``prepare`` it (which validates, as
        ``respond`` does), then run it on a thread; the page follows it live."""
        assert self.workflow is not None
        if session_id in self._busy():
            return self.page(
                "error.html", status=409, title="Busy", error=f"session {session_id!r} is running"
            )
        try:
            if session_id == cp.session:  # continue (or travel back within) the session
                resumed = self.workflow.resume(self.store, checkpoint_id=cp.id)
            else:  # a fork into a new session id
                resumed = self.workflow.resume(
                    self.store, checkpoint_id=cp.id, as_session=session_id
                )
        except ActorflowError as exc:
            return self.page("error.html", status=400, title="Cannot resume", error=str(exc))
        try:
            prepare(resumed)
        except ActorflowError as exc:
            resumed.close()
            return self.page("error.html", status=400, title="Answer refused", error=str(exc))
        action = Action(what, session_id)
        with self._lock:
            self.actions.append(action)

        def work() -> None:
            try:
                result = resumed.run()
                with self._lock:
                    action.outputs = show(result.outputs)
                    action.status = result.status.value
            except Exception as exc:  # noqa: BLE001 - shown on the page
                with self._lock:
                    action.error = f"{type(exc).__name__}: {exc}"
                    action.status = "failed"
            finally:
                resumed.close()

        thread = threading.Thread(target=work, name=f"inspector-run-{session_id}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return RedirectResponse(f"/sessions/{session_id}", status_code=303)


def _as_type(data: Any, label: str) -> Any:
    """JSON ``data`` as the type ``label`` names when this process knows it (a
    registered dataclass from its fields, ``3`` as a float), else as it is; the
    session validates the value afterwards as it validates any answer.

    Raises:
        DecodeError: ``data`` cannot be that type (the message says where and why).
    """
    if label == "object" or type_named(label) is None:
        return data
    return from_json(data, label)


def _version(cps: list[Checkpoint], actions: list[Action], state: str) -> str:
    """What the live part shows changes only when this does."""
    return f"{len(cps)}:{cps[-1].id if cps else ''}:{[a.status for a in actions]}:{state}"


def _graph_of(view: model.CheckpointView) -> Any:
    """The graph of a checkpoint, with who has messages waiting and who is asking."""
    return graph_picture(
        view.graph,
        inbox=frozenset(target for target, _, _ in view.inbox),
        asking=frozenset(p["executor"] for p in view.pending),
    )


def _store_name(store: CheckpointStore) -> str:
    where = getattr(store, "path", None) or getattr(store, "root", None)
    return f"{type(store).__name__} {where}" if where else type(store).__name__
