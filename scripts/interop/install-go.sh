#!/usr/bin/env bash
# Builds the Go interop drivers, each its own module, into target/interop/go/bin/:
#   scripts/interop/go/       (rocketmq-client-go/v2, the remoting client)
#       -> ferromq-go-interop       used by crates/cli/tests/interop_go.rs
#   scripts/interop/go-grpc/  (rocketmq-clients/golang/v5, the 5.x gRPC client)
#       -> ferromq-go-grpc-interop  used by crates/cli/tests/interop_go_grpc.rs
# Everything Go downloads or caches stays under target/interop/go/ (GOPATH, GOMODCACHE,
# GOCACHE); nothing is installed globally.
#   target/interop/go/installed.stamp  written last: the pins plus a hash of the drivers'
#                                      sources; when it matches, the script exits at once.
#
# GOFLAGS=-mod=readonly: the committed go.mod/go.sum are the pins; the build never edits them.
# GOTOOLCHAIN=local: the machine's Go builds them (>= 1.25: golang/v5 v5.1.4's dependencies
# ask for it); no toolchain is downloaded.
#
# Usage: scripts/interop/install-go.sh [--force]
# Exits non-zero with a clear message if go is missing or the Go module proxy is unreachable.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$repo_root/scripts/interop/go"
src_grpc="$repo_root/scripts/interop/go-grpc"
dest="$repo_root/target/interop/go"
binary="$dest/bin/ferromq-go-interop"
binary_grpc="$dest/bin/ferromq-go-grpc-interop"
stamp="$dest/installed.stamp"

GO_PIN="github.com/apache/rocketmq-client-go/v2@v2.1.3-0.20251226070945-2173d070fd1b"
GO_GRPC_PIN="github.com/apache/rocketmq-clients/golang/v5@v5.1.4"

say() { printf 'interop install-go: %s\n' "$*"; }
die() { printf 'interop install-go: ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is required (Go >= 1.25 on PATH)"
grep -q "${GO_PIN/@/ }" "$src/go.mod" || die "$src/go.mod does not pin $GO_PIN"
grep -q "${GO_GRPC_PIN/@/ }" "$src_grpc/go.mod" || die "$src_grpc/go.mod does not pin $GO_GRPC_PIN"

sources_hash="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go \
    "$src_grpc/go.mod" "$src_grpc/go.sum" "$src_grpc"/*.go | sha256sum | cut -c1-16)"
want_stamp="go:$GO_PIN go-grpc:$GO_GRPC_PIN src:$sources_hash"

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; fi
if [[ $force -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" && -x "$binary" \
      && -x "$binary_grpc" ]]; then
    say "already built ($want_stamp) in $dest/bin; nothing to do (--force rebuilds)"
    exit 0
fi

start=$SECONDS
rm -f "$stamp"
mkdir -p "$dest/bin"
export GOPATH="$dest/path" GOMODCACHE="$dest/modcache" GOCACHE="$dest/cache"
export GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0

# build DIR PIN BINARY: downloads the module's dependencies, builds it, checks it runs.
build() {
    local dir="$1" pin="$2" out="$3"
    say "go mod download ($pin and its dependencies) into $GOMODCACHE"
    if ! (cd "$dir" && go mod download); then
        die "go mod download in $dir failed: is the Go module proxy reachable ($(go env GOPROXY))?"
    fi
    say "go build -> $out"
    (cd "$dir" && go build -trimpath -o "$out" .) || die "go build of $dir failed"
    "$out" 2>/dev/null && die "$out without arguments should print usage and fail"
    return 0
}
build "$src" "$GO_PIN" "$binary"
build "$src_grpc" "$GO_GRPC_PIN" "$binary_grpc"

printf '%s' "$want_stamp" >"$stamp"
say "built $want_stamp in $((SECONDS - start)) s"
