#!/usr/bin/env bash
# Installs PostgreSQL's server binaries for crates/pg-tests (the client's PostgreSQL offset
# store): Debian's `postgresql` package (bookworm: PostgreSQL 15), through apt, only when no
# server binaries are present. They live in /usr/lib/postgresql/<major>/bin (psql alone, from
# postgresql-client, may be installed without them). Nothing else is installed; the server
# itself is started by scripts/tools/postgres.sh into target/pg/.
#
# Idempotent: a stamp file target/pg/install.stamp records the pin and the binaries found;
# a run with the binaries present does nothing.
#
# Usage: scripts/tools/install-postgres.sh
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
stamp_dir="$repo_root/target/pg"
stamp="$stamp_dir/install.stamp"
PG_PACKAGE_PIN="postgresql"      # Debian's default major (bookworm: 15)
PG_MAJOR_MIN=13                  # oldest server the store is tested against

say() { printf 'postgres install: %s\n' "$*" >&2; }

find_bin() {
    local best=""
    for dir in /usr/lib/postgresql/*/bin; do
        [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]] || continue
        local major
        major="$(basename "$(dirname "$dir")")"
        if [[ "$major" =~ ^[0-9]+$ ]] && (( major >= PG_MAJOR_MIN )); then
            best="$dir"
        fi
    done
    printf '%s' "$best"
}

mkdir -p "$stamp_dir"
bin="$(find_bin)"
if [[ -n "$bin" ]]; then
    say "server binaries present in $bin; nothing to do"
    printf 'package=%s\nbin=%s\n' "$PG_PACKAGE_PIN" "$bin" > "$stamp"
    exit 0
fi

if [[ "$(id -u)" != 0 ]]; then
    echo "postgres install: ERROR: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin and not root; run: sudo apt-get install -y $PG_PACKAGE_PIN" >&2
    exit 1
fi
command -v apt-get >/dev/null || {
    echo "postgres install: ERROR: apt-get not found; install PostgreSQL >= $PG_MAJOR_MIN server binaries with your package manager" >&2
    exit 1
}
start=$SECONDS
say "installing Debian's $PG_PACKAGE_PIN (apt-get update first)"
if ! DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2; then
    echo "postgres install: ERROR: apt-get update failed (is the Debian package registry reachable?)" >&2
    exit 1
fi
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PG_PACKAGE_PIN" >&2; then
    echo "postgres install: ERROR: apt-get install $PG_PACKAGE_PIN failed (is the Debian package registry reachable?)" >&2
    exit 1
fi
bin="$(find_bin)"
[[ -n "$bin" ]] || {
    echo "postgres install: ERROR: $PG_PACKAGE_PIN installed but no server binaries in /usr/lib/postgresql/*/bin" >&2
    exit 1
}
printf 'package=%s\nbin=%s\n' "$PG_PACKAGE_PIN" "$bin" > "$stamp"
say "installed $bin in $((SECONDS - start)) s"
