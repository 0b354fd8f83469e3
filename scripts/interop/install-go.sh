#!/usr/bin/env bash
# Builds the Go interop driver used by crates/cli/tests/interop_go.rs: scripts/interop/go/
# (main.go, with go.mod and go.sum pinning github.com/apache/rocketmq-client-go/v2) compiled
# into target/interop/go/bin/ferromq-go-interop. Everything Go downloads or caches stays under
# target/interop/go/ (GOPATH, GOMODCACHE, GOCACHE); nothing is installed globally.
#   target/interop/go/installed.stamp  written last: the pin plus a hash of the driver's
#                                      sources; when it matches, the script exits at once.
#
# GOFLAGS=-mod=readonly: the committed go.mod/go.sum are the pins; the build never edits them.
# GOTOOLCHAIN=local: the machine's Go (>= 1.22) builds it; no toolchain is downloaded.
#
# Usage: scripts/interop/install-go.sh [--force]
# Exits non-zero with a clear message if go is missing or the Go module proxy is unreachable.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$repo_root/scripts/interop/go"
dest="$repo_root/target/interop/go"
binary="$dest/bin/ferromq-go-interop"
stamp="$dest/installed.stamp"

GO_PIN="github.com/apache/rocketmq-client-go/v2@v2.1.3-0.20251226070945-2173d070fd1b"

say() { printf 'interop install-go: %s\n' "$*"; }
die() { printf 'interop install-go: ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is required (Go >= 1.22 on PATH)"
grep -q "${GO_PIN/@/ }" "$src/go.mod" || die "$src/go.mod does not pin $GO_PIN"

sources_hash="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"
want_stamp="go:$GO_PIN src:$sources_hash"

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; fi
if [[ $force -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" && -x "$binary" ]]; then
    say "already built ($want_stamp) at $binary; nothing to do (--force rebuilds)"
    exit 0
fi

start=$SECONDS
rm -f "$stamp"
mkdir -p "$dest/bin"
export GOPATH="$dest/path" GOMODCACHE="$dest/modcache" GOCACHE="$dest/cache"
export GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0

say "go mod download ($GO_PIN and its dependencies) into $GOMODCACHE"
if ! (cd "$src" && go mod download); then
    die "go mod download failed: is the Go module proxy reachable ($(go env GOPROXY))?"
fi
say "go build -> $binary"
(cd "$src" && go build -trimpath -o "$binary" .) || die "go build of $src failed"
"$binary" 2>/dev/null && die "$binary without arguments should print usage and fail"

printf '%s' "$want_stamp" >"$stamp"
say "built $want_stamp in $((SECONDS - start)) s"
