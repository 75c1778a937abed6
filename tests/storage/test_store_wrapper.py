"""StoreWrapper: every protocol method forwarded, the fast paths only where right, leases,
close (the kit itself runs on wrappers in test_wrapped_conformance)."""

from __future__ import annotations

import doctest
import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.errors import StoreClosed
from actorflow.storage import (
    BlobBatchReader,
    Checkpoint,
    CheckpointStore,
    MemoryStore,
    SavesCuts,
    SQLiteStore,
    StoreWrapper,
    cut_saver,
    is_volatile,
)
from actorflow.storage.conformance import make_checkpoint

_wrapper = importlib.import_module("actorflow.storage._wrapper")
protocol_methods = _wrapper.protocol_methods
takes_cuts = importlib.import_module("actorflow.storage._fast_paths").takes_cuts

FORWARDED = sorted(
    {*protocol_methods(CheckpointStore), *protocol_methods(BlobBatchReader)}
    | set(protocol_methods(SavesCuts))
)


def _recorder() -> Any:
    """A store whose every method (of the protocol and the fast paths) records its call."""
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def method(name: str) -> Any:
        def record(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append((name, args, kwargs))
            return ("returned by", name)

        return record

    kind = type("Recorder", (), {name: method(name) for name in FORWARDED})
    store = kind()
    store.calls = calls
    return store


def _arguments(name: str) -> tuple[object, ...]:
    """A distinct object per positional parameter of the protocol method."""
    declared = next(
        getattr(p, name) for p in (CheckpointStore, BlobBatchReader, SavesCuts) if hasattr(p, name)
    )
    params = list(inspect.signature(declared).parameters.values())[1:]
    return tuple(object() for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)


def test_forwarded_names_come_from_the_protocols() -> None:
    """The forwarded names are the protocols' own members, not a list kept by hand."""
    assert {"save", "acquire_lease", "session_history", "close", "load_blobs", "save_cut"} <= set(
        FORWARDED
    )
    for name in protocol_methods(CheckpointStore):
        assert callable(getattr(StoreWrapper, name)), name


@pytest.mark.parametrize("name", FORWARDED)
def test_every_protocol_method_is_forwarded(name: str) -> None:
    """Each method of CheckpointStore (and of the fast paths the inner store has) reaches the
    inner store with the caller's arguments, and its result comes back."""
    inner = _recorder()
    wrapper = StoreWrapper(inner)
    args = _arguments(name)
    got = getattr(wrapper, name)(*args)
    assert inner.calls == [(name, args, {})]
    if name not in ("close", "save_cut"):  # declared to return None
        assert got == ("returned by", name)


def test_forwarders_carry_the_protocol_contract() -> None:
    """help() and inspect.signature show the protocol's docstrings and signatures."""
    assert StoreWrapper.prune.__doc__ == CheckpointStore.prune.__doc__
    assert inspect.signature(StoreWrapper.prune) == inspect.signature(CheckpointStore.prune)
    assert "lock_wait" in inspect.signature(StoreWrapper(MemoryStore()).acquire_lease).parameters


class _OldLeases(StoreWrapper):
    """A store whose acquire_lease was written before lock_wait existed."""

    def acquire_lease(self, session: str, owner: str, ttl: float) -> af.Lease:  # type: ignore[override]
        return self.inner.acquire_lease(session, owner, ttl)


def test_lock_wait_is_passed_only_to_a_store_that_takes_it() -> None:
    """The wrapper always takes lock_wait= (the runtime reads it once per class), checks
    it, and passes it on only when the inner store's acquire_lease takes it."""
    inner = _recorder()
    StoreWrapper(inner).acquire_lease("s", "o", 1.0, lock_wait=2.0)
    assert inner.calls == [("acquire_lease", ("s", "o", 1.0), {"lock_wait": 2.0})]
    old = StoreWrapper(_OldLeases(MemoryStore()))  # type: ignore[arg-type]  # an old store, on purpose
    lease = old.acquire_lease("s", "o", 60.0, lock_wait=2.0)
    assert old.current_lease("s") == lease
    with pytest.raises(ValueError, match="lock_wait"):
        old.acquire_lease("t", "o", 60.0, lock_wait=-1.0)


class _Counting(StoreWrapper):
    """Counts saves and blob reads: a metrics wrapper."""

    def __init__(self, inner: CheckpointStore) -> None:
        super().__init__(inner)
        self.saved: list[str] = []
        self.blobs_read = 0

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: af.Lease | None = None
    ) -> None:
        self.saved.append(checkpoint.id)
        super().save(checkpoint, blobs, lease=lease)

    def load_blob(self, digest: str) -> bytes:
        self.blobs_read += 1
        return super().load_blob(digest)


def test_a_pass_through_keeps_the_inner_fast_paths() -> None:
    """Over a MemoryStore a plain wrapper takes cuts and reads blobs in batches as it does;
    it is never volatile (what a wrapper adds may outlive the process)."""
    wrapper = StoreWrapper(MemoryStore())
    assert takes_cuts(wrapper)
    assert isinstance(wrapper, BlobBatchReader)
    assert not is_volatile(wrapper)
    assert isinstance(wrapper, CheckpointStore)


def test_overriding_save_sees_every_cut() -> None:
    """A wrapper that overrides save gets every record there: the runtime does not use the
    inner store's cut fast path for it, and save_cut called anyway goes through save."""
    wrapper = _Counting(MemoryStore())
    assert not takes_cuts(wrapper)
    checkpoint, blobs = make_checkpoint()
    cut_saver(wrapper)(_as_cut(checkpoint), blobs)
    other, other_blobs = make_checkpoint()
    wrapper.save_cut(_as_cut(other), other_blobs)
    assert wrapper.saved == [checkpoint.id, other.id]
    assert wrapper.load(other.id) == other


def test_overriding_load_blob_sees_every_batch_read() -> None:
    """load_blobs of a wrapper that overrides load_blob goes through it, blob by blob."""
    wrapper = _Counting(MemoryStore())
    checkpoint, blobs = make_checkpoint(chunks={"e": [b"a", b"b"]})
    wrapper.save(checkpoint, blobs)
    assert wrapper.load_blobs(blobs) == blobs
    assert wrapper.blobs_read == 2


def test_a_session_saves_through_the_wrapper(tmp_path: Path) -> None:
    """A workflow session on a wrapped store takes its lease and saves every cut through
    the wrapper's save; it resumes from the same wrapped store."""
    wf = af.WorkflowBuilder("counting", start=_Add("add")).build()
    store = _Counting(SQLiteStore(tmp_path / "runs.db"))
    with wf, store:
        with wf.session("s", store=store) as session:
            assert session.run(2).outputs == [2]
            assert session.run(3).outputs == [5]
        assert store.saved == [cp.id for cp in store.list(session="s")]
        with wf.resume(store, session="s") as session:
            assert session.run(1).outputs == [6]


def test_close_closes_the_inner_store_unless_told_not_to() -> None:
    """close() closes the inner store by default; with close_inner=False the inner store
    stays open and only the wrapper refuses later calls."""
    inner = MemoryStore()
    with StoreWrapper(inner):
        pass
    with pytest.raises(StoreClosed):
        inner.list()
    inner = MemoryStore()
    wrapper = StoreWrapper(inner, close_inner=False)
    wrapper.close()
    wrapper.close()
    assert inner.list() == []
    for call in (wrapper.list, lambda: wrapper.acquire_lease("s", "o", 1.0)):
        with pytest.raises(StoreClosed, match="StoreWrapper"):
            call()


def test_the_module_example_runs() -> None:
    """The metrics wrapper in the module docstring (a doctest) runs and passes."""
    result = doctest.testmod(_wrapper, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


class _Add(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.total = 0

    @af.handler
    def on_number(self, value: int, ctx: af.Context[None]) -> None:
        self.total += value
        ctx.output(self.total)


def _as_cut(checkpoint: Checkpoint) -> Any:
    kit = importlib.import_module("actorflow.storage.conformance._contract")
    return kit.as_cut(checkpoint)
