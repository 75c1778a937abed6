"""The fuzz driver: ``python -m fuzz.run [--seconds S | --inputs N] [--targets a,b]``.

Each target runs in its own worker process (``--worker``) under a memory cap
(``RLIMIT_AS``) and a hard per-input alarm (``faulthandler``, which exits the
worker even while a C call holds the GIL). The worker writes each input to a
file before trying it, so when it dies the driver knows the input that killed
it. The report gives, per target, the inputs tried and the outcomes by kind;
every failing input is saved under ``--save`` as ``<target>/<kind>-<hash>.bin``,
where ``tests/test_fuzz.py`` replays it from then on (``--replay``).
Exit status: 0 if no input failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import importlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import zoneinfo
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actorflow.storage import MemoryStore

from ._guard import Guard, warm_up
from ._mutate import mutate_bytes
from .stores import ADAPTERS, check_answers, store_target
from .targets import TARGETS, Target

__all__ = ["all_targets", "main"]

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz_corpus"
_MAX_SAVED_PER_KIND = 20


def all_targets(work: Path | None = None) -> dict[str, Target]:
    """Every target: the decoders and one per store adapter."""
    found = dict(TARGETS)
    for name, adapter in ADAPTERS.items():
        found[name] = store_target(adapter, work)
    return found


def _save(folder: Path, target: str, kind: str, data: bytes) -> Path:
    digest = hashlib.sha256(data).hexdigest()[:16]
    place = folder / target
    place.mkdir(parents=True, exist_ok=True)
    path = place / f"{kind.replace(':', '-')}-{digest}.bin"
    path.write_bytes(data)
    return path


def _worker(args: argparse.Namespace) -> int:
    """Fuzz one target; print one JSON line of counts at the end."""
    sys.setrecursionlimit(20000)  # mutants nest deep; the decoder must bound them, not us
    with tempfile.TemporaryDirectory(prefix="actorflow-fuzz-") as tmp:
        target = all_targets(Path(tmp))[args.worker]
        rng = random.Random(args.seed)
        seeds = [target.seed(rng) for _ in range(8)]
        warm_up(target.check, seeds)
        guard = Guard(slow_seconds=args.slow)
        guard.install()
        if args.memory_mb:
            _limit_memory(args.memory_mb)
        current = os.open(args.current, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        kinds: Counter[str] = Counter()
        saved: Counter[str] = Counter()
        slowest = slowest_cpu = 0.0
        deadline = time.monotonic() + args.seconds if args.seconds else None
        tried = 0
        while (args.inputs == 0 or tried < args.inputs) and (
            deadline is None or time.monotonic() < deadline
        ):
            if rng.random() < 0.05:
                seeds[rng.randrange(len(seeds))] = target.seed(rng)
            data = _mutant(target, rng.choice(seeds), rng)
            os.ftruncate(current, 0)
            os.pwrite(current, data, 0)
            faulthandler.dump_traceback_later(args.hard, exit=True)
            with guard.watching() as outcome:
                target.check(data)
            faulthandler.cancel_dump_traceback_later()
            tried += 1
            kinds[outcome.kind] += 1
            slowest = max(slowest, outcome.seconds)
            slowest_cpu = max(slowest_cpu, outcome.cpu_seconds)
            if outcome.failed and saved[outcome.kind] < _MAX_SAVED_PER_KIND:
                saved[outcome.kind] += 1
                path = _save(Path(args.save), args.worker, outcome.kind, data)
                print(
                    f"FAIL {args.worker} {outcome.kind} {path.name}: {outcome.detail}",
                    file=sys.stderr,
                )
        os.close(current)
    print(
        json.dumps(
            {
                "target": args.worker,
                "tried": tried,
                "kinds": kinds,
                "slowest_s": round(slowest, 3),
                "slowest_cpu_s": round(slowest_cpu, 3),
            }
        )
    )
    return 0


_MAX_INPUT = 4 << 20


def _mutant(target: Target, seed: bytes, rng: random.Random) -> bytes:
    """A mutant of ``seed``; the mutators' own blow-ups (under the memory cap) fall back to bytes."""
    try:
        data = target.mutate(seed, rng)
    except (MemoryError, RecursionError, ValueError, TypeError):
        return mutate_bytes(seed, rng)
    return data if len(data) <= _MAX_INPUT else mutate_bytes(seed, rng)


def _limit_memory(megabytes: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, hard))


def _replay(args: argparse.Namespace) -> int:
    """Check every saved input again; print one line per failure."""
    sys.setrecursionlimit(20000)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="actorflow-fuzz-") as tmp:
        targets = all_targets(Path(tmp))
        for name, target in targets.items():
            folder = Path(args.replay) / name
            cases = sorted(folder.glob("*.bin")) if folder.is_dir() else []
            if not cases:
                print(f"replayed 0 case(s) of {name}")
                continue
            warm_up(target.check, [target.seed(random.Random(0))])
            guard = Guard(slow_seconds=args.slow)
            if not hasattr(_replay, "installed"):
                guard.install()
                _replay.installed = True  # type: ignore[attr-defined]
            for case in cases:
                with guard.watching() as outcome:
                    target.check(case.read_bytes())
                if outcome.failed:
                    failures += 1
                    print(f"FAIL {name}/{case.name}: {outcome.kind} {outcome.detail}")
            print(f"replayed {len(cases)} case(s) of {name}")
    return 1 if failures else 0


def _spin(seconds: float) -> None:
    """Burn CPU for ``seconds`` (the guard judges slowness by CPU time)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _self_test() -> int:
    """Show that the guard catches what it must: each probe must fail with its kind."""
    guard = Guard()
    guard.install()
    probes: dict[str, Callable[[], object]] = {
        # What decoding a datetime with an unknown zone key did: zoneinfo imports
        # tzdata.zoneinfo.<parts of the key>, and the planted package's code runs.
        "planted": lambda: zoneinfo.ZoneInfo("Evil/Zone"),
        # A stdlib module nothing here imports (colorsys is imported by rich, which
        # structlog loads when it is installed).
        "import": lambda: importlib.import_module("tabnanny"),
        "exec": lambda: exec("1 + 1"),
        "subprocess": lambda: subprocess.run(["true"], check=False),
        "exception:KeyError": lambda: {"y": 1}["x"],
        "slow": lambda: _spin(guard.slow_seconds + 0.05),
        # A store that lost its one saved record without a word.
        "rollback": lambda: check_answers(MemoryStore(), {"ids": ["x"], "latest": {"": "x"}}),
    }
    guard.slow_seconds = 0.05
    failures = 0
    for expected, probe in probes.items():
        with guard.watching() as outcome:
            probe()
        ok = outcome.kind == expected
        failures += not ok
        print(f"{'ok ' if ok else 'MISSED'} {expected}: {outcome.kind} {outcome.detail[:80]}")
    return 1 if failures else 0


def _drive(args: argparse.Namespace) -> int:
    names = args.targets.split(",") if args.targets else list(all_targets_names())
    report: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    for name in names:
        totals: Counter[str] = Counter()
        tried, slowest, slowest_cpu, seed = 0, 0.0, 0.0, args.seed
        begun = time.monotonic()
        while True:
            left_inputs = args.inputs - tried if args.inputs else 0
            left_seconds = args.seconds - (time.monotonic() - begun) if args.seconds else 0
            if (args.inputs and left_inputs <= 0) or (args.seconds and left_seconds <= 0):
                break
            with tempfile.NamedTemporaryFile(prefix="actorflow-fuzz-current-") as current:
                command = [
                    sys.executable,
                    "-m",
                    "fuzz.run",
                    "--worker",
                    name,
                    "--seed",
                    str(seed),
                    "--inputs",
                    str(max(left_inputs, 0)),
                    "--seconds",
                    str(max(left_seconds, 0)),
                    "--slow",
                    str(args.slow),
                    "--hard",
                    str(args.hard),
                    "--memory-mb",
                    str(args.memory_mb),
                    "--save",
                    args.save,
                    "--current",
                    current.name,
                ]
                done = subprocess.run(
                    command, cwd=ROOT, capture_output=True, text=True, check=False
                )
                sys.stderr.write(done.stderr if done.returncode == 0 else "")
                lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                if done.returncode == 0 and lines:
                    result = json.loads(lines[-1])
                    tried += result["tried"]
                    totals.update(result["kinds"])
                    slowest = max(slowest, result["slowest_s"])
                    slowest_cpu = max(slowest_cpu, result.get("slowest_cpu_s", 0.0))
                    break
                # The worker died on an input (the alarm fired, or it crashed): record it, go on.
                data = Path(current.name).read_bytes()
                kind = "timeout" if "Timeout" in done.stderr else f"crash-{done.returncode}"
                path = _save(Path(args.save), name, kind, data)
                print(f"FAIL {name} {kind} {path.name}: {done.stderr[-500:]}", file=sys.stderr)
                totals[kind] += 1
                tried += 1
                seed += 1
        report[name] = {
            "tried": tried,
            "kinds": dict(totals),
            "slowest_s": slowest,
            "slowest_cpu_s": slowest_cpu,
            "wall_s": round(time.monotonic() - begun, 1),
        }
        print(_line(name, report[name]), flush=True)
    failed = sum(
        n for r in report.values() for k, n in r["kinds"].items() if k not in ("ok", "rejected")
    )
    print(
        f"total: {sum(r['tried'] for r in report.values())} inputs, {failed} failure(s), {time.monotonic() - started:.0f} s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if failed else 0


def all_targets_names() -> list[str]:
    """The names of every target, decoders first."""
    return [*TARGETS, *ADAPTERS]


def _line(name: str, result: dict[str, Any]) -> str:
    kinds = result["kinds"]
    failures = {k: n for k, n in kinds.items() if k not in ("ok", "rejected")}
    return (
        f"{name:14} {result['tried']:>9} inputs  ok {kinds.get('ok', 0):>8}  rejected "
        f"{kinds.get('rejected', 0):>8}  failures {sum(failures.values())} {failures or ''}  "
        f"slowest {result['slowest_cpu_s']:.3f} s CPU, {result['slowest_s']:.3f} s wall"
        f"  ({result['wall_s']} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__)
    parser.add_argument("--targets", default="", help="comma-separated; default: all")
    parser.add_argument("--inputs", type=int, default=0, help="inputs per target (0: no limit)")
    parser.add_argument(
        "--seconds", type=float, default=0.0, help="seconds per target (0: no limit)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slow", type=float, default=5.0, help="an input slower than this fails")
    parser.add_argument(
        "--hard", type=float, default=60.0, help="an input running this long kills the worker"
    )
    parser.add_argument("--memory-mb", type=int, default=2048, help="address-space cap per worker")
    parser.add_argument("--save", default=str(CORPUS), help="where failing inputs are saved")
    parser.add_argument("--json", default="", help="also write the report here")
    parser.add_argument("--replay", default="", help="replay the saved inputs under this folder")
    parser.add_argument(
        "--self-test", action="store_true", help="check that the guard catches each kind"
    )
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--current", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.self_test:
        return _self_test()
    if args.worker:
        return _worker(args)
    if args.replay:
        return _replay(args)
    if not (args.inputs or args.seconds):
        parser.error("give --inputs or --seconds")
    return _drive(args)


if __name__ == "__main__":
    raise SystemExit(main())
