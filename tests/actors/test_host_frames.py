"""The host messages and the Ray worker's load head: named types, checked where decoded."""

from __future__ import annotations

import msgpack
import pytest

from actorflow.actors import HostLoop, ProgramSlot
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
