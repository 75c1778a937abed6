#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL server for the tests:
#
#   bash .ci/postgres.sh COMMAND [ARGS...]
#
# Uses the server installed under /usr/lib/postgresql/*/bin (installs the Debian
# package if there is none), initialises a data folder in a temp dir owned by the
# `postgres` user (the server refuses to run as root), listens on 127.0.0.1 only on a
# free port, exports ACTORFLOW_TEST_PG_DSN for COMMAND, and stops the server and
# removes the folder when COMMAND ends, whatever its outcome. Durability settings
# are PostgreSQL's defaults (fsync and synchronous_commit on).
#
# If ACTORFLOW_TEST_PG_DSN is already set, COMMAND runs against that server. If no
# server can be started: under CI=true this fails; otherwise COMMAND runs without a
# DSN and the PostgreSQL tests skip, saying why.
set -euo pipefail

if [[ $# -eq 0 ]]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi
CMD=("$@")
if [[ -n "${ACTORFLOW_TEST_PG_DSN:-}" ]]; then
    exec "${CMD[@]}"
fi

note() { echo "postgres.sh: $*" >&2; }

unavailable() {
    if [[ "${CI:-}" == "true" ]]; then
        note "cannot start PostgreSQL: $* (CI=true: the PostgreSQL tests must run)"
        exit 1
    fi
    note "cannot start PostgreSQL: $*; the PostgreSQL tests will be skipped"
    export ACTORFLOW_TEST_PG_UNAVAILABLE="$*"
    exec "${CMD[@]}"
}

find_bin() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x "$dir/postgres" && -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

BIN="$(find_bin || true)"
if [[ -z "$BIN" ]]; then
    if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null; then
        note "no server under /usr/lib/postgresql; installing the Debian package"
        # The package's own cluster is not used: the policy keeps it from starting.
        if DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; then
            BIN="$(find_bin || true)"
        fi
    fi
fi
[[ -n "$BIN" ]] || unavailable "no PostgreSQL server under /usr/lib/postgresql/*/bin"

# The server refuses to run as root: as root, run it as `postgres`; otherwise as ourselves.
if [[ "$(id -u)" == "0" ]]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    AS=(runuser -u postgres --)
else
    AS=()
fi

DATA="$(mktemp -d /tmp/actorflow-pg.XXXXXX)"
LOG="$DATA.log"
cleanup() {
    "${AS[@]}" "$BIN/pg_ctl" -D "$DATA/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$DATA" "$LOG"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ ${#AS[@]} -gt 0 ]]; then
    chown postgres "$DATA"
fi
touch "$LOG" && { [[ ${#AS[@]} -eq 0 ]] || chown postgres "$LOG"; }

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# trust: the server is reachable from this machine's loopback only, and lives as long
# as this command.
if ! "${AS[@]}" "$BIN/initdb" -D "$DATA/data" -U postgres --auth=trust -E UTF8 \
    --no-instructions >"$LOG" 2>&1; then
    cat "$LOG" >&2
    unavailable "initdb failed"
fi
OPTS="-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$DATA -c max_connections=200"
if ! "${AS[@]}" "$BIN/pg_ctl" -D "$DATA/data" -l "$LOG" -o "$OPTS" -w -t 60 start >/dev/null; then
    cat "$LOG" >&2
    unavailable "the server did not start"
fi

export ACTORFLOW_TEST_PG_DSN="postgresql://postgres@127.0.0.1:$PORT/postgres"
# For the tests that restart the server mid-session (same data folder, same port).
export ACTORFLOW_TEST_PG_CTL="$BIN/pg_ctl"
export ACTORFLOW_TEST_PG_DATA="$DATA/data"
export ACTORFLOW_TEST_PG_OPTS="$OPTS"
export ACTORFLOW_TEST_PG_LOG="$LOG"
note "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on $ACTORFLOW_TEST_PG_DSN"
set +e
"${CMD[@]}"
status=$?
set -e
exit $status
