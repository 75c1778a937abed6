"""The torture harness's fixed budget, and every failing trial it ever kept.

``make test`` runs the trials of :data:`BUDGET` (a fixed set of seeds over every store
and both backends) and replays each entry of ``tests/torture_corpus/`` (trials that
once failed, each with what it found and on which commit; ``make torture`` adds to
it): about six minutes of test time, spread over the parts `make test` runs at
once (see tests/conftest.py). A failure prints what the trial found and the
command that replays it. See ``torture/`` and ``docs/torture.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import pg
from torture.service_race import race as service_race
from torture.store_race import race
from torture.stores import KINDS
from torture.trial import Failure, Trial

CORPUS = Path(__file__).resolve().parent / "torture_corpus"

SEEDS = range(8)
"""Seeds every store runs in ``make test``: one trial of each kind (see torture.trial.KINDS)."""
RAY_SEEDS = (0, 1)
"""Seeds run on Ray (a crash trial and a fault trial)."""

BUDGET = [f"{store}:{seed}" for seed in SEEDS for store in KINDS] + [
    f"file3:{seed}:ray" for seed in RAY_SEEDS
]


def _corpus() -> list[str]:
    """The corpus's trials that the budget does not run anyway."""
    found = (json.loads(p.read_text())["trial"] for p in CORPUS.glob("*.json"))
    return sorted(set(found) - set(BUDGET))


def _params(names: list[str]) -> list[Any]:
    """The trials as parameters, those on Ray marked so (they run beside the
    session-wide Ray: see tests/conftest.py)."""
    return [
        pytest.param(name, marks=pytest.mark.ray) if Trial.parse(name).backend == "ray" else name
        for name in names
    ]


def _run(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    trial = Trial.parse(name)
    if trial.store == "postgres":
        pg.dsn()  # skips (fails under CI=true) without a server
    if trial.backend == "ray":
        ray = request.getfixturevalue("ray_cluster")
        trial.ray_address = ray.get_runtime_context().gcs_address
    try:
        return trial.run(keep=tmp_path)
    except Failure as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", _params(BUDGET))
def test_trial(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The trial's outputs along the lineage and final states equal the fault-free run's."""
    summary = _run(name, tmp_path, request)
    assert summary.get("sessions", 0) >= 1 or summary["kind"] == "close"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", _params(_corpus()) or ["(empty)"])
def test_corpus_trial(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A trial that once failed passes now."""
    if name == "(empty)":
        assert not _corpus()
        return
    _run(name, tmp_path, request)


def test_a_trial_name_replays_the_same_trial() -> None:
    """Everything a trial does is drawn from its name: the same name, the same plan."""
    first, again = Trial.parse("sqlite:3"), Trial.parse("sqlite:3")
    assert first.kind == again.kind
    assert first._spec()[0] == again._spec()[0]
    assert Trial.parse("sqlite:4")._spec()[0] != first._spec()[0]
    assert "torture.run --replay sqlite:3" in first.replay_command()


def test_the_budget_covers_every_store_and_kind() -> None:
    """Each store runs every kind of trial its medium allows, in the budget or the corpus."""
    kinds: dict[str, set[str]] = {}
    for name in BUDGET + _corpus():
        trial = Trial.parse(name)
        kinds.setdefault(trial.store, set()).add(trial.kind)
    for store in ("file2", "file3", "sqlite", "postgres"):
        assert kinds[store] == {
            "crash",
            "faults",
            "threads",
            "asyncio",
            "processes",
            "takeover",
            "close",
        }
    assert kinds["memory"] == {"faults", "threads", "asyncio", "close"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_store_race(kind: str) -> None:
    """Handles saving, collecting and reading one store at once never lose a leased
    session's newest record or its blobs, and raise nothing (torture.store_race)."""
    if kind == "postgres":
        pg.dsn()  # skips (fails under CI=true) without a server
    assert race(kind, seconds=3, seed=0) == []


@pytest.mark.timeout(120)
def test_service_race() -> None:
    """Two workers of the service on one store, with clients racing on a few threads,
    answer nothing but what the API gives by design, and leave nothing leased
    (torture.service_race)."""
    assert service_race(seconds=4, seed=0) == []
