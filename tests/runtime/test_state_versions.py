"""State versions: a resume migrates old snapshots, or fails before any handler runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

import actorflow as af

CALLS: list[str] = []


class TallyV1(af.Executor):
    """Version 1: keeps the amounts it saw."""

    __actorflow_name__ = "tests.Tally"

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.amounts: list[int] = []

    @af.handler
    def on_amount(self, amount: int, ctx: af.Context[Any]) -> None:
        CALLS.append("v1")
        self.amounts.append(amount)
        ctx.output(len(self.amounts))


class TallyV2(af.Executor):
    """Version 2: also keeps a running total (version 1 snapshots lack it)."""

    __actorflow_name__ = "tests.Tally"
    state_version: ClassVar[int] = 2
    migrations: ClassVar[list[int]] = []

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.amounts: list[int] = []
        self.total = 0

    @classmethod
    def migrate(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        cls.migrations.append(from_version)
        state["total"] = sum(state["amounts"])
        return state

    @af.handler
    def on_amount(self, amount: int, ctx: af.Context[Any]) -> None:
        CALLS.append("v2")
        self.amounts.append(amount)
        self.total += amount
        ctx.output(self.total)


class TallyV2Unversioned(TallyV2):
    """The attribute added without a version bump: the resume must refuse it."""

    __actorflow_name__ = "tests.Tally"
    state_version: ClassVar[int] = 1


class TallyV3NoMigrate(af.Executor):
    """A version bump without a migration."""

    __actorflow_name__ = "tests.Tally"
    state_version: ClassVar[int] = 3

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.amounts: list[int] = []

    @af.handler
    def on_amount(self, amount: int, ctx: af.Context[Any]) -> None:
        CALLS.append("v3")


class TallyBrokenMigrate(TallyV2):
    __actorflow_name__ = "tests.Tally"

    @classmethod
    def migrate(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        raise KeyError("amounts_v0")


class TallyMigrateForgets(TallyV2):
    __actorflow_name__ = "tests.Tally"

    @classmethod
    def migrate(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        return state  # forgets to add total


class TallyMigrateUnstorable(TallyV2):
    __actorflow_name__ = "tests.Tally"

    @classmethod
    def migrate(cls, state: dict[str, Any], from_version: int) -> dict[str, Any]:
        return {**state, "total": sum(state["amounts"]), "cache": object()}


class TallyHugeVersion(TallyV2):
    __actorflow_name__ = "tests.Tally"
    state_version: ClassVar[int] = 1 << 64


class TallyDefaults(TallyV2):
    """The documented alternative: restore() fills in defaults, no version bump."""

    __actorflow_name__ = "tests.Tally"
    state_version: ClassVar[int] = 1

    def restore(self, state: Any) -> None:
        super().restore({"total": sum(state["amounts"]), **state})


def build(cls: type[af.Executor]) -> af.Workflow:
    return af.WorkflowBuilder("tally", start=cls("tally")).build()


@pytest.fixture
def old_session(tmp_path: Path) -> af.SQLiteStore:
    """A store holding session 't' written by version 1 after amounts 5 and 7."""
    store = af.SQLiteStore(tmp_path / "t.db")
    with build(TallyV1) as wf, wf.session("t", store=store) as s:
        s.run(5)
        s.run(7)
    CALLS.clear()
    return store


def test_resume_migrates_an_older_snapshot(old_session: af.SQLiteStore) -> None:
    """Version 2 resumes a version-1 session: migrate() runs once, the handler sees total."""
    TallyV2.migrations.clear()
    with build(TallyV2) as wf, wf.resume(old_session, session="t") as s:
        assert TallyV2.migrations == [1]
        assert s.run(10).outputs == [22]
    with build(TallyV2) as wf, wf.resume(old_session, session="t") as s:
        assert s.run(1).outputs == [23]
    assert TallyV2.migrations == [1]  # the checkpoints since record version 2
    old_session.close()


@pytest.mark.parametrize(
    ("cls", "match"),
    [
        (TallyV2Unversioned, r"lacks attribute\(s\) total.*stored state version 1, current "),
        (TallyV3NoMigrate, "no migrate"),
        (TallyBrokenMigrate, "migrate.. raised KeyError"),
        (TallyMigrateForgets, r"lacks attribute\(s\) total.*make tests.Tally.migrate\(\) set"),
        (TallyMigrateUnstorable, r"migrate\(\) returned a state that cannot be stored.*cache"),
    ],
)
def test_an_unrestorable_snapshot_fails_the_resume(
    old_session: af.SQLiteStore, cls: type[af.Executor], match: str
) -> None:
    """The resume itself raises StateMigrationError naming executor, versions and fix."""
    with build(cls) as wf, pytest.raises(af.StateMigrationError, match=match) as caught:
        wf.resume(old_session, session="t")
    error = caught.value
    assert error.executor == "tally"
    assert error.stored_version == 1 and error.current_version == cls.state_version
    assert "tests.Tally" in str(error) and "state_version" in str(error)
    assert CALLS == []  # no handler ran
    assert old_session.current_lease("t") is None  # the failed resume let go
    old_session.close()


def test_a_newer_snapshot_is_refused(old_session: af.SQLiteStore) -> None:
    """Code older than the checkpoint refuses it (no backward migration)."""
    with build(TallyV2) as wf, wf.resume(old_session, session="t") as s:
        s.run(1)
    with build(TallyV1) as wf, pytest.raises(af.StateMigrationError, match="newer code"):
        wf.resume(old_session, session="t")
    old_session.close()


def test_restore_with_defaults_needs_no_version(old_session: af.SQLiteStore) -> None:
    """A restore() that fills in the new attribute resumes without a version bump."""
    with build(TallyDefaults) as wf, wf.resume(old_session, session="t") as s:
        assert s.run(3).outputs == [15]
    old_session.close()


# --- nested workflows ----------------------------------------------------------------


def nested(cls: type[af.Executor]) -> tuple[af.Workflow, af.Workflow]:
    inner = build(cls)
    outer = af.WorkflowBuilder(
        "outer", start=af.WorkflowExecutor(inner, "sub", outputs="output")
    ).build()
    return inner, outer


def test_nested_states_are_checked_and_migrated(tmp_path: Path) -> None:
    """A sub-workflow's inner states fail the resume when unrestorable, and migrate otherwise."""
    store = af.SQLiteStore(tmp_path / "n.db")
    inner, outer = nested(TallyV1)
    with inner, outer, outer.session("n", store=store) as s:
        assert s.run(4).outputs == [1]
    inner, outer = nested(TallyV2Unversioned)
    with (
        inner,
        outer,
        pytest.raises(af.StateMigrationError, match="in sub-workflow 'sub': executor 'tally'"),
    ):
        outer.resume(store, session="n")
    inner, outer = nested(TallyV2)
    with inner, outer, outer.resume(store, session="n") as s:
        assert s.run(6).outputs == [10]
    store.close()


def test_a_state_version_past_64_bits_is_refused_naming_the_range(
    old_session: af.SQLiteStore,
) -> None:
    with build(TallyHugeVersion) as wf, pytest.raises(af.StateMigrationError, match=r"2\*\*63"):
        wf.resume(old_session, session="t")
    old_session.close()
