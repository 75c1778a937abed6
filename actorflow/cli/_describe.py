"""What ``actorflow checkpoints show`` prints about one checkpoint.

Payloads in flight are shown as sizes. Pending requests are shown with their
values decoded, and executor state as chunk digests and sizes, or decoded with
``--decode``. Decoding never imports code: a value of a type no module imported
in this process registered (see ``--import``) is shown as undecodable, with why.
"""

from __future__ import annotations

from typing import Any

from actorflow.actors import decode, decode_state
from actorflow.errors import ActorflowError
from actorflow.runtime import arguments_of, check_runtime_bytes, raised_place
from actorflow.storage import Checkpoint, CheckpointStore

__all__ = ["describe_checkpoint", "describe_runtime"]


def describe_checkpoint(
    store: CheckpointStore, cp: Checkpoint, *, decode_states: bool
) -> dict[str, Any]:
    """Everything ``show`` prints about ``cp`` (JSON-ready, values as ``repr`` where needed)."""
    return {
        "id": cp.id,
        "parent_id": cp.parent_id,
        "session": cp.session,
        "workflow": cp.workflow,
        "superstep": cp.superstep,
        "kind": cp.kind.value,
        "created_at": cp.created_at,
        "graph_signature": cp.graph_signature,
        "executors": {
            eid: _state(store, list(digests), decode_states)
            for eid, digests in cp.executors.items()
        },
        "metadata": dict(cp.metadata),
        "runtime": describe_runtime(cp.runtime),
    }


def _state(store: CheckpointStore, digests: list[str], decoded: bool) -> dict[str, Any]:
    try:
        chunks = [store.load_blob(d) for d in digests]
    except ActorflowError as exc:
        return {"digests": digests, "error": str(exc)}
    shown: dict[str, Any] = {"digests": digests, "bytes": sum(len(c) for c in chunks)}
    if decoded:
        try:
            shown["state"] = {k: _plain(v) for k, v in decode_state(chunks).items()}
        except ActorflowError as exc:
            shown["state_error"] = str(exc)
    return shown


def describe_runtime(runtime: bytes) -> dict[str, Any]:
    """The runtime blob: payloads in flight as sizes, pending requests with their values.

    Decoded and checked as a resume does it.

    Raises:
        CheckpointCorrupt: the field is malformed.
    """
    body = check_runtime_bytes(runtime)
    if "partial" in body:  # one executor's finished part of an unfinished superstep
        sends, outputs, requests, effects, statements = body["report"]
        return {
            "partial": body["partial"],
            "sends": [[target, group, _size(payload)] for target, group, payload in sends],
            "outputs": len(outputs),
            "requests": len(requests),
            "effects": len(effects),
            "statements": len(statements),
        }
    inbox = {t: [[src, grp, _size(p)] for src, grp, p in ds] for t, ds in body["inbox"].items()}
    fan_in = {g: {s: len(v) for s, v in srcs.items()} for g, srcs in body["fan_in"].items()}
    pending = [
        {
            "id": request_id,
            "executor": entry[0],
            "response_type": entry[2],
            "value": _value(entry[1]),
        }
        for request_id, entry in sorted(body["pending"].items())
    ]
    described = {"superstep": body["superstep"], "inbox": inbox, "fan_in": fan_in}
    described["pending"] = pending
    if "effects" in body:  # journaled effect results this cut commits
        described["effects"] = [_effect(*entry) for entry in body["effects"]]
    return described


def _effect(executor: str, superstep: int, name: str, n: int, result: bytes) -> dict[str, Any]:
    """One journaled effect: its result, the digest of its arguments, or (a raise the
    handler caught) what it raised."""
    raised = raised_place(name)
    called = arguments_of(name)
    if called is not None:
        return {
            "executor": executor,
            "superstep": superstep,
            "effect": called,
            "n": n,
            "arguments": result.hex() if isinstance(result, bytes) else _size(result),
        }
    if raised is None:
        return {
            "executor": executor,
            "superstep": superstep,
            "effect": name,
            "n": n,
            "result": _value(result),
        }
    record = _value(result)  # [module, qualname, args, attributes, message]
    if type(record) is list and len(record) == 5:
        record = f"{record[1]}: {record[4]}"
    return {
        "executor": executor,
        "superstep": superstep,
        "effect": raised[0],
        "n": raised[1],
        "raised": record,
    }


def _value(payload: Any) -> Any:
    if not isinstance(payload, bytes):
        return _size(payload)
    try:
        return _plain(decode(payload))
    except ActorflowError as exc:
        return {"undecodable": str(exc), "bytes": len(payload)}


def _plain(value: Any) -> Any:
    """``value`` if JSON shows it as it is, else its ``repr``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if type(value) is list:
        return [_plain(v) for v in value]
    if type(value) is dict and all(isinstance(k, str) for k in value):
        return {k: _plain(v) for k, v in value.items()}
    return repr(value)


def _size(payload: Any) -> str:
    if isinstance(payload, bytes):
        return f"{len(payload)} bytes"
    if isinstance(payload, list):
        return f"{len(payload)} items"
    return type(payload).__name__
