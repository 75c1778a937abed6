"""The actorflow demo: durable SQLite checkpoints, a supervised restart, a SIGKILL, a resume.

A small payments ledger: a feeder hands out one payment per round, a pricer
converts it (through a flaky "FX service" resource), and the ledger books it.
We run it three ways and show the final ledgers are identical:

1. in memory, with no faults: the reference;
2. with a SQLite store, where the FX service fails once (the supervisor restores
   the pricer from its last good state and re-runs only it), and then the whole
   process is killed with SIGKILL in the middle of the run;
3. in a brand-new process that resumes from the last checkpoint in the store.

Run it with ``actorflow demo`` (or ``python -m actorflow demo``, or ``make demo`` in
a checkout). It ships inside the package so that a plain ``pip install`` has it;
``examples/demo.py`` runs it too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import actorflow as af

PAYMENTS = [120, 75, 310, 42, 999, 18, 260, 55]
CRASH_AT_PAYMENT = 5  # the ledger's process dies while booking the 5th payment


@af.message
@dataclass
class Payment:
    """One payment travelling around the ring."""

    seq: int
    cents: int
    eur_cents: int = 0


FX_OUTAGES = {3}  # the FX service times out on its 3rd call in this process, once


class FlakyFx:
    """A pretend FX service client (a resource: built in the actor, never snapshotted)."""

    calls = 0  # per process, like a real remote service's state

    def rate(self) -> float:
        FlakyFx.calls += 1
        if FlakyFx.calls in FX_OUTAGES and os.environ.get("DEMO_FLAKY") == "1":
            raise ConnectionError("FX service timed out")
        return 0.92


class Feeder(af.Executor):
    """Holds the queue of payments; sends the next one each time the ledger asks."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.queue = list(PAYMENTS)
        self.next_seq = 1

    @af.handler
    def on_next(self, booked: int, ctx: af.Context[Payment]) -> None:
        if self.queue:
            ctx.send(Payment(self.next_seq, self.queue.pop(0)))
            self.next_seq += 1


class Pricer(af.Executor):
    """Converts to EUR using the FX resource (built inside the actor, never snapshotted)."""

    fx = af.resource(FlakyFx)

    @af.handler
    def on_payment(self, payment: Payment, ctx: af.Context[Payment]) -> None:
        payment.eur_cents = round(payment.cents * self.fx.rate())
        ctx.send(payment)


class Ledger(af.Executor):
    """Books each payment exactly once; outputs the ledger when the last one is in."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.entries: list[list[int]] = []

    @af.handler
    def on_payment(self, payment: Payment, ctx: af.Context[int]) -> None:
        if payment.seq == CRASH_AT_PAYMENT and os.environ.get("DEMO_CRASH") == "1":
            print(
                f"    [child] booking payment {payment.seq}... and the process is killed (SIGKILL)"
            )
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        self.entries.append([payment.seq, payment.eur_cents])
        if len(self.entries) == len(PAYMENTS):
            ctx.output(self.entries)
        else:
            ctx.send(len(self.entries))


def build() -> af.Workflow:
    """The ring feeder -> pricer -> ledger -> feeder, restarting failed executors."""
    builder = af.WorkflowBuilder(
        "ledger",
        start=Feeder("feeder"),
        restart=af.RestartPolicy(max_restarts=3, within_seconds=60),
    )
    builder.add_edge("feeder", Pricer("pricer"))
    builder.add_edge("pricer", Ledger("ledger"))
    builder.add_edge("ledger", "feeder")
    return builder.build()


LEASE_TTL = 2.0
"""Seconds the crashing process's lease on the session outlives it."""


def child(db: str, mode: str) -> None:
    """Runs in a separate process: start the run, or resume it from the store."""
    store = af.SQLiteStore(db)
    with build() as wf:
        if mode == "start":
            # A short lease: after the SIGKILL, the next owner waits only this long.
            with wf.session("ledger-1", store=store, lease_ttl=LEASE_TTL) as session:
                for event in session.stream(0):
                    if isinstance(event, af.RunRestartedEvent):
                        print(
                            f"    [child] {event.executor} failed in superstep {event.superstep} "
                            f"({event.error}); supervisor restored it and re-ran its step"
                        )
            print("    [child] finished without crashing?!")
        else:
            # The killed process still holds the session's lease until it expires.
            with wf.resume(store, session="ledger-1", wait=LEASE_TTL + 10) as session:
                result = session.run()
                print(json.dumps(result.outputs[0]))


def main() -> None:
    """Parent process: reference run, crashing run, resumed run, comparison."""
    print("1. Reference run: in memory, no faults")
    with build() as wf:
        reference = wf.run(0).outputs[0]
    print(f"   ledger: {reference}\n")

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "demo.db")
        print("2. A process runs the same workflow, checkpointing every superstep to SQLite")
        env = os.environ | {"DEMO_FLAKY": "1", "DEMO_CRASH": "1"}
        crashed = subprocess.run(
            [sys.executable, "-m", "actorflow._demo", "child", db, "start"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        print(crashed.stdout.rstrip())
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        print(f"   the process died with SIGKILL (exit {crashed.returncode})\n")

        store = af.SQLiteStore(db)
        checkpoints = store.list(session="ledger-1")
        latest = checkpoints[-1]
        print(
            f"   the store holds {len(checkpoints)} checkpoints; latest: superstep {latest.superstep} ({latest.kind.value})"
        )
        print(f"   verify: {store.verify() or 'every record and blob intact'}\n")
        store.close()

        print(
            "3. A brand-new process resumes from the latest checkpoint (once the dead "
            f"process's {LEASE_TTL:g} s lease on the session has expired)"
        )
        resumed = subprocess.run(
            [sys.executable, "-m", "actorflow._demo", "child", db, "resume"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert resumed.returncode == 0, resumed.stderr
        final = json.loads(resumed.stdout.strip().splitlines()[-1])
        print(f"   ledger: {final}\n")

    same = final == reference
    booked = [seq for seq, _ in final]
    print(
        f"Each payment booked exactly once: {booked == sorted(set(booked))}; identical to the reference run: {same}"
    )
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
