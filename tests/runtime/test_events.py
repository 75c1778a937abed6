"""Event records: built by a fast ``__init__``, with the dataclass's own fields and behaviour."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

import actorflow as af

EVENT_TYPES = [
    getattr(af, name)
    for name in af.__all__
    if isinstance(getattr(af, name), type) and issubclass(getattr(af, name), af.Event)
]


def test_every_event_type_is_covered() -> None:
    assert len(EVENT_TYPES) >= 16
    assert set(EVENT_TYPES) >= {af.OutputEvent, af.RunStartedEvent, af.CheckpointedEvent}


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_init_takes_positions_keywords_and_defaults(cls: type[af.Event]) -> None:
    # ``seq`` (the history number) is keyword-only: it never shifts the positions.
    fields = [f for f in dataclasses.fields(cls) if not f.kw_only]
    assert [f.name for f in dataclasses.fields(cls) if f.kw_only] == ["seq"]
    values = [object() for _ in fields]
    make: Callable[..., af.Event] = cls  # each event type's own fields, any values
    assert make(*values).seq is None
    by_position = make(*values)
    by_keyword = make(**{f.name: v for f, v in zip(fields, values, strict=True)})
    for f, v in zip(fields, values, strict=True):
        assert getattr(by_position, f.name) is v
        assert getattr(by_keyword, f.name) is v
    assert by_position == by_keyword
    required = [f for f in fields if f.default is dataclasses.MISSING]
    minimal = make(*values[: len(required)])
    for f in fields[len(required) :]:
        assert getattr(minimal, f.name) == f.default
    with pytest.raises(TypeError):
        make(*values, object())  # one argument too many
    with pytest.raises(dataclasses.FrozenInstanceError):
        minimal.run_id = "changed"  # type: ignore[misc]


def test_events_compare_and_hash_by_value() -> None:
    a = af.ExecutorInvokedEvent("run", 2, 1.5, "w", 3)
    b = af.ExecutorInvokedEvent(run_id="run", superstep=2, time=1.5, executor="w", messages=3)
    assert a == b and hash(a) == hash(b)
    assert dataclasses.replace(a, messages=4) == af.ExecutorInvokedEvent("run", 2, 1.5, "w", 4)
