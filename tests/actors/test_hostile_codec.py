"""Hostile wire bytes: no input makes decoding slow, import a module or run code."""

from __future__ import annotations

import decimal
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import msgpack
import pytest

import actorflow as af
from actorflow.actors import decode, encode
from actorflow.actors.codec._encode import (
    EXT_BIGINT,
    EXT_DATETIME,
    EXT_SET,
    EXT_TUPLE,
    MAX_SHARED_HASH,
)

_P = (1 << 61) - 1  # CPython's numeric hash modulus: multiples of it all hash to 0


def _colliding_ints(n: int) -> list[int]:
    return [(k + (1 << 4)) * _P * (1 << 64) for k in range(n)]


def _ext(code: int, payload: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(code, payload)


def _bigint(n: int) -> msgpack.ExtType:
    return _ext(EXT_BIGINT, n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True))


def _flood_cases(n: int) -> dict[str, bytes]:
    ints = [_bigint(i) for i in _colliding_ints(n)]
    decimals = [_ext(10, str(decimal.Decimal(i)).encode()) for i in _colliding_ints(n)]
    uuids = [_ext(9, (k * _P).to_bytes(16, "big")) for k in range(1, n + 1)]
    tuples = [_ext(EXT_TUPLE, msgpack.packb([i])) for i in ints]
    return {
        "set of bigints": msgpack.packb(_ext(EXT_SET, msgpack.packb(ints))),
        "frozenset of decimals": msgpack.packb(_ext(3, msgpack.packb(decimals))),
        "map keyed by bigints": msgpack.packb(dict.fromkeys(ints, 0)),
        "map keyed by uuids": msgpack.packb(dict.fromkeys(uuids, 0)),
        "map keyed by tuples": msgpack.packb({"a": [dict.fromkeys(tuples, 0)]}),
    }


@pytest.mark.parametrize("case", sorted(_flood_cases(1)))
def test_hash_flooding_keys_are_refused_quickly(case: str) -> None:
    """Thousands of keys sharing one hash (seconds to build) are a DecodeError in milliseconds."""
    data = _flood_cases(20_000)[case]
    assert len(data) < 1_000_000
    started = time.perf_counter()
    with pytest.raises(af.DecodeError, match="share one hash"):
        decode(data)
    # Not a timing assertion on speed: the quadratic build this refuses takes >5 s.
    assert time.perf_counter() - started < 5.0


def test_a_few_colliding_keys_still_decode() -> None:
    """Up to MAX_SHARED_HASH equal hashes is ordinary data (e.g. -1 and -2)."""
    keys = _colliding_ints(MAX_SHARED_HASH)
    value = {"s": set(keys), "m": dict.fromkeys(keys, 1), "t": [(k,) for k in keys]}
    assert decode(encode(value)) == value
    many = {(i, str(i)): i for i in range(5000)}  # many tuple keys, distinct hashes
    assert decode(encode(many)) == many


def test_non_canonical_bigint_is_refused() -> None:
    """A bigint ext for an int msgpack can carry, or with padding bytes, is never written."""
    for payload in (b"\x01", b"\x00" + (1 << 70).to_bytes(9, "big")):
        with pytest.raises(af.DecodeError, match="non-canonical"):
            decode(msgpack.packb(_ext(EXT_BIGINT, payload)))
    assert decode(encode(1 << 70)) == 1 << 70


def _datetime_with_zone(key: str) -> bytes:
    data: bytes = msgpack.packb(_ext(EXT_DATETIME, msgpack.packb([2024, 1, 2, 3, 4, 5, 6, 0, key])))
    return data


_PLANTED = """
import pathlib
pathlib.Path({marker!r}).write_text(__name__)
"""


@pytest.mark.parametrize("key", ["Evil/Zone", "Nowhere", "Evil/Deeper/Zone"])
def test_unknown_zone_key_imports_nothing(tmp_path: Path, key: str) -> None:
    """A planted ``tzdata`` package on sys.path never runs when bytes name an unknown zone."""
    marker = tmp_path / "ran"
    root = tmp_path / "planted"
    for package in [
        "tzdata",
        "tzdata/zoneinfo",
        "tzdata/zoneinfo/Evil",
        "tzdata/zoneinfo/Evil/Deeper",
    ]:
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text(_PLANTED.format(marker=str(marker)))
    script = textwrap.dedent(
        f"""
        import sys
        import actorflow as af
        from actorflow.actors import decode
        before = set(sys.modules)
        try:
            decode({_datetime_with_zone(key)!r})
        except af.DecodeError as exc:
            print("refused:", exc)
        else:
            print("decoded")
        print("new modules:", sorted(set(sys.modules) - before))
        """
    )
    # The planted folder comes first on the child's sys.path, ahead of site-packages.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert "refused: unknown time zone" in out.stdout
    assert "new modules: []" in out.stdout
    assert not marker.exists(), marker.read_text()


def test_known_zone_still_decodes() -> None:
    """A zone of the system database decodes (no import needed)."""
    import datetime as dt
    import zoneinfo

    value = dt.datetime(2024, 5, 6, 7, 8, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    assert decode(encode(value)) == value


def test_uuid_map_keys_roundtrip() -> None:
    """UUID keys (chosen hashes) of ordinary data decode as before."""
    value = {uuid.UUID(int=i * 7919): i for i in range(300)}
    assert decode(encode(value)) == value
