#!/usr/bin/env bash
# The suite under coverage.py in two pytest processes at once, one a core (the test
# VMs have two): the part beside the session-wide Ray, and the rest; then the few
# tests of the whole PostgreSQL server alone; then the package's line coverage.
# The parts are defined in tests/conftest.py (ACTORFLOW_TEST_PART). Arguments go to
# every pytest. Fails if any part fails.
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
log=$(mktemp)
trap 'rm -f "$log"' EXIT

"$python" -m coverage erase
ACTORFLOW_TEST_PART=ray "$python" -m coverage run -p -m pytest -q -p no:cacheprovider "$@" >"$log" 2>&1 &
ray_pid=$!
ACTORFLOW_TEST_PART=rest "$python" -m coverage run -p -m pytest -q "$@"
rest=$?
wait "$ray_pid"
ray=$?
echo "--- the part beside Ray ---"
cat "$log"
ACTORFLOW_TEST_PART=serial "$python" -m coverage run -p -m pytest -q -p no:cacheprovider "$@"
serial=$?
"$python" -m coverage combine -q
"$python" -m coverage report
echo "pytest exit statuses: rest $rest, ray $ray, serial $serial"
exit $(( rest || ray || serial ))
