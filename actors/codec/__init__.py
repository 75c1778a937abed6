"""actorflow.actors.codec: values to bytes and back, the isolation boundary.

- :func:`encode` / :func:`decode` (``_encode``, ``_decode``): one value as msgpack
  bytes; the wire layout is described in ``_encode``. Decoding rebuilds only the
  types of the allowlist.
- The allowlist (``_registry``): the types registered with :func:`message`, by wire
  name, and the lookups the runtime makes in it.
- Executor snapshots (``_chunks``): :func:`encode_state` / :func:`decode_state`
  split a state into content-addressed chunks, so an incremental checkpoint writes
  only the chunks that changed.
- JSON (``_json``): :func:`to_json` / :func:`from_json` give values a plain JSON
  shape for clients that speak JSON, and read it back as the type a receiver expects.
- Stable class names (``_naming``): the name of a class in checkpoints and on the
  wire, the same whether or not its module ran as ``__main__``.
"""

from ._chunks import check_state, decode_state, encode_state, state_names
from ._decode import decode
from ._encode import encode
from ._json import from_json, to_json, type_named
from ._naming import main_module_name, stable_name
from ._registry import (
    entry_named,
    has_registered_subclass,
    is_registered,
    message,
    registered,
    wire_name,
)

__all__ = [
    "check_state",
    "decode",
    "decode_state",
    "encode",
    "encode_state",
    "entry_named",
    "from_json",
    "has_registered_subclass",
    "is_registered",
    "main_module_name",
    "message",
    "registered",
    "stable_name",
    "state_names",
    "to_json",
    "type_named",
    "wire_name",
]
