"""The PostgreSQL server the tests use: found through ACTORFLOW_TEST_PG_DSN.

``make test`` and ``.ci/run`` start a throwaway server with ``.ci/postgres.sh`` and
export the DSN. Without one, the PostgreSQL tests skip, saying why; under
``CI=true`` a missing server is a failure, never a skip.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

HOW = "run the tests with `make test`, or under `bash .ci/postgres.sh COMMAND`"


def dsn() -> str:
    """The test server's DSN; skips the test (fails it under CI=true) if there is none."""
    found = os.environ.get("ACTORFLOW_TEST_PG_DSN")
    problem = None
    if not found:
        problem = os.environ.get("ACTORFLOW_TEST_PG_UNAVAILABLE", "ACTORFLOW_TEST_PG_DSN is unset")
    else:
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError as exc:
            problem = f"the actorflow[postgres] extra is not installed ({exc})"
    if problem is None:
        assert found is not None
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"no PostgreSQL server for the tests under CI=true: {problem}")
    pytest.skip(f"no PostgreSQL server: {problem}; {HOW}")


def new_schema() -> str:
    """A schema name no other test uses."""
    return f"af_test_{uuid.uuid4().hex[:16]}"


def drop_schema(url: str, schema: str) -> None:
    """Drop a schema a test made, with everything in it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@contextmanager
def schema() -> Iterator[tuple[str, str]]:
    """``(dsn, schema)`` of a fresh schema, dropped afterwards."""
    url = dsn()
    name = new_schema()
    try:
        yield url, name
    finally:
        drop_schema(url, name)


def pg_ctl(*args: str) -> None:
    """Run the test server's pg_ctl (as ``postgres`` when we are root); restarts skip without it."""
    ctl = os.environ.get("ACTORFLOW_TEST_PG_CTL")
    data = os.environ.get("ACTORFLOW_TEST_PG_DATA")
    if not ctl or not data:
        if os.environ.get("CI") == "true":
            pytest.fail("ACTORFLOW_TEST_PG_CTL/DATA unset under CI=true: start via .ci/postgres.sh")
        pytest.skip("the server was not started by .ci/postgres.sh: cannot restart it")
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    command = [*prefix, ctl, "-D", data, "-w", "-t", "30", *args]
    if args[0] in ("start", "restart"):
        command += [
            "-o",
            os.environ["ACTORFLOW_TEST_PG_OPTS"],
            "-l",
            os.environ["ACTORFLOW_TEST_PG_LOG"],
        ]
    subprocess.run(command, check=True, capture_output=True, timeout=45)


@dataclass(frozen=True)
class Durable:
    """A durable store for a test, openable in this process and, as source, in a child."""

    kind: str  # "sqlite" or "postgres"
    where: str  # the SQLite file, or the DSN
    schema: str = ""

    def open(self) -> Any:
        import actorflow as af

        if self.kind == "sqlite":
            return af.SQLiteStore(self.where)
        return af.PostgresStore(self.where, schema=self.schema)

    def source(self, af: str = "af") -> str:
        """Python source opening the store, with actorflow imported as ``af``."""
        if self.kind == "sqlite":
            return f"{af}.SQLiteStore({self.where!r})"
        return f"{af}.PostgresStore({self.where!r}, schema={self.schema!r})"


@contextmanager
def durable(kind: str, path: str) -> Iterator[Durable]:
    """A fresh durable store of ``kind``: a SQLite file at ``path``, or a Postgres schema."""
    if kind == "sqlite":
        yield Durable("sqlite", path)
        return
    with schema() as (url, name):
        yield Durable("postgres", url, name)
