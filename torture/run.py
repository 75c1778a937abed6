"""Run torture trials: for a time, over seeds, or again by name; keep what fails.

Usage::

    python -m torture.run --seconds 900                 # every store, seeds from a random start
    python -m torture.run --seconds 60 --stores sqlite,file3 --start 1000
    python -m torture.run --seeds 0-49 --stores memory  # a fixed set
    python -m torture.run --replay sqlite:1234 file3:77 # trials again, by name
    python -m torture.run --replay-corpus tests/torture_corpus
    python -m torture.run --seconds 300 --ray           # Ray: a local cluster for the run

Each trial prints one line. A failing trial prints what it found, where its files
are kept (``--keep``, default ``torture-failures/``) and the one-line command that
replays it; with ``--corpus DIR`` its name and finding are saved there as JSON, and
``tests/test_torture.py`` replays every entry of ``tests/torture_corpus/``.
PostgreSQL trials need a server: run under ``bash .ci/postgres.sh`` (``make torture``
does), or leave ``postgres`` out of ``--stores``.

Exit status: 0 when every trial passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .stores import KINDS
from .trial import ROOT, Failure, Trial

__all__ = ["RayCluster", "main"]


def _stores(text: str) -> list[str]:
    stores = [s for s in text.split(",") if s]
    unknown = [s for s in stores if s not in KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown stores {unknown}; use {', '.join(KINDS)}")
    return stores


def _default_stores() -> str:
    stores = [k for k in KINDS if k != "postgres" or os.environ.get("ACTORFLOW_TEST_PG_DSN")]
    return ",".join(stores)


def _seeds(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def _trials(args: argparse.Namespace) -> Iterator[Trial]:
    backend = "ray" if args.ray else "thread"
    if args.replay:
        for name in args.replay:
            yield Trial.parse(name)
        return
    if args.replay_corpus:
        for path in sorted(Path(args.replay_corpus).glob("*.json")):
            yield Trial.parse(json.loads(path.read_text())["trial"])
        return
    if args.seeds is not None:
        for seed in args.seeds:
            for store in args.stores:
                yield Trial(store, seed, backend)
        return
    deadline = time.monotonic() + args.seconds
    seed = args.start if args.start is not None else int.from_bytes(os.urandom(3), "big")
    print(f"torture: seeds from {seed}, for {args.seconds:g} s", flush=True)
    while time.monotonic() < deadline:
        for store in args.stores:
            if time.monotonic() >= deadline:
                return
            yield Trial(store, seed, backend)
        seed += 1


class RayCluster:
    """A local Ray (loopback only) for the run's Ray trials, shut down at exit.

    This process is its first driver; each trial's processes connect to it as drivers
    of their own (a SIGKILLed one takes only its own workers with it).
    """

    def __enter__(self) -> str:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every socket on 127.0.0.1
        import ray  # noqa: PLC0415 - the ray extra, only for --ray

        ray.init(
            num_cpus=2,
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=False,
        )
        self._ray = ray
        return str(ray.get_runtime_context().gcs_address)

    def __exit__(self, *exc: object) -> None:
        self._ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torture.run", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="run trials for this long")
    parser.add_argument("--start", type=int, default=None, help="first seed (default: random)")
    parser.add_argument("--seeds", type=_seeds, default=None, help="a fixed range of seeds, A-B")
    parser.add_argument("--stores", type=_stores, default=_stores(_default_stores()))
    parser.add_argument("--ray", action="store_true", help="host executors on a local Ray")
    parser.add_argument("--replay", nargs="+", metavar="TRIAL", help="trials to run again")
    parser.add_argument("--replay-corpus", metavar="DIR", help="run every trial kept in DIR")
    parser.add_argument("--corpus", metavar="DIR", help="save failing trials here")
    parser.add_argument(
        "--keep", default=str(ROOT / "torture-failures"), help="failing trials' files"
    )
    parser.add_argument("--stop-on-failure", action="store_true")
    args = parser.parse_args(argv)
    keep = Path(args.keep)
    failures: list[str] = []
    passed = 0
    started = time.monotonic()
    ray = RayCluster() if args.ray else None
    address = ray.__enter__() if ray is not None else None
    try:
        for trial in _trials(args):
            trial.ray_address = address
            began = time.monotonic()
            try:
                summary = trial.run(keep=keep)
            except Failure as exc:
                failures.append(trial.name)
                print(f"FAIL {trial.name} ({trial.kind}): {exc}", flush=True)
                if args.corpus:
                    _save(Path(args.corpus), trial, str(exc))
                if args.stop_on_failure:
                    break
                continue
            passed += 1
            extra = ", ".join(
                f"{k} {v}" for k, v in summary.items() if k not in ("trial", "kind", "flow")
            )
            print(
                f"ok   {trial.name} ({trial.kind}, {time.monotonic() - began:.1f} s): {extra}",
                flush=True,
            )
    finally:
        if ray is not None:
            ray.__exit__(None, None, None)
    print(
        f"torture: {passed} passed, {len(failures)} failed in {time.monotonic() - started:.0f} s"
        + (f": {' '.join(failures)}" if failures else ""),
        flush=True,
    )
    return 1 if failures else 0


def _save(corpus: Path, trial: Trial, found: str) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    entry = {"trial": trial.name, "kind": trial.kind, "found": found.splitlines()[0][:500]}
    (corpus / f"{trial.name.replace(':', '-')}.json").write_text(json.dumps(entry, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
