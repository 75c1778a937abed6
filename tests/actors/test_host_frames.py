"""The host messages and the Ray worker's load head: named types, checked where decoded."""

from __future__ import annotations

import queue
import threading
from typing import Any

import msgpack
import pykka
import pytest

import actorflow as af
from actorflow.actors import HostLoop, OnAnswer, ProgramSlot
from actorflow.actors._host import UNLOAD, Call, LoadCall
from actorflow.actors._reply import Raised
from actorflow.actors.ray._worker import LoadHead
from actorflow.errors import BackendError


class Upper:
    """A hosted program that answers its payload in capitals."""

    def __init__(self) -> None:
        self.started = False
        self.stopped = False

    def start(self, loop: HostLoop) -> None:
        self.started = True

    def call(self, method: str, payload: bytes) -> bytes:
        return method.encode() + b":" + payload.upper()

    def stop(self) -> None:
        self.stopped = True


def test_a_slot_answers_each_host_message() -> None:
    programs: list[Upper] = []

    def factory() -> Upper:
        programs.append(Upper())
        return programs[-1]

    slot = ProgramSlot()
    refused = slot.receive(Call("step", b"x"))
    assert type(refused) is Raised and "no program loaded" in str(refused.error)
    assert slot.receive(LoadCall(factory, "step", b"ab")) == b"step:AB"
    assert programs[0].started
    assert slot.receive(Call("snapshot", b"cd")) == b"snapshot:CD"
    assert slot.receive(UNLOAD) is None
    assert programs[0].stopped
    slot.close()


def test_a_slot_refuses_a_message_of_another_shape() -> None:
    """A plain tuple is not a host message: it fails its call, naming what arrived."""
    slot = ProgramSlot()
    answer = slot.receive(("call", "step", b"x"))  # type: ignore[arg-type]
    assert type(answer) is Raised and isinstance(answer.error, ValueError)
    assert "unknown host message ('call', 'step', b'x')" in str(answer.error)
    slot.close()


def test_the_load_head_keeps_its_bytes() -> None:
    """A named head packs to the bytes of the plain 4-tuple the workers read."""
    head = LoadHead("0" * 64, b"\x80pickle", "executor 'e' (m.E)", "step")
    assert head.pack() == msgpack.packb(tuple(head), use_bin_type=True)
    assert LoadHead.unpack(head.pack()) == head
    cached = LoadHead("1" * 64, b"", "", "restore")
    assert LoadHead.unpack(cached.pack()) == cached


@pytest.mark.parametrize(
    "head",
    [
        b"\xc1",  # not msgpack
        msgpack.packb({"digest": "d"}),
        msgpack.packb(["d", b"", ""]),
        msgpack.packb(["d", b"", "", "step", "extra"]),
        msgpack.packb(["d", "not bytes", "", "step"], use_bin_type=True),
        msgpack.packb([1, b"", "", "step"], use_bin_type=True),
        msgpack.packb(["d", b"", "", None], use_bin_type=True),
    ],
)
def test_a_malformed_load_head_is_a_backend_error(head: bytes) -> None:
    with pytest.raises(BackendError, match="same version of actorflow"):
        LoadHead.unpack(head)


# --- relays: a call whose answer the host hands on itself ------------------------------


class Gated(Upper):
    """:class:`Upper` that fails on ``fail`` and waits for ``gate`` on ``wait``."""

    gate = threading.Event()
    entered = threading.Event()

    def call(self, method: str, payload: bytes) -> bytes:
        if method == "fail":
            raise KeyError(payload.decode())
        if method == "wait":
            Gated.entered.set()
            assert Gated.gate.wait(10)
        return super().call(method, payload)


def answers() -> tuple[queue.SimpleQueue[tuple[Any, int]], OnAnswer]:
    """Where a relay's answers land, each with the thread that handed it on."""
    landed: queue.SimpleQueue[tuple[Any, int]] = queue.SimpleQueue()
    return landed, lambda answer: landed.put((answer, threading.get_ident()))


def test_a_thread_host_relays_each_answer_from_its_own_thread() -> None:
    """The bytes, or the error the call raised, go to ``then`` on the host's thread;
    a host that has not started yet (its first call starts it) relays as well."""
    host = af.actors.ThreadBackend().spawn("e")
    landed, then = answers()
    try:
        host.relay("step", b"never", then)  # no program loaded yet
        refused, _ = landed.get(timeout=10)
        assert isinstance(refused, RuntimeError) and "no program loaded" in str(refused)
        assert host.load_call(Gated, "step", b"ab").get(timeout=10) == b"step:AB"
        host.relay("step", b"cd", then)
        host.relay("fail", b"gone", then)
        answer, thread = landed.get(timeout=10)
        assert answer == b"step:CD" and thread != threading.get_ident()
        error, same = landed.get(timeout=10)
        assert isinstance(error, KeyError) and error.args == ("gone",) and same == thread
    finally:
        host.stop()


def test_a_relay_to_a_stopped_host_hears_that_it_stopped() -> None:
    """A relay told to a host that stopped, or left in its inbox when it stops (pykka
    drops tells there), still gets an answer: ActorDeadError, never silence."""
    Gated.gate.clear()
    Gated.entered.clear()
    host = af.actors.ThreadBackend().spawn("e")
    landed, then = answers()
    assert host.load_call(Gated, "step", b"ab").get(timeout=10) == b"step:AB"
    host.relay("wait", b"first", then)
    assert Gated.entered.wait(10)
    host.stop()  # behind the relay that waits
    host.relay("step", b"left", then)  # behind the stop: never handled
    Gated.gate.set()
    first, _ = landed.get(timeout=10)
    assert first == b"wait:FIRST"
    left, _ = landed.get(timeout=10)
    assert isinstance(left, pykka.ActorDeadError)
    host.relay("step", b"late", then)
    late, _ = landed.get(timeout=10)
    assert isinstance(late, pykka.ActorDeadError)


def test_a_proxy_relays_through_its_own_call() -> None:
    """A wrapper that changes ``call`` (fault injection) changes relays too."""

    class Shouting(af.actors.HostProxy):
        def call(self, method: str, payload: bytes) -> af.actors.HostFuture:
            return super().call(method, payload + b"!")

    host = Shouting(af.actors.ThreadBackend().spawn("e"))
    landed, then = answers()
    try:
        assert host.load_call(Gated, "step", b"ab").get(timeout=10) == b"step:AB"
        host.relay("step", b"cd", then)
        assert landed.get(timeout=10)[0] == b"step:CD!"
    finally:
        host.stop()
