"""Shared fixtures (every test must leave no actor, or any other, thread behind), and
the split of the suite into parts that ``make unit`` runs at once (``.ci/unit.sh``)."""

from __future__ import annotations

import os
import threading
import typing
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from tests.support import graphs, pg, python_path
from tests.support.held_runs import Gate

PART_ENV = "ACTORFLOW_TEST_PART"
"""Which part of the suite this pytest runs: ``ray``, ``rest1``, ``rest2`` or ``serial``
(unset: all). ``.ci/unit.sh`` runs the first three at once, then ``serial``."""

PARTS = ("ray", "rest1", "rest2", "serial")

RAY_SHARE = 2
"""Of eight equal shares of the tests that need no Ray, how many the ``ray`` part takes
(``rest1`` and ``rest2`` take the others, half each). Its own tests, those of the
session-wide Ray, fill about a third of one part; two shares make the three parts end
about together (``.ci/unit.sh`` prints each part's time)."""


def part_of(item: pytest.Item) -> str:
    """``serial``: a test of the whole PostgreSQL server (it restarts it, or ends every
    connection), run alone; ``ray``: a test on the session-wide Ray (a ``backend``
    parameter of ``ray``, the ``ray_cluster`` fixture or the ``ray`` marker), which
    only that part's pytest starts. The others are dealt out by a hash of their ids:
    each part holds a share of every file (slow parametrized cases spread with the
    rest), and a test stays in its part from run to run."""
    if item.get_closest_marker("serial") is not None:
        return "serial"
    callspec = getattr(item, "callspec", None)
    on_ray = callspec is not None and callspec.params.get("backend") == "ray"
    if (
        on_ray
        or "ray_cluster" in getattr(item, "fixturenames", ())
        or item.get_closest_marker("ray")
    ):
        return "ray"
    share = zlib.crc32(item.nodeid.encode()) % 8
    if share < RAY_SHARE:
        return "ray"
    return "rest1" if share % 2 else "rest2"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only this part's tests when PART_ENV names one."""
    part = os.environ.get(PART_ENV)
    if not part:
        return
    if part not in PARTS:
        raise pytest.UsageError(f"{PART_ENV}={part!r}: expected one of {', '.join(PARTS)}")
    kept = [item for item in items if part_of(item) == part]
    config.hook.pytest_deselected(items=[item for item in items if part_of(item) != part])
    items[:] = kept


@pytest.fixture(autouse=True)
def no_thread_outlives_the_test() -> Iterator[None]:
    """Fail a test that leaves a thread it started running (bounded join, no sleep)."""
    before = set(threading.enumerate())
    yield
    # Ray's driver threads live as long as the session-wide Ray (see ray_cluster).
    leftover = [t for t in threading.enumerate() if t not in before and not _ray_owned(t)]
    for thread in leftover:
        thread.join(timeout=5)
    alive = [t.name for t in leftover if t.is_alive()]
    assert not alive, f"threads outlived the test: {alive}"


@pytest.fixture
def gate() -> Iterator[Gate]:
    """A gate installed as the corpus graphs' handler hook (call ``gate.superstep = n``)."""
    held = Gate()
    graphs.HOOK = held
    try:
        yield held
    finally:
        held.release.set()
        graphs.HOOK = None


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[pg.Durable]:
    """A fresh durable store shared across processes: SQLite, then PostgreSQL."""
    with pg.durable(request.param, str(tmp_path / "store.db")) as found:
        yield found


def _ray_owned(thread: threading.Thread) -> bool:
    return thread.name.startswith("ray_") or type(thread).__module__.startswith("ray.")


# --- backends -------------------------------------------------------------------------

# Ray reads it when first imported: every socket of a local Ray on 127.0.0.1.
os.environ[af.RayBackend.LOOPBACK_ENV] = "0"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """One local Ray for the whole test session, loopback only, shut down at the end.

    Workers find the test modules (their executor classes travel by reference, as
    ``tests.<folder>.<module>``) on PYTHONPATH, which names the repository root. Missing Ray is a skip, except under CI=true, where it is a failure.
    """
    try:
        import ray
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("ray is not installed (pip install 'actorflow[ray]')")
        pytest.skip("ray is not installed")
    part = os.environ.get(PART_ENV)
    if part and part != "ray":  # a second Ray beside the ray part's, on two cores
        pytest.fail(f"a test of the {part} part needs Ray: mark it @pytest.mark.ray")
    ray.init(
        num_cpus=2,
        object_store_memory=256 * 2**20,
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": python_path()}},
    )
    try:
        yield ray
    finally:
        RAY_BACKEND.shutdown()
        ray.shutdown()


RAY_BACKEND = af.RayBackend(reserve=48)
"""Shared by every Ray test: its reserve of idle workers is what keeps them fast."""


@pytest.fixture
def ray_backend(ray_cluster: Any) -> af.RayBackend:
    """The shared Ray backend, on the test session's Ray."""
    return RAY_BACKEND


@pytest.fixture(params=["threads", "ray"])
def backend(request: pytest.FixtureRequest) -> af.ActorBackend:
    """Each backend in turn (parametrize, don't copy)."""
    if request.param == "ray":
        return typing.cast(af.RayBackend, request.getfixturevalue("ray_backend"))
    return af.ThreadBackend()
