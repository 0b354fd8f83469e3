#!/usr/bin/env bash
# Installs cargo-nextest (the test runner scripts/test relies on for its retries) from
# crates.io into target/tools/ (gitignored; nothing is installed globally). A machine may come
# without it, so nothing here trusts a preinstalled copy: the pinned version is built once with
# `cargo install --locked` and reused while its `--version` matches the pin.
#
# Usage: scripts/tools/install-nextest.sh
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
root="$repo_root/target/tools"
NEXTEST_PIN="0.9.151"
bin="$root/bin/cargo-nextest"

say() { printf 'nextest install: %s\n' "$*"; }

if [[ -x "$bin" ]] && "$bin" nextest --version 2>/dev/null | grep -q "cargo-nextest $NEXTEST_PIN"; then
    say "cargo-nextest $NEXTEST_PIN already in $root; nothing to do"
    exit 0
fi

say "building cargo-nextest $NEXTEST_PIN into $root (a few minutes the first time)"
start=$SECONDS
cargo install --locked --quiet cargo-nextest --version "$NEXTEST_PIN" --root "$root"
"$bin" nextest --version | grep -q "cargo-nextest $NEXTEST_PIN" || {
    echo "nextest install: ERROR: $bin does not report version $NEXTEST_PIN" >&2
    exit 1
}
say "done in $((SECONDS - start)) s"
