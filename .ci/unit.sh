#!/usr/bin/env bash
# The suite under coverage.py in three pytest processes at once on the test VMs' two
# cores: the part beside the session-wide Ray and two others (two processes, one a
# core, left the cores idle a third of the time while tests waited on child processes,
# disks, servers and wake-ups; a third fills it); then the few tests of the whole
# PostgreSQL server alone; then the package's line coverage. The parts are defined in
# tests/conftest.py (ACTORFLOW_TEST_PART). Arguments go to every pytest. Fails if any
# part fails.
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

"$python" -m coverage erase
pids=()
for part in ray rest2; do  # in the background, their output shown after
    ACTORFLOW_TEST_PART=$part "$python" -m coverage run -p -m pytest -q -p no:cacheprovider \
        "$@" >"$logs/$part" 2>&1 &
    pids+=("$!")
done
ACTORFLOW_TEST_PART=rest1 "$python" -m coverage run -p -m pytest -q "$@"
rest1=$?
wait "${pids[0]}"
ray=$?
wait "${pids[1]}"
rest2=$?
for part in rest2 ray; do
    echo "--- the part $part ---"
    cat "$logs/$part"
done
ACTORFLOW_TEST_PART=serial "$python" -m coverage run -p -m pytest -q -p no:cacheprovider "$@"
serial=$?
"$python" -m coverage combine -q
"$python" -m coverage report
echo "pytest exit statuses: rest1 $rest1, rest2 $rest2, ray $ray, serial $serial"
exit $(( rest1 || rest2 || ray || serial ))
