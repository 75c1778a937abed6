"""The service's ASGI application: threads, runs, streams and state over HTTP.

Resources and shapes follow the Agent Protocol / LangGraph API (threads are
sessions, the one assistant is the workflow), so the ``langgraph-sdk`` client works
against it; ``docs/service.md`` lists every endpoint. Safety: with a token, every
request must carry ``Authorization: Bearer <token>`` (or ``X-Api-Key: <token>``,
what the SDK's ``api_key`` sends), else 401; without one, only requests addressed
to a loopback name (``Host: 127.0.0.1``, ``localhost``, ``[::1]``) are served, so a
web page cannot reach the service through DNS rebinding. Errors are JSON:
``{"error": kind, "message": what was wrong and how to fix it}``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import urllib.parse
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from actorflow._version import __version__
from actorflow.errors import (
    ActorflowError,
    CheckpointNotFound,
    DecodeError,
    InputNotAccepted,
    InvalidRequest,
    LeaseError,
    RequestError,
    RunNotFound,
    SessionBusy,
    SessionExists,
    StoreLocked,
    ThreadNotFound,
)
from actorflow.runtime import NO_INPUT, Event, Workflow
from actorflow.storage import Checkpoint, CheckpointStore

from . import _params as params
from ._runs import Run
from ._shapes import assistant_json, event_json, iso
from ._states import THREAD_STATUSES, States
from ._stream import (
    MODES,
    THREAD_MODES,
    Position,
    listed,
    position_of,
    run_history,
    run_stream,
    sse,
    thread_stream,
)
from ._threads import THREAD_KEY, StoredThread, Thread, Threads

__all__ = ["ServiceApp"]

_SORTS = ("thread_id", "status", "created_at", "updated_at")
"""What ``/threads/search`` sorts by."""
_CREATE_ATTEMPTS = 3
"""How often ``POST /threads`` makes or finds its thread when another worker keeps
deleting it between finding and reading it (then the deletion's 404 stands)."""

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
"""Host names a service without a token answers to."""

_STATUS: tuple[tuple[type[ActorflowError], int], ...] = (
    (ThreadNotFound, 404),
    (RunNotFound, 404),
    (CheckpointNotFound, 404),
    (InvalidRequest, 422),
    (DecodeError, 422),
    (InputNotAccepted, 422),
    (SessionBusy, 409),
    (RequestError, 409),
    (SessionExists, 409),
    (LeaseError, 409),
    (StoreLocked, 503),
)

Handler = Callable[[Request], Awaitable[Response]]

_log = logging.getLogger("actorflow.serve")
"""Where a request's unexpected error goes, with its traceback (the library attaches
only a ``NullHandler`` to ``actorflow``: the application decides what is shown)."""


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message, "detail": message}, status_code=status)


def _guarded(handler: Handler) -> Handler:
    """``handler`` with the library's errors as JSON responses, and any other error (a
    defect) as a JSON 500 logged with its traceback: left to Starlette, it is a plain
    500 and uvicorn closes the connection, failing the client's next request on it."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except ActorflowError as exc:
            status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 500)
            response = _error(status, type(exc).__name__, str(exc))
            if status == 503:  # the store is busy, not broken: worth another try soon
                response.headers["Retry-After"] = "1"
            return response
        except Exception as exc:  # noqa: BLE001 - answered, and logged with its traceback
            _log.error(
                "%s %s failed with an unexpected error",
                request.method,
                request.url.path,
                exc_info=exc,
            )
            return _error(
                500,
                "InternalError",
                f"{request.method} {request.url.path} failed: {type(exc).__name__}: {exc}. "
                "This is a defect of the service, not of the request: report it with the "
                "server's log (logger actorflow.serve), which holds its traceback",
            )

    return guarded


class ServiceApp:
    """The ASGI app serving one workflow over one store.

    Mount it in a Starlette or FastAPI app (``app.mount("/flows", service)``) and
    give that app its lifespan (``lifespan=service.lifespan``): mounted apps get no
    lifespan of their own, and the lifespan's end closes the sessions. Serving it on
    its own (uvicorn, ``actorflow serve``) runs the lifespan itself.

    Args:
        workflow: what threads run; its name is the assistant and graph id.
        store: where threads' checkpoints live (the service never closes it).
        token: when set, every request needs ``Authorization: Bearer <token>``.
    """

    def __init__(
        self,
        workflow: Workflow,
        store: CheckpointStore,
        *,
        token: str | None = None,
    ) -> None:
        self.workflow = workflow
        self.token = token or None
        self.threads = Threads(workflow, store)
        self._states = States(store)
        self._store = store
        self._created = time.time()
        g = _guarded
        routes = [
            Route("/ok", g(self.ok)),
            Route("/info", g(self.info)),
            Route("/assistants/search", g(self.assistants_search), methods=["POST"]),
            Route("/assistants/{aid}", g(self.assistant)),
            Route("/assistants/{aid}/graph", g(self.assistant_graph)),
            Route("/threads", g(self.thread_create), methods=["POST"]),
            Route("/threads/search", g(self.thread_search), methods=["POST"]),
            Route("/threads/{tid}", g(self.thread_get)),
            Route("/threads/{tid}", g(self.thread_delete), methods=["DELETE"]),
            Route("/threads/{tid}", g(self.thread_update), methods=["PATCH"]),
            Route("/threads/{tid}/state", g(self.thread_state)),
            Route("/threads/{tid}/state/checkpoint", g(self.thread_state_at), methods=["POST"]),
            Route("/threads/{tid}/state/{cid}", g(self.thread_state)),
            Route("/threads/{tid}/history", g(self.thread_history), methods=["GET", "POST"]),
            Route("/threads/{tid}/events", g(self.thread_events)),
            Route("/threads/{tid}/stream", g(self.thread_stream)),
            Route("/threads/{tid}/fork", g(self.thread_fork), methods=["POST"]),
            Route("/threads/{tid}/runs", g(self.runs_list), methods=["GET"]),
            Route("/threads/{tid}/runs", g(self.run_create), methods=["POST"]),
            Route("/threads/{tid}/runs/wait", g(self.run_wait), methods=["POST"]),
            Route("/threads/{tid}/runs/stream", g(self.run_stream), methods=["POST"]),
            Route("/threads/{tid}/runs/{rid}", g(self.run_get)),
            Route("/threads/{tid}/runs/{rid}", g(self.run_delete), methods=["DELETE"]),
            Route("/threads/{tid}/runs/{rid}/join", g(self.run_join)),
            Route("/threads/{tid}/runs/{rid}/stream", g(self.run_join_stream)),
            Route("/threads/{tid}/runs/{rid}/cancel", g(self.run_cancel), methods=["POST"]),
            Route("/runs", g(self.run_create), methods=["POST"]),
            Route("/runs/wait", g(self.run_wait), methods=["POST"]),
            Route("/runs/stream", g(self.run_stream), methods=["POST"]),
        ]
        self.app = Starlette(
            routes=routes,
            lifespan=self.lifespan,
            exception_handlers={HTTPException: self._http_error},  # type: ignore[dict-item]  # Starlette's handler type is looser than this signature
        )

    # --- the ASGI face ------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refused = self._refusal(scope)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.token is not None:
            given = headers.get("authorization", "")
            scheme, _, credential = given.partition(" ")
            if scheme.lower() != "bearer":
                credential = headers.get("x-api-key", "")
            if not credential or not hmac.compare_digest(credential.encode(), self.token.encode()):
                response = _error(
                    401,
                    "Unauthorized",
                    "this service needs its token: send Authorization: Bearer <token> "
                    "(or X-Api-Key: <token>)",
                )
                response.headers["WWW-Authenticate"] = 'Bearer realm="actorflow"'
                return response
            return None
        host = headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if name not in LOOPBACK_NAMES:
            return _error(
                421,
                "MisdirectedRequest",
                f"this service has no token, so it answers only requests to 127.0.0.1 or "
                f"localhost, not {host!r}; give it a token to serve other names",
            )
        return None

    @asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """The service's lifespan: on its end, runs going on are cancelled and every
        session is closed. Give it to the app this one is mounted in."""
        try:
            yield
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Cancel runs going on, close every session (and so end every stream)."""
        await self.threads.aclose()

    async def _http_error(self, request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 405:
            allowed = self._methods_on(request)
            response = _error(
                405,
                "HTTPError",
                f"{request.method} is not allowed on {request.url.path}; it answers {allowed} "
                "(docs/service.md lists what this service supports)",
            )
            response.headers["Allow"] = allowed
            return response
        if exc.status_code == 404:
            message = f"no endpoint {request.url.path}; see docs/service.md for the endpoints"
            return _error(404, "HTTPError", message)
        return _error(exc.status_code, "HTTPError", str(exc.detail))

    # --- helpers ------------------------------------------------------------------

    def _methods_on(self, request: Request) -> str:
        """The methods the routes at ``request``'s path answer (several routes may share
        a path, one a method: Starlette's own ``Allow`` names the first one's only)."""
        methods: set[str] = set()
        for route in self.app.routes:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE and isinstance(route, Route) and route.methods:
                methods |= route.methods
        return ", ".join(sorted(methods))

    async def _body(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise InvalidRequest(
                f"the request body is not JSON ({exc}); send a JSON object"
            ) from exc
        if not isinstance(body, dict):
            raise InvalidRequest("the request body must be a JSON object")
        return body

    def _check_assistant(self, assistant_id: object) -> None:
        if assistant_id is not None and assistant_id != self.workflow.name:
            raise InvalidRequest(
                f"assistant_id {assistant_id!r}: this service serves the workflow "
                f"{self.workflow.name!r}; use that name as the assistant id"
            )

    def _location(self, request: Request, run: Run, tail: str = "") -> str:
        root = request.scope.get("root_path", "")
        thread = urllib.parse.quote(run.thread_id, safe="")  # a header is Latin-1 text
        return f"{root}/threads/{thread}/runs/{run.run_id}{tail}"

    async def _thread_json(self, thread_id: str, thread: Thread | None) -> dict[str, Any]:
        """The thread as JSON, read from its latest checkpoint.

        Raises:
            ThreadNotFound: the thread was deleted (by another worker) while it was read.
        """
        cp = await asyncio.to_thread(self._states.latest, thread_id)
        return await self._thread_at(thread_id, thread, cp, self._status(thread, cp))

    def _status(self, thread: Thread | None, cp: Checkpoint | None) -> str:
        """The status of a thread whose latest checkpoint is ``cp``."""
        return (
            "busy" if thread is not None and thread.active is not None else self._states.status(cp)
        )

    async def _thread_at(
        self, thread_id: str, thread: Thread | None, cp: Checkpoint | None, status: str
    ) -> dict[str, Any]:
        """The thread as JSON, its latest checkpoint ``cp`` read already (its state is
        read now)."""
        state = await asyncio.to_thread(self._states.state, thread_id, cp)
        kept = StoredThread.of(cp)
        if kept is not None:
            created = kept.created_at
        else:  # a thread made by a run (or outside the service): when first seen
            created = thread.created_at if thread is not None else (cp.created_at if cp else 0.0)
        updated = cp.created_at if cp is not None else created
        return {
            "thread_id": thread_id,
            "created_at": iso(created),
            "updated_at": iso(updated),
            "metadata": kept.metadata if kept is not None else {},
            "status": status,
            "values": state["values"],
            "interrupts": {i["id"]: [i] for i in state["interrupts"]},
            "config": {},
        }

    # --- service and assistant ----------------------------------------------------

    async def ok(self, request: Request) -> Response:
        """``GET /ok``: the service is up."""
        return JSONResponse({"ok": True})

    async def info(self, request: Request) -> Response:
        """``GET /info``: the server's version and the workflow it serves."""
        return JSONResponse(
            {"version": __version__, "workflow": self.workflow.name, "flags": {}, "modes": MODES}
        )

    async def assistants_search(self, request: Request) -> Response:
        """``POST /assistants/search``: the one assistant, the workflow."""
        body = await self._body(request)
        found = [assistant_json(self.workflow, self._created)]
        graph = body.get("graph_id")
        if graph is not None and graph != self.workflow.name:
            found = []
        offset = params.count(body, "offset", 0)
        return JSONResponse(found[offset : offset + params.count(body, "limit", 10)])

    async def assistant(self, request: Request) -> Response:
        """``GET /assistants/{id}``: the workflow as an assistant."""
        self._check_assistant(request.path_params["aid"])
        return JSONResponse(assistant_json(self.workflow, self._created))

    async def assistant_graph(self, request: Request) -> Response:
        """``GET /assistants/{id}/graph``: the workflow's description (executors, edges)."""
        self._check_assistant(request.path_params["aid"])
        return JSONResponse(self.workflow.describe())

    # --- threads ------------------------------------------------------------------

    async def thread_create(self, request: Request) -> Response:
        """``POST /threads``: ``{thread_id?, metadata?, if_exists?}`` -> the thread."""
        body = await self._body(request)
        metadata = params.json_object(body, "metadata")
        if_exists = params.choice(body, "if_exists", ("raise", "do_nothing"), "raise")
        attempt = 1
        while True:
            thread = await self.threads.create(body.get("thread_id"), metadata, if_exists)
            try:
                return JSONResponse(await self._thread_json(thread.thread_id, thread))
            except ThreadNotFound:
                # Found (do_nothing), then deleted by another worker before it was read:
                # this request comes after that delete, and makes the thread anew.
                if attempt == _CREATE_ATTEMPTS:
                    raise
                attempt += 1

    async def thread_search(self, request: Request) -> Response:
        """``POST /threads/search``: ``{ids?, status?, metadata?, limit?, offset?}`` ->
        threads, the most recently updated first."""
        body = await self._body(request)
        wanted = params.texts(body, "ids")
        metadata = params.json_object(body, "metadata")
        status = params.choice(body, "status", (*THREAD_STATUSES, ""), "")
        key = params.choice(body, "sort_by", _SORTS, "updated_at")
        order = params.choice(body, "sort_order", ("asc", "desc"), "desc")
        offset, limit = params.count(body, "offset", 0), params.count(body, "limit", 10)
        known = self.threads.known()
        stored = await asyncio.to_thread(self._store.sessions)
        ids = sorted(set(stored) | set(known))
        if wanted:
            ids = [i for i in ids if i in set(wanted)]
        rows = []
        for tid in ids:
            # Matched on the latest record alone: states are read for the matches only.
            cp = await asyncio.to_thread(self._states.latest, tid)
            kept = StoredThread.of(cp)
            have = kept.metadata if kept is not None else {}
            if any(have.get(k) != v for k, v in metadata.items()):
                continue
            found = self._status(known.get(tid), cp)
            if status and found != status:
                continue
            try:
                rows.append(await self._thread_at(tid, known.get(tid), cp, found))
            except ThreadNotFound:
                continue  # deleted while the search read it
        rows.sort(key=lambda r: str(r[key]), reverse=order == "desc")
        return JSONResponse(rows[offset : offset + limit])

    async def thread_get(self, request: Request) -> Response:
        """``GET /threads/{id}``: the thread, with its latest state's values."""
        thread = await self.threads.get(request.path_params["tid"])
        return JSONResponse(await self._thread_json(thread.thread_id, thread))

    async def thread_delete(self, request: Request) -> Response:
        """``DELETE /threads/{id}``: the thread and everything stored of it -> 204."""
        await self.threads.delete(request.path_params["tid"])
        return Response(status_code=204)

    async def thread_update(self, request: Request) -> Response:
        """``PATCH /threads/{id}``: ``{metadata}`` merged into the thread's -> the thread."""
        thread = await self.threads.get(request.path_params["tid"])
        body = await self._body(request)
        await self.threads.update(thread, params.json_object(body, "metadata"))
        return JSONResponse(await self._thread_json(thread.thread_id, thread))

    async def thread_state(self, request: Request) -> Response:
        """``GET /threads/{id}/state[/{checkpoint_id}]``: the state at the latest (or that)
        checkpoint: each executor's state in ``values``."""
        thread = await self.threads.get(request.path_params["tid"])
        return JSONResponse(await self._state_at(thread.thread_id, request.path_params.get("cid")))

    async def thread_state_at(self, request: Request) -> Response:
        """``POST /threads/{id}/state/checkpoint``: ``{checkpoint: {checkpoint_id}}``."""
        thread = await self.threads.get(request.path_params["tid"])
        body = await self._body(request)
        cid = params.text(params.json_object(body, "checkpoint"), "checkpoint_id")
        return JSONResponse(await self._state_at(thread.thread_id, cid))

    async def _state_at(self, thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            cp = (
                self._states.load(thread_id, checkpoint_id)
                if checkpoint_id
                else self._states.latest(thread_id)
            )
            return self._states.state(thread_id, cp)

        return await asyncio.to_thread(read)

    async def thread_history(self, request: Request) -> Response:
        """``POST /threads/{id}/history``: ``{limit?, before?}`` -> states, newest first."""
        thread = await self.threads.get(request.path_params["tid"])
        body = await self._body(request) if request.method == "POST" else dict(request.query_params)
        before = body.get("before")
        if isinstance(before, dict):
            before = params.json_object(before, "configurable") or before
            before = params.text(before, "checkpoint_id")
        elif before is not None and not isinstance(before, str):
            raise InvalidRequest(f"before must be a checkpoint id or object, not {before!r:.60}")
        limit = params.count(body, "limit", 10)
        states = await asyncio.to_thread(
            self._states.history, thread.thread_id, limit, before or None
        )
        return JSONResponse(states)

    async def thread_events(self, request: Request) -> Response:
        """``GET /threads/{id}/events?since=N``: the thread's history events from ``N``."""
        thread = await self.threads.get(request.path_params["tid"])
        since = params.count(request.query_params, "since", 0)
        events = await self.threads.history(thread, since)
        return JSONResponse([event_json(e) for e in events])

    async def thread_stream(self, request: Request) -> Response:
        """``GET /threads/{id}/stream``: SSE of the thread's history after ``Last-Event-ID``
        (all of it without), then live, until the client leaves."""
        thread = await self.threads.get(request.path_params["tid"])
        asked = request.query_params.getlist("stream_mode")
        modes = _modes(asked, thread=True) if any(asked) else ("events",)
        last = _last_event_id(request)
        history = self.threads.follow(thread, 0 if last is None else last[0])
        return _sse_response(thread_stream(history, modes, last))

    async def thread_fork(self, request: Request) -> Response:
        """``POST /threads/{id}/fork``: ``{checkpoint_id?, thread_id?}`` -> a new thread
        that goes on from that checkpoint (the latest without one)."""
        thread = await self.threads.get(request.path_params["tid"])
        body = await self._body(request)
        forked = await self.threads.fork(
            thread, params.text(body, "checkpoint_id"), body.get("thread_id")
        )
        return JSONResponse(await self._thread_json(forked.thread_id, forked))

    # --- runs ---------------------------------------------------------------------

    async def _start(self, request: Request, *, streamed: bool = False) -> tuple[Thread, Run]:
        body = await self._body(request)
        self._check_assistant(body.get("assistant_id"))
        tid = request.path_params.get("tid")
        if tid is None:  # a thread of its own, stored by the run as it starts
            thread = await self.threads.get(str(uuid.uuid4()), create=True)
        else:
            create = params.choice(body, "if_not_exists", ("create", "reject"), "reject")
            thread = await self.threads.get(tid, create=create == "create")
        strategy = body.get("multitask_strategy")
        if strategy not in (None, "reject"):
            raise InvalidRequest(
                f"multitask_strategy {strategy!r}: a thread runs one run at a time and refuses "
                "another (reject); wait for the run, or cancel it first"
            )
        command = body.get("command") or {}
        if not isinstance(command, dict) or set(command) - {"resume"}:
            raise InvalidRequest(
                'command: only {"resume": answer} is supported (the answer to pending requests)'
            )
        checkpoint_id = params.text(body, "checkpoint_id")
        if checkpoint_id:
            latest = await asyncio.to_thread(self._states.latest, thread.thread_id)
            if latest is None or latest.id != checkpoint_id:
                raise InvalidRequest(
                    f"checkpoint_id {checkpoint_id!r} is not the thread's latest checkpoint; "
                    f"fork the thread from it (POST /threads/{thread.thread_id}/fork) and run there"
                )
        metadata = params.json_object(body, "metadata")
        if THREAD_KEY in metadata:
            raise InvalidRequest(
                f"metadata: {THREAD_KEY!r} keeps the thread in the run's checkpoints; name "
                "the run's key otherwise, or change the thread's metadata "
                f"with PATCH /threads/{thread.thread_id}"
            )
        raw_mode = body.get("stream_mode") or "values"
        modes = _modes([raw_mode] if not isinstance(raw_mode, list) else raw_mode)
        run = await self.threads.start(
            thread,
            input=body.get("input", NO_INPUT),
            resume=command.get("resume"),
            has_resume="resume" in command,
            metadata=metadata,
            stream_mode=modes,
            streamed=streamed,
        )
        return thread, run

    async def run_create(self, request: Request) -> Response:
        """``POST /threads/{id}/runs`` (``/runs``: on a new thread): start a run in the
        background -> the run (poll it, join it or stream it later)."""
        _, run = await self._start(request)
        response = JSONResponse(run.json())
        response.headers["Content-Location"] = self._location(request, run)
        return response

    async def run_wait(self, request: Request) -> Response:
        """``POST /threads/{id}/runs/wait``: run and wait -> ``{"outputs": [...]}`` (with
        ``__interrupt__`` when requests wait, ``__error__`` when it failed)."""
        _, run = await self._start(request)
        await run.done.wait()
        response = JSONResponse(run.result())
        response.headers["Content-Location"] = self._location(request, run)
        return response

    async def run_stream(self, request: Request) -> Response:
        """``POST /threads/{id}/runs/stream``: run and stream its events (SSE)."""
        thread, run = await self._start(request, streamed=True)
        session = thread.session
        assert session is not None, "held for the stream by _start"
        events = _run_events(run_history(session, run), run, run.stream_mode, None)
        response = _sse_response(events, partial(self.threads.let_go, thread))
        response.headers["Content-Location"] = self._location(request, run)
        response.headers["Location"] = self._location(request, run, "/stream")
        return response

    async def _run_of(self, request: Request) -> tuple[Thread, Run]:
        thread = await self.threads.get(request.path_params["tid"])
        return thread, await self.threads.run(thread, request.path_params["rid"])

    async def runs_list(self, request: Request) -> Response:
        """``GET /threads/{id}/runs``: the runs this service started on it, newest first."""
        thread = await self.threads.get(request.path_params["tid"])
        offset = params.count(request.query_params, "offset", 0)
        limit = params.count(request.query_params, "limit", 10)
        runs = [r.json() for r in reversed(thread.runs.values())]
        return JSONResponse(runs[offset : offset + limit])

    async def run_get(self, request: Request) -> Response:
        """``GET /threads/{id}/runs/{run_id}``: the run and its status."""
        _, run = await self._run_of(request)
        return JSONResponse(run.json())

    async def run_join(self, request: Request) -> Response:
        """``GET /threads/{id}/runs/{run_id}/join``: wait for the run -> as ``runs/wait``."""
        thread, run = await self._run_of(request)
        await self.threads.join(thread, run)
        return JSONResponse(run.result())

    async def run_join_stream(self, request: Request) -> Response:
        """``GET /threads/{id}/runs/{run_id}/stream``: the run's events (SSE) from its start,
        or after ``Last-Event-ID``; live until it ends."""
        thread, run = await self._run_of(request)
        asked = request.query_params.getlist("stream_mode")
        modes = _modes(asked) if any(asked) else run.stream_mode  # "": the SDK's None
        last = _last_event_id(request)
        if not run.running:  # its stored history: read without holding the thread
            assert run.first_seq is not None, "a run that ended had started"
            stored = await self.threads.history(thread, run.first_seq)
            return _sse_response(_run_events(listed(stored), run, modes, last))
        if run.elsewhere:  # another worker runs it: followed in the store
            events = _run_events(self.threads.follow_stored(thread, run), run, modes, last)
            return _sse_response(events)
        session = await self.threads.hold(thread)
        events = _run_events(run_history(session, run), run, modes, last)
        return _sse_response(events, partial(self.threads.let_go, thread))

    async def run_delete(self, request: Request) -> Response:
        """``DELETE /threads/{id}/runs/{run_id}``: forget this worker's record of a
        finished run -> 204 (its history stays the thread's, where any worker reads it)."""
        thread = await self.threads.get(request.path_params["tid"])
        run = thread.run(request.path_params["rid"])
        if run.running:
            raise SessionBusy(
                f"run {run.run_id} is still going on; cancel it "
                f"(POST /threads/{thread.thread_id}/runs/{run.run_id}/cancel) or wait for it, "
                "then delete it"
            )
        thread.runs.pop(run.run_id, None)
        return Response(status_code=204)

    async def run_cancel(self, request: Request) -> Response:
        """``POST /threads/{id}/runs/{run_id}/cancel``: stop the run at its next barrier
        (``?wait=false``: do not wait for it) -> the run."""
        thread, run = await self._run_of(request)
        wait = request.query_params.get("wait", "true").lower() not in ("0", "false")
        await self.threads.cancel(thread, run, wait=wait)
        return JSONResponse(run.json(), status_code=202 if run.running else 200)


def _last_event_id(request: Request) -> Position | None:
    given = request.headers.get("last-event-id")
    if given is None or not given.strip():
        return None
    try:
        return position_of(given)
    except ValueError:
        raise InvalidRequest(
            f"Last-Event-ID {given!r} is no id this service sent (N or N:k); send the id of "
            "the last event received, or none to start from the beginning"
        ) from None


def _modes(asked: list[Any], *, thread: bool = False) -> tuple[str, ...]:
    """The stream modes ``asked`` (a thread's stream also takes :data:`THREAD_MODES`),
    in order, once each; empty ones left out (the SDK's None)."""
    known = (*MODES, *THREAD_MODES) if thread else MODES
    asked = [m for m in asked if m != ""]
    unknown = [m for m in asked if not isinstance(m, str) or m not in known]
    if unknown or not asked:
        raise InvalidRequest(
            f"stream_mode {unknown or asked!r}: this service streams {', '.join(known)}"
        )
    return tuple(dict.fromkeys(THREAD_MODES.get(m, m) for m in asked))


async def _run_events(
    history: AsyncGenerator[Event, None], run: Run, modes: tuple[str, ...], last: Position | None
) -> AsyncIterator[bytes]:
    """A run's SSE stream: from its start, it begins with ``event: metadata`` (which run
    it is); resumed after ``last``, it goes straight on. It ends once the run let go
    of the thread, not at its last event: a client that starts the next run as soon as
    the stream ends finds the thread free, on this worker and on any other."""
    if last is None:
        yield sse("metadata", {"run_id": run.run_id, "thread_id": run.thread_id, "attempt": 1})
    async for part in run_stream(history, modes, last):
        yield part
    if not run.elsewhere:  # another worker's lets go there, before it stores its end
        await run.done.wait()  # set right after its session is let go of (a close, bounded)


def _sse_response(
    events: AsyncIterator[bytes], let_go: Callable[[], Awaitable[None]] | None = None
) -> StreamingResponse:
    return _HeldStream(
        events,
        let_go,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


class _HeldStream(StreamingResponse):
    """A stream that may hold a thread's session (``Threads.hold``; ``let_go`` None when
    it holds nothing): it lets go of it when the response ends, however it ends
    (streamed to its end, its client gone, the server stopping), even before the
    stream's first event."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        let_go: Callable[[], Awaitable[None]] | None,
        **kw: Any,
    ) -> None:
        super().__init__(content, **kw)
        self._let_go = let_go

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # A client that left cancels the response, maybe again at each await: the
            # session is let go of all the same.
            if self._let_go is not None:
                await asyncio.shield(self._let_go())
