"""Tests of ``actorflow.runtime``: supersteps, sessions, checkpoints, recovery, telemetry."""
