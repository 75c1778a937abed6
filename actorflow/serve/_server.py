"""Serving a :class:`ServiceApp` with uvicorn: on a thread (tests, examples, notebooks)
or in the caller's thread (``actorflow serve``), on 127.0.0.1 unless a token guards it."""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from types import TracebackType

from actorflow._sockets import listening_socket
from actorflow.errors import UnsafeBind

from ._app import ServiceApp

__all__ = ["HOST", "Server", "check_bind"]

HOST = "127.0.0.1"
"""Where a service listens unless told otherwise."""


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen on ``host`` unless it is loopback or a token guards the service.

    Raises:
        UnsafeBind: ``host`` is not a loopback address (or ``localhost``) and there is no
            token.
    """
    if token:
        return
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UnsafeBind(
            f"refusing to listen on {host!r} without a token: anybody who can reach it could "
            "run the workflow and read its state. Give a token (--token, or "
            "ServiceApp(token=...)) and send it as Authorization: Bearer <token>, or listen on "
            "127.0.0.1"
        )


class Server:
    """A uvicorn server for ``app`` on ``host:port`` (0: a free port).

    ``serve()`` blocks until interrupted; ``start()`` serves on a background thread and
    returns the URL once it listens; ``stop()`` (or leaving ``with``) closes the app's
    sessions (ending every stream) and stops the server.

    Raises:
        UnsafeBind: ``host`` is not loopback and ``app`` has no token (see :func:`check_bind`).
    """

    def __init__(self, app: ServiceApp, *, host: str = HOST, port: int = 0) -> None:
        import uvicorn  # noqa: PLC0415 - the extra is imported only when a server is made

        check_bind(host, app.token)
        self.app = app
        self._socket = listening_socket(host, port, backlog=1024)
        self.port: int = self._socket.getsockname()[1]
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def serve(self) -> None:
        """Serve until interrupted (Ctrl-C) or :meth:`stop`. Caller's thread."""
        try:
            asyncio.run(self._serve())
        finally:
            self._socket.close()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._server.serve(sockets=[self._socket])

    def start(self) -> str:
        """Serve on a background thread; returns the URL once the server listens."""
        self._thread = threading.Thread(target=self.serve, name="actorflow-serve", daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the service's server stopped while starting")
            self._thread.join(0.01)
        return self.url

    def stop(self) -> None:
        """Close the app's sessions (runs are cancelled, streams end), then stop serving."""
        loop = self._loop
        if loop is not None and self._server.started and not loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self.app.aclose(), loop).result(30)
            except RuntimeError:
                pass  # the loop stopped meanwhile: its lifespan closed the sessions
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
