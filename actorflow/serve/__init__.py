"""``actorflow serve``: a workflow as an HTTP service that real clients speak.

Install the extra ``actorflow[serve]`` (Starlette, uvicorn). :class:`ServiceApp` is an
ASGI app over one workflow and one store: threads (sessions), runs (waited for,
streamed, or in the background), their history as server-sent events resumable with
``Last-Event-ID``, answers to requests, cancelling, forks, and each executor's state
at any checkpoint. Resources and shapes follow the Agent Protocol / LangGraph API,
so the ``langgraph-sdk`` client works against it. Mount it in a Starlette or FastAPI
app, or serve it with :class:`Server` (or ``actorflow serve module:attr --store URI``).

Safe by default: it listens on 127.0.0.1 and refuses any other address unless a
bearer token guards every endpoint. See ``docs/service.md``.
"""

from ._app import ServiceApp
from ._server import HOST, Server, check_bind

__all__ = ["HOST", "Server", "ServiceApp", "check_bind"]
