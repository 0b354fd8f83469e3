#!/usr/bin/env bash
# Starts or stops the PostgreSQL server crates/pg-tests uses: a cluster initialised with
# initdb into target/pg/data (reused across runs), started with pg_ctl on a free loopback
# port (trust authentication, user postgres, listening on 127.0.0.1 only).
#
# initdb refuses to run as root, and scripts/test may run as root: then the server runs as
# the `postgres` user created by Debian's package, with a data directory it owns (under
# /tmp/ferromq-pg-data when target/ is not reachable by that user).
#
# Usage: eval "$(scripts/tools/postgres.sh start)"   # exports FERROMQ_TEST_PG_URL and
#                                                    # FERROMQ_TEST_PG_BIN
#        scripts/tools/postgres.sh stop
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
root="$repo_root/target/pg"
say() { printf 'postgres: %s\n' "$*" >&2; }

find_bin() {
    local best=""
    for dir in /usr/lib/postgresql/*/bin; do
        [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]] && best="$dir"
    done
    [[ -n "$best" ]] || { echo "postgres: ERROR: no server binaries; run scripts/tools/install-postgres.sh" >&2; exit 1; }
    printf '%s' "$best"
}

as_server_user() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

data_dir() {
    if [[ -f "$root/datadir" ]]; then
        cat "$root/datadir"
        return
    fi
    local dir="$root/data"
    if [[ "$(id -u)" == 0 ]]; then
        mkdir -p "$dir"
        chown postgres:postgres "$dir"
        chmod 700 "$dir"
        if ! runuser -u postgres -- test -w "$dir"; then
            dir="/tmp/ferromq-pg-data"
            mkdir -p "$dir"
            chown postgres:postgres "$dir"
            chmod 700 "$dir"
        fi
    else
        mkdir -p "$dir"
    fi
    printf '%s' "$dir" > "$root/datadir"
    printf '%s' "$dir"
}

start() {
    mkdir -p "$root"
    local bin data port log
    bin="$(find_bin)"
    data="$(data_dir)"
    # Beside the data directory, where the server's user can reach it in both placements.
    log="$(dirname "$data")/ferromq-pg-server.log"
    if [[ ! -f "$data/PG_VERSION" ]]; then
        say "initdb into $data"
        as_server_user "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 >/dev/null
    fi
    if as_server_user "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        say "a server from an earlier run is still up; stopping it"
        as_server_user "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    fi
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    touch "$log"
    [[ "$(id -u)" == 0 ]] && chown postgres:postgres "$log"
    as_server_user "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
        -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c max_connections=100" start >/dev/null
    printf '%s' "$port" > "$root/port"
    say "PostgreSQL ($bin) on 127.0.0.1:$port, data in $data, log in $log"
    printf "export FERROMQ_TEST_PG_URL='host=127.0.0.1 port=%s user=postgres dbname=postgres'\n" "$port"
    printf "export FERROMQ_TEST_PG_BIN='%s'\n" "$bin"
}

stop() {
    [[ -f "$root/datadir" ]] || { say "no server was started"; return 0; }
    local bin data
    bin="$(find_bin)"
    data="$(cat "$root/datadir")"
    if as_server_user "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        as_server_user "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
        say "stopped"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
