"""EncryptedStore: checkpoints encrypted at rest over any store (the ``actorflow[encryption]`` extra).

The ``cryptography`` package is imported when an :class:`EncryptedStore` is made,
never when actorflow is imported.
"""

from ._keyring import is_sealed
from ._store import EncryptedStore

__all__ = ["EncryptedStore", "is_sealed"]
