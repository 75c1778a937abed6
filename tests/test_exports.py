"""The public API: exactly the names we mean to publish, nothing leaked by accident."""

from __future__ import annotations

import doctest

import pytest

import actorflow
import actorflow.actors
import actorflow.otel
import actorflow.runtime
import actorflow.runtime._events
import actorflow.runtime._workflow
import actorflow.runtime.session._deletion
import actorflow.storage
import actorflow.storage._protocol
import actorflow.testing
import actorflow.ui


@pytest.mark.parametrize(
    "module",
    [
        actorflow,
        actorflow.actors,
        actorflow.runtime,
        actorflow.storage,
        actorflow.testing,
        actorflow.otel,
        actorflow.ui,
    ],
)
def test_all_is_sorted_and_resolvable(module: object) -> None:
    """Every package lists an isort-style sorted __all__ (constants, classes, functions) whose names all exist."""
    names = list(module.__all__)  # type: ignore[attr-defined]

    def group(name: str) -> tuple[int, str]:
        bare = name.strip("_")
        rank = 0 if bare.isupper() else 1 if bare[:1].isupper() else 2
        return (rank, name)

    assert names == sorted(names, key=group)
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing


def test_top_level_public_names_are_all_listed() -> None:
    """No public (non-underscore, non-module) name appears at top level without being in __all__."""
    import types

    public = {
        n
        for n, v in vars(actorflow).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert public <= set(actorflow.__all__)


def test_every_error_derives_from_the_single_base() -> None:
    """All error classes share ActorflowError as their base."""
    from actorflow import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ActorflowError)


@pytest.mark.parametrize(
    "module",
    [
        actorflow,
        actorflow.testing,
        actorflow.otel,
        actorflow.runtime._workflow,
        actorflow.runtime._events,
        actorflow.runtime.session._deletion,
        actorflow.runtime.session._session,
        actorflow.storage._protocol,
    ],
)
def test_doctests(module: object) -> None:
    """The doctests in the public modules run and pass."""
    result = doctest.testmod(module, verbose=False)  # type: ignore[arg-type]
    assert result.attempted > 0
    assert result.failed == 0


def test_import_actorflow_imports_no_optional_extra() -> None:
    """`import actorflow` (and actorflow.storage) never imports psycopg; af.PostgresStore does."""
    import subprocess
    import sys

    code = (
        "import sys, actorflow, actorflow.storage, actorflow.storage.conformance\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.strip() == "[]"


def test_importing_actorflow_never_imports_the_extras() -> None:
    """`import actorflow` (and building a RayBackend) imports no optional extra: Ray loads
    only when a Ray backend starts its first worker, cryptography when an EncryptedStore
    is made."""
    import subprocess
    import sys

    code = (
        "import sys, actorflow as af; af.RayBackend(executors={'x': {'num_cpus': 1}}); "
        "print(sorted(m for m in ('ray', 'psycopg', 'opentelemetry', 'cryptography') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
