"""One torture trial: a seed becomes a workflow, a fault plan and a concurrency shape.

A trial is named by its store kind, its seed and its backend (``sqlite:1234``,
``file3:77:ray``); everything else is drawn from the seed, so the name replays it.
The kinds of trial (chosen by the seed, in turn):

- ``faults``: one session; handler exceptions, timeouts and dead actors injected at
  supersteps the executors really run, failing store writes (before or after the
  write), with or without a restart policy; a failed run is opened again from the store.
- ``crash``: one session over several processes, each but the last SIGKILLed at a
  drawn moment: inside a handler once the other executors of its superstep stored
  their parts (between partial records), before, inside or after a save (of a drawn
  kind), or after a drawn time.
- ``threads`` / ``asyncio``: many sessions at once on one store handle, each with
  faults of its own.
- ``processes``: several processes at once on one store (a handle each), one of them
  SIGKILLed; a last process finishes what it left.
- ``takeover``: a process is stopped (SIGSTOP) before a save, or inside one; once its
  lease expired a second process takes the session over and finishes it (or, when
  the stopped one holds a lock of the store, gives up within its ``wait=``); then
  the first one continues, and every save it tries after a takeover is refused.
- ``close``: the store handle is closed under many running sessions; every call then
  succeeds or raises an actorflow error, and a later process finishes every session.

The oracle is the fault-free run of the same workflow and input on a MemoryStore, in
this process. A trial passes when, for every session, the outputs along the stored
lineage equal the oracle's exactly, the final states equal, ``verify()`` finds
nothing, no process met an exception outside :class:`~actorflow.errors.ActorflowError`,
none died of anything but the planned SIGKILL, and none outlived its bound.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import actorflow as af

from . import flows, grammar
from .child import Log, Opener, answers_to, drive, record, round_input, split_attempts
from .observe import AttemptLog, final_states, history_of, lineage_outputs
from .stores import DURABLE, FaultyStore, drop_store, open_store

__all__ = ["KINDS", "Failure", "Oracle", "Trial", "oracle_of"]

KINDS = ("crash", "faults", "threads", "crash", "asyncio", "processes", "takeover", "close")
"""Trial kinds in the order seeds take them (crashes twice as often)."""
IN_PROCESS = {"crash": "faults", "processes": "threads", "takeover": "asyncio"}
"""What a kind that needs a durable store becomes on a MemoryStore."""

ROOT = Path(__file__).resolve().parent.parent
CHILD_BOUND = 90.0
"""Seconds a torture process may run before it dumps its stacks and exits (a hang)."""


PLANNED = (
    "injected",  # an injected exception or store write failure
    "ActorDeadError",  # an injected dead actor, with no restart policy to absorb it
    "HostLost",  # the same on Ray: a worker stopped or killed
    "timed out",  # an injected timeout, likewise
    "ExecutorTimedOut",
)
"""What the errors that a fault plan causes say (any trial may have them)."""
KIND_ERRORS = {
    "takeover": ("LeaseLost", "SessionOwned", "StoreLocked", "no longer current", "taken over"),
    "close": ("closed",),
}
"""Errors a kind of trial causes on purpose: a stopped owner fenced off, a closed store."""


class Failure(Exception):
    """A trial found something: what, and where its files were kept."""


@dataclasses.dataclass(frozen=True)
class Oracle:
    """The fault-free run of a spec."""

    outputs: list[list[Any]]
    states: dict[str, Any]
    invoked: list[tuple[int, str]]
    """(superstep, executor) of every executor invocation."""
    supersteps: int
    seconds: float
    trace: list[list[Any]] = dataclasses.field(default_factory=list)
    """Its outputs and invocations, in order: ``["out", superstep, executor, value]``
    and ``["inv", superstep, executor]``."""
    express: list[list[Any]] = dataclasses.field(default_factory=list)
    """The same of the same rounds on a session without a store (whose supersteps of
    one executor go from host to host): it must equal ``trace``."""

    def widths(self) -> dict[int, list[str]]:
        """Superstep -> the executors it ran."""
        out: dict[int, list[str]] = {}
        for superstep, executor in self.invoked:
            out.setdefault(superstep, []).append(executor)
        return out


def oracle_of(spec: Mapping[str, Any]) -> Oracle:
    """Run ``spec`` without faults on a MemoryStore and observe it."""
    inners: list[af.Workflow] = []
    workflow = flows.build(spec, inners=inners)
    store = af.MemoryStore()
    config = {"spec": spec, "policy": {}, "restart": None}
    log = Log(None)
    started = time.perf_counter()
    try:
        faulty = FaultyStore(store, logs={"oracle": log})  # no faults: it logs the saves
        opener = Opener(workflow, config, {"id": "oracle"}, store=faulty, inner=store)
        if not drive(opener, log, None):
            raise RuntimeError(f"the oracle run of {spec['name']} failed: {log.lines[-3:]}")
        seconds = time.perf_counter() - started
        attempts = split_attempts(log.lines)
        outputs = lineage_outputs(store, "oracle", attempts)
        states = final_states(store, "oracle")
        express = express_trace(workflow, spec)
    finally:
        flows.close(workflow, inners)
        store.close()
    invoked = [(line[1], line[2]) for line in log.lines if line[0] == "inv"]
    trace = [line for line in log.lines if line[0] in ("out", "inv")]
    return Oracle(
        _json(outputs),
        _json(states),
        invoked,
        states.get("superstep", 0),
        seconds,
        trace=_json(trace),
        express=_json(express),
    )


def express_trace(workflow: af.Workflow, spec: Mapping[str, Any]) -> list[list[Any]]:
    """``spec``'s rounds on a session without a store, restart policy or faults (its
    one-executor supersteps go express): what it output and invoked, in order."""
    log = Log(None)
    with workflow.session() as session:
        for round_ in range(spec.get("rounds", 1)):
            value: Any = round_input(spec, round_)
            while True:
                for event in session.stream(value) if value is not None else session.stream():
                    record(event, log, None, "express")
                answers = answers_to(session)
                if not answers:
                    break
                session.queue_answers(answers)
                value = None
    return [line for line in log.lines if line[0] in ("out", "inv")]


def _acceptable(oracle: Oracle) -> bool:
    return 3 <= oracle.supersteps <= 80 and bool(oracle.outputs) and oracle.seconds < 3.0


@dataclasses.dataclass
class Trial:
    """One trial, drawn from its name (see the module docstring)."""

    store: str
    seed: int
    backend: str = "thread"
    ray_address: str | None = None

    @property
    def name(self) -> str:
        return f"{self.store}:{self.seed}" + (":ray" if self.backend == "ray" else "")

    @classmethod
    def parse(cls, name: str) -> Trial:
        parts = name.split(":")
        if len(parts) not in (2, 3) or not parts[1].isdigit():
            raise ValueError(f"a trial is named store:seed[:ray], not {name!r}")
        return cls(parts[0], int(parts[1]), "ray" if len(parts) == 3 else "thread")

    @property
    def kind(self) -> str:
        kind = KINDS[self.seed % len(KINDS)]
        if self.store not in DURABLE:
            kind = IN_PROCESS.get(kind, kind)
        if self.backend == "ray" and kind not in ("crash", "faults"):
            kind = "faults"
        return kind

    def replay_command(self) -> str:
        wrap = "bash .ci/postgres.sh " if self.store == "postgres" else ""
        return f"{wrap}.venv/bin/python -m torture.run --replay {self.name}"

    # --- running --------------------------------------------------------------------

    def run(self, *, keep: Path | None = None) -> dict[str, Any]:
        """Run the trial; returns what it did. Raises Failure with the evidence."""
        rng = random.Random(f"trial:{self.name}")
        spec, oracle = self._spec()
        work = Path(tempfile.mkdtemp(prefix=f"torture-{self.store}-{self.seed}-"))
        summary: dict[str, Any] = {"trial": self.name, "kind": self.kind, "flow": spec["name"]}
        try:
            if oracle.express != oracle.trace:
                raise Failure(
                    f"the run of {spec['name']} without a store (express supersteps) differs "
                    f"from its run on a MemoryStore: {_first_difference(oracle)}"
                )
            runner = _Runner(self, spec, oracle, work, rng)
            getattr(runner, self.kind)()
            runner.check()
            summary.update(runner.summary)
        except Failure as exc:
            kept = self._keep(work, keep)
            raise Failure(f"{exc}\n  files: {kept}\n  replay: {self.replay_command()}") from None
        except BaseException:
            self._keep(work, keep)
            raise
        else:
            shutil.rmtree(work, ignore_errors=True)
        finally:
            drop_store(self.store, str(work))
        return summary

    def _spec(self) -> tuple[dict[str, Any], Oracle]:
        many = self.kind in ("threads", "asyncio", "close")
        for attempt in range(30):
            spec = grammar.draw(self.seed, attempt)
            if many:
                # Many sessions on one handle: many runs each, and no time spent in
                # handlers, so that their saves meet.
                spec["rounds"] = random.Random(f"rounds:{self.name}").randint(4, 10)
                spec["fast"] = True
            oracle = oracle_of(spec)
            if _acceptable(oracle):
                return spec, oracle
        raise RuntimeError(f"seed {self.seed} drew no workflow of acceptable size")

    def _keep(self, work: Path, keep: Path | None) -> Path:
        if keep is None or not work.exists():
            return work
        target = keep / f"{self.store}-{self.seed}-{int(time.time())}"
        shutil.copytree(work, target, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        return target


class _Runner:
    """Runs the processes of one trial and checks what they left."""

    def __init__(
        self, trial: Trial, spec: dict[str, Any], oracle: Oracle, work: Path, rng: random.Random
    ) -> None:
        self.trial, self.spec, self.oracle, self.work, self.rng = trial, spec, oracle, work, rng
        self.sessions: list[str] = []
        self.summary: dict[str, Any] = {"processes": 0, "killed": 0}
        self._n = 0
        self.policy = self._policy()
        self.restart = {"max": 10} if rng.random() < 0.8 else None
        self.lease_ttl = 1.0

    # --- drawing ----------------------------------------------------------------------

    def _policy(self) -> dict[str, Any]:
        roll = self.rng.random()
        if roll < 0.6:
            return {"every": 1, "durability": "sync"}
        if roll < 0.75:
            return {"every": 1, "durability": "async"}
        if roll < 0.9:
            return {"every": self.rng.randint(2, 3), "durability": "sync"}
        return {"idle": True}

    def _faults(self, count: int) -> list[list[Any]]:
        kinds = ["exception", "exception", "death"] + (
            ["timeout"] if self.spec.get("timeout") else []
        )
        if self.trial.backend == "ray":
            kinds.append("kill")  # the executor's worker process SIGKILLed mid-step
        pairs = sorted(set(self.oracle.invoked))
        faults = []
        for _ in range(count):
            superstep, executor = self.rng.choice(pairs)
            faults.append([executor, superstep, self.rng.choice(kinds)])
        return faults

    def _kill(self) -> dict[str, Any]:
        widths = {s: e for s, e in self.oracle.widths().items() if len(e) > 1}
        roll = self.rng.random()
        saves = max(self.oracle.supersteps, 2)
        if widths and roll < 0.4 and self.trial.backend != "ray":  # handlers run in this process
            superstep = self.rng.choice(sorted(widths))
            executors = widths[superstep]
            # Parts are stored as they finish only with sync checkpoints every superstep.
            persists = self.policy.get("every") == 1 and self.policy.get("durability") == "sync"
            return {
                "at": "handler",
                "executor": self.rng.choice(executors),
                "superstep": superstep,
                "partials": len(executors) - 1 if persists else 0,
            }
        if roll < 0.55:
            return {"at": "save", "kind": "partial", "n": self.rng.randint(1, 4), "when": "after"}
        if roll < 0.85:
            return {
                "at": "save",
                "kind": None,
                "n": self.rng.randint(1, saves),
                "when": self.rng.choice(["before", "inside", "after"]),
            }
        return {"at": "time", "after": self.rng.uniform(0.05, max(self.oracle.seconds, 0.1) * 1.5)}

    # --- processes --------------------------------------------------------------------

    def _session(self, sid: str, faults: list[list[Any]]) -> dict[str, Any]:
        if sid not in self.sessions:
            self.sessions.append(sid)
        return {"id": sid, "faults": faults}

    def _config(self, sessions: list[dict[str, Any]], **extra: Any) -> Path:
        self._n += 1
        # A log per session and process: processes that run at once (a stopped owner
        # and the one that took over) must not mix the lines of their attempts.
        sessions = [{**s, "log": str(self.work / f"{s['id']}.{self._n}.log")} for s in sessions]
        backend = "thread"
        if self.trial.backend == "ray":
            backend = f"ray:{self.trial.ray_address}"
        config = {
            "store": self.trial.store,
            "where": str(self.work),
            "spec": self.spec,
            "sessions": sessions,
            "policy": self.policy,
            "restart": self.restart,
            "lease_ttl": self.lease_ttl,
            "backend": backend,
            "bound": CHILD_BOUND,
            "seed": self.trial.seed * 1000 + self._n,
            **extra,
        }
        path = self.work / f"config-{self._n}.json"
        path.write_text(json.dumps(config))
        return path

    def _start(self, config: Path) -> subprocess.Popen[bytes]:
        self.summary["processes"] += 1
        env = dict(os.environ)
        # A PYTHONPATH set by the caller comes first: it may name another actorflow to
        # torture (a checkout of an older commit, say) than this checkout's.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(ROOT)]))
        stderr = open(config.with_suffix(".stderr"), "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "torture.child", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            env=env,
            cwd=self.work,  # `-m` puts the working folder first on sys.path: not the checkout
        )
        stderr.close()
        return proc

    def _wait(self, proc: subprocess.Popen[bytes], config: Path, *, may_be_killed: bool) -> int:
        try:
            code = proc.wait(timeout=CHILD_BOUND + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise Failure(f"a process hung past its bound: {self._stderr(config)}") from None
        if code == -signal.SIGKILL and may_be_killed:
            self.summary["killed"] += 1
            return code
        if code == 2:
            self._raise_bugs()
        if code != 0:
            raise Failure(
                f"a process ended with status {code} ({_status(code)}): {self._stderr(config)}"
            )
        return code

    def _raise_unplanned(self) -> None:
        """Fail on an error the plan does not explain (a store that failed by itself, say)."""
        allowed = PLANNED + KIND_ERRORS.get(self.trial.kind, ())
        for sid in self.sessions:
            for line in self._logs(sid):
                if line[0] == "error" and not any(a in f"{line[1]}: {line[2]}" for a in allowed):
                    raise Failure(
                        f"session {sid}: an error no fault explains: {line[1]}: {line[2]}"
                    )

    def _raise_bugs(self) -> None:
        for sid in self.sessions:
            for line in self._logs(sid):
                if line[0] == "bug":
                    raise Failure(
                        f"session {sid}: an exception outside ActorflowError: "
                        f"{line[1]}: {line[2]}\n{line[3]}"
                    )

    def _stderr(self, config: Path) -> str:
        path = config.with_suffix(".stderr")
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[-3000:] or "(nothing on stderr)"

    def _run_child(self, sessions: list[dict[str, Any]], **extra: Any) -> int:
        config = self._config(sessions, **extra)
        return self._wait(self._start(config), config, may_be_killed=bool(extra.get("kill")))

    def _finish_all(self) -> None:
        """One last process that opens every session and finishes it."""
        self._run_child([self._session(sid, []) for sid in self.sessions])

    # --- the kinds --------------------------------------------------------------------

    def faults(self) -> None:
        fails = {}
        if self.rng.random() < 0.5:
            for n in self.rng.sample(
                range(1, self.oracle.supersteps + 3), k=self.rng.randint(1, 2)
            ):
                fails[str(n)] = self.rng.choice(["before", "after"])
        faults = self._faults(self.rng.randint(1, 4))
        report = self.work / "report.json" if self.trial.store not in DURABLE else None
        self._run_child(
            [self._session("s0", faults)], fail_saves=fails, report=str(report) if report else None
        )
        self.summary["faults"] = faults
        self.summary["fail_saves"] = fails

    def crash(self) -> None:
        session = "s0"
        crashes = self.rng.randint(1, 3)
        for _ in range(crashes):
            faults = self._faults(self.rng.randint(0, 2))
            code = self._run_child([self._session(session, faults)], kill=self._kill())
            if code == 0 and self._done(session):
                return  # the kill never came: the run ended first
        self._run_child([self._session(session, [])])

    def threads(self, mode: str = "thread") -> None:
        count = self.rng.randint(3, 20)
        sessions = [
            self._session(f"s{i}", self._faults(self.rng.randint(0, 2))) for i in range(count)
        ]
        report = self.work / "report.json" if self.trial.store not in DURABLE else None
        self._run_child(sessions, mode=mode, report=str(report) if report else None)

    def asyncio(self) -> None:
        self.threads("asyncio")

    def processes(self) -> None:
        procs = []
        victim = self.rng.randrange(3)
        for p in range(self.rng.randint(2, 3)):
            sessions = [
                self._session(f"p{p}s{i}", self._faults(self.rng.randint(0, 1)))
                for i in range(self.rng.randint(2, 4))
            ]
            kill = self._kill() if p == victim else None
            config = self._config(sessions, kill=kill)
            procs.append((self._start(config), config, kill is not None))
        for proc, config, killable in procs:
            self._wait(proc, config, may_be_killed=killable)
        self._finish_all()

    def takeover(self) -> None:
        session = "s0"
        n = self.rng.randint(2, max(self.oracle.supersteps, 2))
        when = self.rng.choice(["stop", "stop", "stop_inside"])
        config = self._config(
            [self._session(session, [])],
            kill={"at": "save", "kind": None, "n": n, "when": when},
        )
        first = self._start(config)
        try:
            stopped = _wait_stopped(first, timeout=CHILD_BOUND)
            if stopped:
                # Once its lease expires, a second process takes the session and finishes
                # it, unless the stopped one holds a lock of the store: then the second
                # gives up within its wait, and the first goes on once continued.
                self._run_child([self._session(session, [])], attempts=2, resume_wait=2.0)
                first.send_signal(signal.SIGCONT)
            self._wait(first, config, may_be_killed=False)
        finally:
            if first.poll() is None:  # never leave a stopped process behind
                first.kill()
                first.wait()
        self._finish_all()
        self.summary["stopped"] = f"{when} {stopped}"

    def close(self) -> None:
        count = self.rng.randint(4, 12)
        sessions = [self._session(f"s{i}", []) for i in range(count)]
        after = self.rng.uniform(0.01, max(self.oracle.seconds, 0.05) * 2)
        self._run_child(sessions, mode=self.rng.choice(["thread", "asyncio"]), close_after=after)
        if self.trial.store in DURABLE:
            self._finish_all()
        self.summary["close_after"] = round(after, 3)

    # --- checking ---------------------------------------------------------------------

    def _log_files(self, sid: str) -> list[Path]:
        return sorted(self.work.glob(f"{sid}.*.log"), key=lambda p: int(p.suffixes[-2][1:]))

    def _logs(self, sid: str) -> list[list[Any]]:
        """Every line the session's processes logged, process by process."""
        return [line for path in self._log_files(sid) for line in _lines(path)]

    def _attempts(self, sid: str) -> list[AttemptLog]:
        return [a for path in self._log_files(sid) for a in split_attempts(_lines(path))]

    def _done(self, sid: str) -> bool:
        return any(line[0] == "done" for line in self._logs(sid))

    def check(self) -> None:
        self._raise_bugs()
        self._raise_unplanned()
        if self.trial.kind == "close" and self.trial.store not in DURABLE:
            return  # nothing survives the store: surviving the close is the check
        report = self.work / "report.json"
        observed = json.loads(report.read_text()) if report.exists() else self._observe()
        if observed["verify"]:
            raise Failure(f"verify() reports {observed['verify']}")
        for sid in self.sessions:
            if not self._done(sid):
                raise Failure(f"session {sid} never finished: {self._logs(sid)[-4:]}")
            seen = observed["sessions"][sid]
            if seen["outputs"] != self.oracle.outputs:
                raise Failure(
                    f"session {sid}: outputs along the lineage differ from the oracle's\n"
                    + _diff(self.oracle.outputs, seen["outputs"])
                )
            history = seen["history"]
            if history["seqs"] != list(range(len(history["seqs"]))):
                raise Failure(f"session {sid}: history numbers skip or repeat: {history['seqs']}")
            if history["outputs"] != seen["outputs"]:
                raise Failure(
                    f"session {sid}: the history's outputs differ from the lineage's\n"
                    + _diff(seen["outputs"], history["outputs"])
                )
            if seen["states"] != self.oracle.states:
                raise Failure(
                    f"session {sid}: final states differ from the oracle's\n"
                    + _state_diff(self.oracle.states, seen["states"])
                )
        self.summary["sessions"] = len(self.sessions)

    def _observe(self) -> dict[str, Any]:
        store = open_store(self.trial.store, str(self.work))
        try:
            observed: dict[str, Any] = {"verify": store.verify(), "sessions": {}}
            for sid in self.sessions:
                attempts = self._attempts(sid)
                observed["sessions"][sid] = {
                    "outputs": _json(lineage_outputs(store, sid, attempts)),
                    "states": _json(final_states(store, sid)),
                    "history": _json(history_of(store, sid)),
                }
            return observed
        finally:
            store.close()


def _lines(path: Path) -> list[list[Any]]:
    return AttemptLog.parse(path.read_text().splitlines()).events


def _first_difference(oracle: Oracle) -> str:
    for index, (stored, express) in enumerate(zip(oracle.trace, oracle.express, strict=False)):
        if stored != express:
            return f"at event {index}: {express} where the MemoryStore run had {stored}"
    return f"{len(oracle.express)} events where the MemoryStore run had {len(oracle.trace)}"


def _json(value: Any) -> Any:
    """As it reads after a JSON round trip (the report of a memory trial went through one)."""
    return json.loads(json.dumps(value))


def _wait_stopped(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until ``proc`` is stopped (True) or has exited (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        except ChildProcessError:
            return False
        if pid and os.WIFSTOPPED(status):
            return True
        if pid:  # it exited: let Popen learn its status
            proc.returncode = os.waitstatus_to_exitcode(status)
            return False
        time.sleep(0.01)  # polling another process's state: there is no event to wait on
    return False


def _status(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return {2: "an exception outside ActorflowError", 1: "a hang or a crash"}.get(code, "error")


def _diff(expected: list[Any], got: list[Any]) -> str:
    lines = [f"  oracle: {len(expected)} outputs, lineage: {len(got)}"]
    for i in range(max(len(expected), len(got))):
        e = expected[i] if i < len(expected) else None
        g = got[i] if i < len(got) else None
        if e != g:
            lines.append(f"  first difference at #{i}: oracle {e!r}, lineage {g!r}")
            break
    missing = [o for o in expected if o not in got]
    extra = [o for o in got if o not in expected]
    if missing:
        lines.append(f"  lost: {missing[:5]}")
    if extra:
        lines.append(f"  extra: {extra[:5]}")
    return "\n".join(lines)


def _state_diff(expected: dict[str, Any], got: dict[str, Any]) -> str:
    lines = []
    if expected.get("superstep") != got.get("superstep"):
        lines.append(
            f"  superstep: oracle {expected.get('superstep')}, stored {got.get('superstep')}"
        )
    for eid in sorted(set(expected.get("executors", {})) | set(got.get("executors", {}))):
        e = expected.get("executors", {}).get(eid)
        g = got.get("executors", {}).get(eid)
        if e != g:
            lines.append(
                f"  {eid}: oracle {json.dumps(e)[:300]}\n  {' ' * len(eid)}  stored {json.dumps(g)[:300]}"
            )
    return "\n".join(lines[:8])
