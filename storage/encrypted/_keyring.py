"""Keyring: AES-GCM keys by id; the newest seals, every one of them opens.

A sealed value is ``MAGIC | len(key id) | key id | nonce (12) | ciphertext and tag``:
the key id travels with it, so a value sealed before a rotation opens with the
key that sealed it. Every value is bound to its place by AES-GCM associated data
(the caller's ``aad``: a record's visible fields, a blob's digest), so a value
moved to another place, a flipped bit, or a key that is not the one that sealed
it fails its tag: :class:`~actorflow.errors.CheckpointCorrupt`, never garbage.

Each master key yields three subkeys (HKDF-SHA256 with distinct labels): one seals
records and history entries with random nonces; one seals blobs with a synthetic
nonce (HMAC-SHA256 of the blob's digest under the third), so equal blobs sealed by
the same key are equal bytes, which is what keeps content addressing (and so
deduplication) working under encryption. A synthetic nonce repeats only for the
same plaintext, where it gives the same ciphertext and reveals nothing more than
that equality.

Needs the ``cryptography`` package (``actorflow[encryption]``), imported when a
keyring is made, never when actorflow is imported.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from actorflow.errors import CheckpointCorrupt

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["Keyring", "is_sealed"]

_MAGIC = b"\xafE1"
_NONCE = 12


def is_sealed(data: bytes) -> bool:
    """Whether ``data`` is a value a :class:`Keyring` sealed (it starts with the mark no
    plain record field starts with: a runtime record is a msgpack map)."""
    return data[: len(_MAGIC)] == _MAGIC


_TAG = 16
_KEY_SIZES = (16, 24, 32)
_SALT = b"actorflow.encrypted.v1"


def _subkey(master: bytes, label: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) of ``master``: one 32-byte output block for ``label``."""
    prk = hmac.new(_SALT, master, hashlib.sha256).digest()
    return hmac.new(prk, label + b"\x01", hashlib.sha256).digest()


class Keyring:
    """Named AES-GCM keys: the last one given seals, any of them opens.

    Args:
        keys: key id -> key (16, 24 or 32 random bytes), oldest first; the last
            one seals. Ids are non-empty str of at most 255 UTF-8 bytes. Keep every
            key that sealed something still stored: a value whose key is gone
            cannot be opened (``CheckpointCorrupt``).

    Raises:
        ImportError: the ``cryptography`` package is not installed.
        ValueError: no keys, an id that is empty or too long, a key of another size.
        TypeError: an id that is not a str or a key that is not bytes.
    """

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        try:
            from cryptography.exceptions import InvalidTag  # noqa: PLC0415  # an optional extra
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415
        except ImportError:
            raise ImportError(
                "EncryptedStore needs the cryptography package: pip install 'actorflow[encryption]'"
            ) from None
        if not isinstance(keys, Mapping):
            raise TypeError(
                "EncryptedStore(keys=...) takes a mapping of key id to key, "
                f"{{'2026-01': os.urandom(32)}}, got {type(keys).__name__}"
            )
        if not keys:
            raise ValueError("an EncryptedStore needs at least one key")
        self._invalid = InvalidTag
        self._records: dict[bytes, AESGCM] = {}
        self._blobs: dict[bytes, tuple[AESGCM, bytes]] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str):
                raise TypeError(f"key ids are str, got {type(key_id).__name__}")
            name = key_id.encode()
            if not 0 < len(name) <= 255:
                raise ValueError(f"key id {key_id!r} must be 1 to 255 UTF-8 bytes")
            if not isinstance(key, bytes | bytearray):
                raise TypeError(f"key {key_id!r} must be bytes")
            if len(key) not in _KEY_SIZES:
                raise ValueError(
                    f"key {key_id!r} has {len(key)} bytes; AES-GCM takes 16, 24 or 32 "
                    "(use os.urandom(32))"
                )
            master = bytes(key)
            self._records[name] = AESGCM(_subkey(master, b"record"))
            self._blobs[name] = (AESGCM(_subkey(master, b"blob")), _subkey(master, b"blob-nonce"))
        self._current = name
        self._head = _MAGIC + bytes([len(name)]) + name

    @property
    def current(self) -> str:
        """The id of the key that seals."""
        return self._current.decode()

    def seal(self, plaintext: bytes, aad: bytes) -> bytes:
        """``plaintext`` sealed by the newest key with a random nonce, bound to ``aad``."""
        nonce = os.urandom(_NONCE)
        return self._head + nonce + self._records[self._current].encrypt(nonce, plaintext, aad)

    def seal_blob(self, digest: bytes, data: bytes) -> bytes:
        """Blob ``data`` (whose raw sha256 is ``digest``) sealed by the newest key, bound to
        its digest; the same blob always gives the same bytes under the same key."""
        aead, nonce_key = self._blobs[self._current]
        nonce = hmac.new(nonce_key, digest, hashlib.sha256).digest()[:_NONCE]
        return self._head + nonce + aead.encrypt(nonce, data, b"actorflow.blob\0" + digest)

    def open(self, sealed: bytes, aad: bytes, what: str) -> bytes:
        """The plaintext of a value :meth:`seal` made with ``aad``.

        Raises:
            CheckpointCorrupt: naming ``what``: not a sealed value, sealed by a key
                this keyring lacks, tampered with, or sealed for another place.
        """
        name, body = self._split(sealed, what)
        aead = self._records.get(name)
        return self._decrypt(aead, name, body, aad, what)

    def open_blob(self, sealed: bytes, digest: bytes, what: str) -> bytes:
        """The plaintext of a blob :meth:`seal_blob` sealed for ``digest`` (errors as :meth:`open`)."""
        name, body = self._split(sealed, what)
        found = self._blobs.get(name)
        aad = b"actorflow.blob\0" + digest
        return self._decrypt(None if found is None else found[0], name, body, aad, what)

    def _split(self, sealed: bytes, what: str) -> tuple[bytes, memoryview]:
        view = memoryview(sealed)
        size = view[len(_MAGIC)] if len(view) > len(_MAGIC) else 0
        start = len(_MAGIC) + 1 + size
        if view[: len(_MAGIC)] != _MAGIC or len(view) < start + _NONCE + _TAG:
            raise CheckpointCorrupt(f"{what} is not sealed by an EncryptedStore")
        return bytes(view[len(_MAGIC) + 1 : start]), view[start:]

    def _decrypt(
        self, aead: AESGCM | None, name: bytes, body: memoryview, aad: bytes, what: str
    ) -> bytes:
        label = name.decode(errors="replace")
        if aead is None:
            raise CheckpointCorrupt(
                f"{what} is sealed with key {label!r}, which this EncryptedStore does not "
                "hold: add it to keys= (keep every key that sealed something still stored)"
            )
        try:
            return aead.decrypt(body[:_NONCE], body[_NONCE:], aad)
        except self._invalid:
            raise CheckpointCorrupt(
                f"{what} fails its authentication under key {label!r}: it was tampered "
                "with, moved from another place, or sealed with another key of that id"
            ) from None
