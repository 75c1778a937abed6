"""actorflow.actors: the isolation boundary.

Every value that crosses an actor boundary is encoded with this package's codec:
:func:`encode` / :func:`decode` for messages, outputs and requests, and
:func:`encode_state` / :func:`decode_state` for executor snapshots. Only types
registered with :func:`message` (plus the built-in value types) can be decoded.

It also holds the generic executor host actor, which speaks bytes only, and the
backends that place hosts (threads via pykka by default, or Ray worker processes:
:class:`RayBackend`, which imports Ray only when it starts its first worker) with
their warm pool.
"""

from ._backend import (
    ActorBackend,
    HostFuture,
    HostPool,
    HostProxy,
    HostRef,
    OnAnswer,
    ThreadBackend,
    WaitAny,
    group_wait,
    relay_answer,
)
from ._host import ExecutorHost, HandlerAborted, Hosted, HostedFactory, HostLoop, ProgramSlot
from ._reply import LeanActor, ReplyFuture, ReplyTimeout, error_parts, rebuilt_error, said_by
from .codec import (
    check_state,
    decode,
    decode_state,
    encode,
    encode_state,
    entry_named,
    from_json,
    has_registered_subclass,
    is_registered,
    main_module_name,
    message,
    stable_name,
    state_names,
    to_json,
    type_named,
    wire_name,
)
from .ray import RayBackend

__all__ = [
    "ActorBackend",
    "ExecutorHost",
    "HandlerAborted",
    "HostFuture",
    "HostLoop",
    "HostPool",
    "HostProxy",
    "HostRef",
    "Hosted",
    "HostedFactory",
    "LeanActor",
    "OnAnswer",
    "ProgramSlot",
    "RayBackend",
    "ReplyFuture",
    "ReplyTimeout",
    "ThreadBackend",
    "WaitAny",
    "check_state",
    "decode",
    "decode_state",
    "encode",
    "encode_state",
    "entry_named",
    "error_parts",
    "from_json",
    "group_wait",
    "has_registered_subclass",
    "is_registered",
    "main_module_name",
    "message",
    "rebuilt_error",
    "relay_answer",
    "said_by",
    "stable_name",
    "state_names",
    "to_json",
    "type_named",
    "wire_name",
]
