"""One torture process: drive sessions of a torture workflow on a store, log what they do.

Run as ``python -m torture.child CONFIG.json`` by :mod:`torture.trial`; the oracle
calls :func:`drive` in its own process. Config keys (all JSON):

- ``store``, ``where``: the store kind and its folder (see :mod:`torture.stores`).
- ``spec``: the workflow (see :mod:`torture.grammar`); ``backend``: ``"thread"`` or
  ``"ray:<address>"``.
- ``sessions``: ``[{"id": ..., "log": path, "faults": [[executor, superstep, kind]]}]``,
  driven at once in threads (``mode: "thread"``) or as asyncio tasks (``"asyncio"``).
- ``policy``: ``{"every": n, "idle": bool, "durability": "sync" | "async"}``;
  ``restart``: ``{"max": n}`` or null.
- ``fail_saves``: ``{"<n>": "before" | "after"}``: save calls of this process to fail.
- ``kill``: how this process ends early, or null (see :class:`torture.stores.FaultyStore`
  for ``{"at": "save", ...}``; ``{"at": "handler", "executor", "superstep", "partials"}``
  kills inside that handler once that many partial records of the superstep are
  stored; ``{"at": "time", "after": s}`` kills after ``s`` seconds).
- ``close_after``: seconds after which the store handle is closed under the sessions.
- ``report``: where to write the observation (``memory`` stores, which die with us).
- ``bound``: seconds before the process dumps every thread's stack and exits (a hang).

Every log line is one JSON list written with a single ``write`` to a file opened for
appending, so a SIGKILL loses at most the line being written: ``["attempt", n, how]``,
``["out", superstep, executor, value]``, ``["ckpt", id, superstep, kind]``,
``["error", type, message]`` (an ActorflowError ended the attempt), ``["bug", type,
message, traceback]`` (anything else), ``["done"]``.

Each session goes on until its run is idle with no request pending: a failed run is
closed and the session opened again from the store (a new attempt); pending requests
are answered (:func:`torture.flows.answer_for`) once the run is idle.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import actorflow as af
from actorflow.errors import ActorflowError, CheckpointError, SessionClosed
from actorflow.testing import inject_fault

from . import flows
from .observe import AttemptLog, canonical, final_states, history_of, lineage_outputs
from .stores import FaultyStore, Progress, open_store

__all__ = [
    "Log",
    "Opener",
    "answers_to",
    "drive",
    "main",
    "policy_of",
    "record",
    "restart_of",
    "round_input",
    "split_attempts",
]

MAX_ATTEMPTS = 8
"""Attempts a session gets in one process before it gives up (each after a failed run)."""
RESUME_WAIT = 20.0
"""Seconds a resume waits for the lease of a killed or closed attempt."""


class Log:
    """One session's log file: one JSON list per line, one ``write`` each."""

    def __init__(self, path: str | None) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self.lines: list[list[Any]] = []

    def __call__(self, *item: Any) -> None:
        entry = list(item)
        self.lines.append(entry)
        if self._fd is not None:
            os.write(self._fd, (json.dumps(entry) + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def policy_of(config: Mapping[str, Any]) -> af.CheckpointPolicy:
    policy = config.get("policy") or {}
    return af.CheckpointPolicy(
        every=policy.get("every", 1),
        on_idle_only=policy.get("idle", False),
        durability=af.Durability(policy.get("durability", "sync")),
    )


def restart_of(config: Mapping[str, Any]) -> af.RestartPolicy | None:
    restart = config.get("restart")
    if restart is None:
        return None
    return af.RestartPolicy(max_restarts=restart["max"], within_seconds=120.0)


def round_input(spec: Mapping[str, Any], round_: int) -> flows.Msg:
    """The input of a session's ``round_``-th run (every session runs ``spec["rounds"]``)."""
    return flows.Msg(spec["input"]["hops"], spec["input"]["value"] + 17 * round_)


def _rounds_started(store: Any, session: str) -> int:
    """Runs the stored lineage accepted: one ``entry`` record each (the durable count)."""
    latest = store.latest(session=session)
    if latest is None:
        return 0
    return sum(1 for cp in store.history(latest.id) if cp.kind == "entry")


def answers_to(session: af.Session) -> dict[str, Any]:
    return {p.request_id: flows.answer_for(p.value) for p in session.pending_requests}


def record(event: af.Event, log: Log, progress: Progress | None, session_id: str) -> None:
    if isinstance(event, af.OutputEvent):
        log("out", event.superstep, event.executor, canonical(event.value))
    elif isinstance(event, af.CheckpointedEvent):
        log("ckpt", event.checkpoint_id, event.superstep, str(event.kind))
    elif isinstance(event, af.ExecutorInvokedEvent):
        log("inv", event.superstep, event.executor)
    elif isinstance(event, af.SuperstepCompletedEvent) and progress is not None:
        progress.advance(session_id, event.superstep)


class Opener:
    """Opens one session's attempts: fresh when the store has nothing, else resumed."""

    def __init__(
        self,
        workflow: af.Workflow,
        config: Mapping[str, Any],
        session: Mapping[str, Any],
        *,
        store: Any,
        inner: Any,
        backend: af.ActorBackend | None = None,
    ) -> None:
        self.workflow, self.store, self.inner = workflow, store, inner
        self.config, self.session, self.backend = config, session, backend

    def open(self, log: Log, attempt: int, progress: Progress | None) -> af.Session:
        sid = self.session["id"]
        options: dict[str, Any] = {
            "checkpoint": policy_of(self.config),
            "restart": restart_of(self.config),
            "lease_ttl": self.config.get("lease_ttl", 10.0),
            "backend": self.backend,
        }
        wait = self.config.get("resume_wait", RESUME_WAIT)
        latest = self.inner.latest(session=sid)
        if latest is None:
            log("attempt", attempt, "fresh")
            s = self.workflow.session(sid, store=self.store, wait=wait, **options)
        else:
            s = self.workflow.resume(self.store, session=sid, wait=wait, **options)
            log("attempt", attempt, "resume")
            if progress is not None:
                # Supersteps up to the resumed cut were logged by the attempt that ran them.
                cut = self.inner.load(s.last_checkpoint_id) if s.last_checkpoint_id else latest
                progress.advance(sid, cut.superstep)
        # Faults go into the first attempt only: without a restart policy each of them
        # fails the run, and the next attempt must get past it.
        for executor, superstep, kind in self.session.get("faults", []) if attempt == 0 else []:
            inject_fault(s, executor, superstep, kind)
        return s


def _drive_attempt(
    s: af.Session, opener: Opener, log: Log, progress: Progress | None, sid: str
) -> None:
    """Run ``s`` until idle with nothing pending, then the next round's input, until every
    round ran (raises what a failed run raises)."""
    value: Any = None if s.last_checkpoint_id else round_input(opener.config["spec"], 0)
    while True:
        events = s.stream(value) if value is not None else s.stream()
        for event in events:
            record(event, log, progress, sid)
        answers = answers_to(s)
        if answers:
            s.queue_answers(answers)
            value = None
            continue
        started = _rounds_started(opener.inner, sid)
        if started >= opener.config["spec"].get("rounds", 1):
            return
        value = round_input(opener.config["spec"], started)


async def _adrive_attempt(
    s: af.Session, opener: Opener, log: Log, progress: Progress | None, sid: str
) -> None:
    value: Any = None if s.last_checkpoint_id else round_input(opener.config["spec"], 0)
    while True:
        events = s.astream(value) if value is not None else s.astream()
        async for event in events:
            record(event, log, progress, sid)
        answers = answers_to(s)
        if answers:
            s.queue_answers(answers)
            value = None
            continue
        started = await asyncio.to_thread(_rounds_started, opener.inner, sid)
        if started >= opener.config["spec"].get("rounds", 1):
            return
        value = round_input(opener.config["spec"], started)


def _bug(log: Log, exc: BaseException) -> None:
    log("bug", type(exc).__name__, str(exc), "".join(traceback.format_exception(exc))[-4000:])


def drive(opener: Opener, log: Log, progress: Progress | None) -> bool:
    """Drive one session to its end (attempt after attempt); True if it got there."""
    sid = opener.session["id"]
    for attempt in range(opener.config.get("attempts", MAX_ATTEMPTS)):
        try:
            s = opener.open(log, attempt, progress)
        except ActorflowError as exc:
            log("error", type(exc).__name__, str(exc))
            if _closed(exc):
                return False
            continue
        try:
            with s:
                _drive_attempt(s, opener, log, progress, sid)
            log("done")
            return True
        except ActorflowError as exc:
            log("error", type(exc).__name__, str(exc))
            if _closed(exc):
                return False
    return False


def _closed(exc: ActorflowError) -> bool:
    """Whether ``exc`` says the store (or the session) was closed: no attempt can follow."""
    return isinstance(exc, SessionClosed) or (
        isinstance(exc, CheckpointError) and "closed" in str(exc)
    )


async def adrive(opener: Opener, log: Log, progress: Progress | None) -> bool:
    """:func:`drive` on an event loop (streams with ``astream``)."""
    sid = opener.session["id"]
    for attempt in range(opener.config.get("attempts", MAX_ATTEMPTS)):
        try:
            s = await asyncio.to_thread(opener.open, log, attempt, progress)
        except ActorflowError as exc:
            log("error", type(exc).__name__, str(exc))
            if _closed(exc):
                return False
            continue
        try:
            async with s:
                await _adrive_attempt(s, opener, log, progress, sid)
            log("done")
            return True
        except ActorflowError as exc:
            log("error", type(exc).__name__, str(exc))
            if _closed(exc):
                return False
    return False


def _backend(config: Mapping[str, Any]) -> af.ActorBackend | None:
    backend = str(config.get("backend", "thread"))
    if not backend.startswith("ray:"):
        return None
    here = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    return af.RayBackend(
        init={
            "address": backend[4:],
            "log_to_driver": False,
            "configure_logging": False,
            "runtime_env": {"env_vars": {"PYTHONPATH": path}},
        },
        spares=0,
    )


def _arm_kill(kill: Mapping[str, Any] | None, partials: Callable[[int], int]) -> None:
    if not kill:
        return
    if kill["at"] == "time":
        timer = threading.Timer(kill["after"], lambda: os.kill(os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timer.start()
    elif kill["at"] == "handler":
        target = (kill["executor"], kill["superstep"])
        wanted = kill.get("partials", 0)

        def hook(executor_id: str, superstep: int) -> None:
            if (executor_id, superstep) != target:
                return
            # Let the others of the superstep finish and store their parts first (they
            # may store fewer: an injected fault re-runs this executor alone, say).
            with _PARTIALS:
                _PARTIALS.wait_for(lambda: partials(superstep) >= wanted, timeout=2)
            os.kill(os.getpid(), signal.SIGKILL)

        flows.HOOK = hook


_PARTIALS = threading.Condition()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config = json.loads(Path(args[0]).read_text())
    faulthandler.dump_traceback_later(config.get("bound", 120), exit=True)
    counts: dict[int, int] = {}

    def partial_done(session: str, superstep: int) -> None:
        with _PARTIALS:
            counts[superstep] = counts.get(superstep, 0) + 1
            _PARTIALS.notify_all()

    progress = Progress()
    logs = {s["id"]: Log(s["log"]) for s in config["sessions"]}
    try:
        inner = open_store(config["store"], config["where"])
    except ActorflowError as exc:  # e.g. a store lock held by a stopped process
        for log in logs.values():
            log("error", type(exc).__name__, str(exc))
        return 0
    store = FaultyStore(
        inner,
        logs=logs,
        fail_saves={int(k): v for k, v in (config.get("fail_saves") or {}).items()},
        kill=config.get("kill"),
        progress=progress,
        partial_done=partial_done,
        seed=config.get("seed", 0),
    )
    _arm_kill(config.get("kill"), lambda superstep: counts.get(superstep, 0))
    inners: list[af.Workflow] = []
    workflow = flows.build(config["spec"], inners=inners)
    backend = _backend(config)
    openers = [
        Opener(workflow, config, s, store=store, inner=inner, backend=backend)
        for s in config["sessions"]
    ]
    if config.get("close_after") is not None:
        closer = threading.Timer(config["close_after"], inner.close)
        closer.daemon = True
        closer.start()
    ok = True
    try:
        if config.get("mode") == "asyncio":

            async def all_sessions() -> list[bool]:
                return await asyncio.gather(
                    *(adrive(o, logs[o.session["id"]], progress) for o in openers)
                )

            asyncio.run(all_sessions())
        else:
            threads = [
                threading.Thread(
                    target=_guarded, args=(drive, o, logs[o.session["id"]], progress), daemon=True
                )
                for o in openers
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if config.get("report"):
            _report(config, inner, logs)
    except BaseException as exc:  # noqa: BLE001 - everything a torture process meets is logged
        ok = False
        _bug(next(iter(logs.values())), exc)
    finally:
        flows.close(workflow, inners)
        try:
            inner.close()
        except ActorflowError:
            pass
        for log in logs.values():
            log.close()
    bugs = any(line[0] == "bug" for log in logs.values() for line in log.lines)
    return 0 if ok and not bugs else 2


def _guarded(drive_fn: Callable[..., bool], opener: Opener, log: Log, progress: Progress) -> None:
    try:
        drive_fn(opener, log, progress)
    except BaseException as exc:  # noqa: BLE001 - logged for the parent, which fails the trial
        _bug(log, exc)


def _report(config: Mapping[str, Any], store: Any, logs: Mapping[str, Log]) -> None:
    """What the parent would read from a durable store, for a store that dies with us."""
    report: dict[str, Any] = {"verify": store.verify(), "sessions": {}}
    for sid, log in logs.items():
        attempts = split_attempts(log.lines)
        report["sessions"][sid] = {
            "outputs": lineage_outputs(store, sid, attempts),
            "states": final_states(store, sid),
            "history": history_of(store, sid),
        }
    Path(config["report"]).write_text(json.dumps(report))


def split_attempts(lines: list[list[Any]]) -> list[AttemptLog]:
    """A session's log lines as one :class:`AttemptLog` per ``attempt`` marker."""
    attempts: list[AttemptLog] = []
    for line in lines:
        if line[0] == "attempt" or not attempts:
            attempts.append(AttemptLog())
        attempts[-1].add(line)
    return attempts


if __name__ == "__main__":
    sys.exit(main())
