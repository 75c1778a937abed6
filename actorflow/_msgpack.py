"""Low-level msgpack pieces shared by the wire protocol and the checkpoint format."""

from __future__ import annotations

import struct
import threading

import msgpack

__all__ = ["bin_header", "packer"]


class _Packers(threading.local):
    def __init__(self) -> None:
        self.packer = msgpack.Packer(use_bin_type=True, autoreset=True)


_PACKERS = _Packers()


def packer() -> msgpack.Packer:
    """This thread's packer (``use_bin_type``, autoreset).

    A Packer is not thread-safe, and ``msgpack.packb`` builds a new one per call
    (~1 us); the runtime packs a few frames per executor per superstep.
    """
    found: msgpack.Packer = _PACKERS.packer
    return found


_BIN8 = struct.Struct(">BB")
_BIN16 = struct.Struct(">BH")
_BIN32 = struct.Struct(">BI")


def bin_header(size: int) -> bytes:
    """The msgpack header of a bin of ``size`` bytes: what a Packer writes before them.

    Writing the header and joining the bytes after it copies them once, where a
    Packer copies them into a buffer it grows by doubling, then copies that out.
    """
    if size < 0x100:
        return _BIN8.pack(0xC4, size)
    if size < 0x10000:
        return _BIN16.pack(0xC5, size)
    return _BIN32.pack(0xC6, size)
