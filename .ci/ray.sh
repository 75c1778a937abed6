#!/usr/bin/env bash
# Stops every Ray process this machine runs (raylet, GCS, agents, workers), so none
# outlives CI: the tests and examples shut their local Ray down, but a driver killed
# on purpose (the crash tests) leaves Ray's agents behind by design.
cd "$(dirname "$0")/.."
if [ -x .venv/bin/ray ]; then
    .venv/bin/ray stop --force >/dev/null 2>&1 || true
fi
