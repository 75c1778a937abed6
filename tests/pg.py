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
