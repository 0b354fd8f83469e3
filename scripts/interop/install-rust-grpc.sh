#!/usr/bin/env bash
# Builds the Rust gRPC interop driver used by crates/cli/tests/interop_rust_grpc.rs:
# scripts/interop/rust-grpc/ (src/main.rs, with Cargo.toml and the committed Cargo.lock
# pinning crates.io rocketmq =5.0.0, the official RocketMQ 5.x Rust gRPC client from
# apache/rocketmq-clients) compiled into
# target/interop/rust-grpc/release/ferromq-rust-grpc-interop.
#   target/interop/rust-grpc/installed.stamp  written last: the pin plus a hash of the
#                                             driver's sources and lock; when it matches,
#                                             the script exits at once.
#
# The driver is its own cargo workspace (an empty [workspace] table), not a member of the
# ferromq workspace: its ~250 crates (tonic 0.9, prost 0.11, opentelemetry 0.19, ring 0.16)
# stay out of every ferromq build. CARGO_TARGET_DIR is target/interop/rust-grpc; crates are
# downloaded into cargo's usual registry cache. --locked: the committed Cargo.lock is the pin.
#
# protoc is NOT needed: the crate ships its generated protobuf code (src/pb/) and its build
# script compiles the protos only when BUILD_PROTO is set, which this script unsets.
# rocketmq 5.0.0 calls time's OffsetDateTime::now_local without enabling time's
# `local-offset` feature; the driver's Cargo.toml enables it (without that line the crate
# fails to build with E0599).
#
# Usage: scripts/interop/install-rust-grpc.sh [--force]
# Exits non-zero with a clear message if cargo is missing or crates.io is unreachable.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$repo_root/scripts/interop/rust-grpc"
dest="$repo_root/target/interop/rust-grpc"
binary="$dest/release/ferromq-rust-grpc-interop"
stamp="$dest/installed.stamp"

CRATE_PIN="rocketmq=5.0.0"

say() { printf 'interop install-rust-grpc: %s\n' "$*"; }
die() { printf 'interop install-rust-grpc: ERROR: %s\n' "$*" >&2; exit 1; }

command -v cargo >/dev/null 2>&1 || die "cargo is required (install Rust with rustup)"
grep -q '^rocketmq = "=5.0.0"' "$src/Cargo.toml" || die "$src/Cargo.toml does not pin $CRATE_PIN"

sources_hash="$(cat "$src/Cargo.toml" "$src/Cargo.lock" "$src"/src/*.rs | sha256sum | cut -c1-16)"
want_stamp="crate:$CRATE_PIN src:$sources_hash"

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; fi
if [[ $force -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" && -x "$binary" ]]; then
    say "already built ($want_stamp) at $binary; nothing to do (--force rebuilds)"
    exit 0
fi

start=$SECONDS
rm -f "$stamp"
mkdir -p "$dest"
unset BUILD_PROTO
export CARGO_TARGET_DIR="$dest"

say "cargo fetch ($CRATE_PIN and its dependencies, --locked)"
if ! cargo fetch --locked --manifest-path "$src/Cargo.toml"; then
    die "cargo fetch failed: is crates.io reachable, and does $src/Cargo.lock match Cargo.toml?"
fi
say "cargo build --release -> $binary"
cargo build --release --locked --manifest-path "$src/Cargo.toml" || die "cargo build of $src failed"
"$binary" >/dev/null 2>&1 && die "$binary without arguments should print usage and fail"

printf '%s' "$want_stamp" >"$stamp"
say "built $want_stamp in $((SECONDS - start)) s"
