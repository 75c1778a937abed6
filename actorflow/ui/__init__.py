"""``actorflow ui STORE``: a local web page for sessions, lineage, checkpoints and diffs.

Install the extra ``actorflow[ui]`` (Starlette, uvicorn, Jinja2). The page is served
on 127.0.0.1 only; every asset ships in this package (no CDN). It shows the sessions
of a store with their state, why (a failure's executor, error and restarts) and last
activity, searched, filtered by state and paged; a session's runs with their
outputs and its timeline from its history (failures with their traceback, restarts,
rollbacks, requests and answers); its lineage as a picture
(forks and resets in lanes of their own), a checkpoint's detail (kind, superstep,
parent, each executor's state decoded by the safe decoder, messages in flight,
fan-in buffers, pending and answered requests), a diff of one executor's state
between two checkpoints, and the workflow graph. A live session's new checkpoints
appear without reloading.

Given the workflow (``--workflow module:attr``, or ``workflow=`` here), the page can
answer a pending request (with a form of its fields when the answer is a
registered dataclass; validated as ``Session.respond`` does) and run again from
any checkpoint (a resume, or a fork into a new session id). Without it the page is
read-only and says so.

Safe by default: loopback only; every decoded value is escaped; actions need this
server's token and its own origin; a damaged store shows its errors in the page.
"""

from __future__ import annotations

import threading
from types import TracebackType

from actorflow._sockets import listening_socket
from actorflow.runtime import Workflow
from actorflow.storage import CheckpointStore

from ._app import InspectorApp

__all__ = ["HOST", "Inspector"]

HOST = "127.0.0.1"
"""The only address the inspector listens on."""


class Inspector:
    """The inspector's server for one store.

    ``serve()`` blocks (the CLI); ``start()`` serves on a background thread and
    returns the URL (tests, notebooks); ``stop()`` or ``with`` ends it.

    Args:
        store: the store to show (the inspector never closes it).
        workflow: enables answering requests and running again; None: read-only.
        port: the port on 127.0.0.1; 0 picks a free one.
    """

    def __init__(
        self, store: CheckpointStore, *, workflow: Workflow | None = None, port: int = 8765
    ) -> None:
        import uvicorn  # noqa: PLC0415 - the extra is imported only when a server is made

        self.app = InspectorApp(store, workflow)
        self._socket = listening_socket(HOST, port, backlog=128)
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://{HOST}:{self.port}"
        self.app.hosts = {f"{HOST}:{self.port}", f"localhost:{self.port}"}
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def serve(self) -> None:
        """Serve until interrupted (Ctrl-C). Caller's thread."""
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self.app.join()
            self._socket.close()

    def start(self) -> str:
        """Serve on a background thread; returns the URL once the server listens."""
        self._thread = threading.Thread(target=self.serve, name="actorflow-inspector", daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the inspector's server stopped while starting")
            self._thread.join(0.01)
        return self.url

    def stop(self) -> None:
        """Stop serving and wait for runs started from the page."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def __enter__(self) -> Inspector:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
