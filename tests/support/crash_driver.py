"""The parent's side of ``tests.support.crash_child``: start a child on a durable store, read
its stdout protocol with bounded waits, kill it, and open the store it wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import actorflow as af
from tests.support import child_env, pg

CHILD = "tests.support.crash_child"
SESSION = "crash"

Output = tuple[int, str, Any]
"""(superstep, executor, value) of one output event."""


class Child:
    """One child process; reads its stdout protocol with bounded waits (no sleeps)."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        self.log = Path(config["log"])
        self._stderr_path = workdir / f"stderr-{time.monotonic_ns()}"
        with open(self._stderr_path, "wb") as stderr:
            # The child must import the actorflow under test (this checkout), not
            # whichever copy the interpreter has installed.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", CHILD, json.dumps(config)],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=child_env(),
            )
        self._buffer = b""
        self._lines: list[str] = []

    def expect(self, word: str, timeout: float = 30.0) -> None:
        """Wait (bounded) until the child says ``word``; fail with its stderr otherwise."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while word not in self._lines:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(remaining, 0))
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                reason = "timed out" if not ready else "exited"
                raise AssertionError(f"child {reason} before {word!r}: {self.stderr()}")
            self._buffer += chunk
            *done, self._buffer = self._buffer.split(b"\n")
            self._lines += [line.decode() for line in done]

    def kill(self) -> None:
        """SIGKILL (no cleanup of any kind runs in the child) and reap it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._close()

    def finish(self) -> None:
        """Wait for a normal end."""
        self.expect("DONE")
        assert self.proc.wait(timeout=30) == 0, self.stderr()
        self._close()

    def stderr(self) -> str:
        return self._stderr_path.read_text(errors="replace")[-3000:]

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def facts(self) -> tuple[list[Output], list[tuple[str, int, str]], str | None]:
        """What the child logged: outputs, checkpoints reported written, how it ended."""
        outputs: list[Output] = []
        checkpoints: list[tuple[str, int, str]] = []
        end: str | None = None
        text = self.log.read_text() if self.log.exists() else ""
        for line in text.split("\n")[:-1]:  # a torn last line has no newline: ignored
            fact = json.loads(line)
            if fact[0] == "out":
                outputs.append((fact[1], fact[2], fact[3]))
            elif fact[0] == "ckpt":
                checkpoints.append((fact[1], fact[2], fact[3]))
            else:
                end = fact[1]
        return outputs, checkpoints, end


def child_config(
    store: str,
    workdir: Path,
    graph: tuple[str, list[int], dict[str, Any]],
    mode: str,
    block: dict[str, Any] | None = None,
    *,
    ray: str | None = None,
) -> dict[str, Any]:
    family, params, kwargs = graph
    return {
        "ray": ray,
        "store": store,
        "path": schema_for(workdir) if store == "postgres" else str(workdir / FILES[store]),
        "dsn": pg.dsn() if store == "postgres" else None,
        "family": family,
        "params": params,
        "kwargs": kwargs,
        "session": SESSION,
        "mode": mode,
        "log": str(workdir / f"{mode}.log"),
        "block": block,
    }


FILES = {"sqlite": "store.db", "file": "store"}
SCHEMAS: list[str] = []
"""Postgres schemas the current test made (one per work folder), dropped after it."""


def schema_for(workdir: Path) -> str:
    name = "af_crash_" + hashlib.sha256(str(workdir).encode()).hexdigest()[:16]
    if name not in SCHEMAS:
        SCHEMAS.append(name)
    return name


def open_store(store: str, workdir: Path) -> af.SQLiteStore | af.FileStore | af.PostgresStore:
    if store == "postgres":
        return af.PostgresStore(pg.dsn(), schema=schema_for(workdir))
    if store == "sqlite":
        return af.SQLiteStore(workdir / "store.db")
    return af.FileStore(workdir / "store")


def open_transactions(workdir: Path) -> int:
    """Server backends of the test's schema inside a transaction that has written rows
    (it has a transaction id) and not ended: a save whose COMMIT was not sent. Its
    state may read ``active``: the client fetched its statements' results without
    ending the pipeline."""
    import psycopg

    with psycopg.connect(pg.dsn(), autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            " AND backend_xid IS NOT NULL AND query LIKE %s",
            (f"%{schema_for(workdir)}.%",),
        ).fetchone()
    return 0 if row is None else int(row[0])
