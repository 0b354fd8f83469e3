#!/usr/bin/env bash
# Installs the real RocketMQ remoting clients used by crates/cli/tests/interop.rs, all under
# target/interop/ (gitignored; nothing is installed globally):
#   target/interop/venv-remoting   Python venv with PyPI rocketmq==0.4.4 (messense, C++ core)
#   target/interop/node            npm prefix with ali-ons@3.12.0 (pure JS) and
#                                  rocketmq-client-nodejs@1.0.8 (the official 5.x gRPC client
#                                  for Node.js; crates/cli/tests/interop_node_grpc.rs)
#   target/interop/venv-grpc       Python venv with PyPI rocketmq-python-client==5.1.2 (the
#                                  official 5.x gRPC client; crates/cli/tests/interop_grpc.rs)
#   target/interop/installed.stamp written last; when it matches this script's pins the
#                                  script exits at once.
#
# Usage: scripts/interop/install.sh [--force]
# Exits non-zero with a clear message if python3/npm are missing or a registry is unreachable.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="$repo_root/target/interop"
venv="$dest/venv-remoting"
node_prefix="$dest/node"
stamp="$dest/installed.stamp"

PY_PIN="rocketmq==0.4.4"
NPM_PIN="ali-ons@3.12.0"
NPM_GRPC_PIN="rocketmq-client-nodejs@1.0.8"
PY_GRPC_PIN="rocketmq-python-client==5.1.2"
venv_grpc="$dest/venv-grpc"
want_stamp="python:$PY_PIN npm:$NPM_PIN python-grpc:$PY_GRPC_PIN npm-grpc:$NPM_GRPC_PIN"

say() { printf 'interop install: %s\n' "$*"; }
die() { printf 'interop install: ERROR: %s\n' "$*" >&2; exit 1; }

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; fi

if [[ $force -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" \
      && -x "$venv/bin/python" && -x "$venv_grpc/bin/python" && -f "$node_prefix/node_modules/ali-ons/package.json" \
      && -f "$node_prefix/node_modules/rocketmq-client-nodejs/package.json" ]]; then
    say "already installed ($want_stamp) in $dest; nothing to do (--force reinstalls)"
    exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 is required (install Python 3 >= 3.7 with venv support)"
command -v npm >/dev/null 2>&1 || die "npm is required (install Node.js >= 16.19 with npm)"
command -v node >/dev/null 2>&1 || die "node is required (install Node.js >= 16.19)"

start=$SECONDS
rm -f "$stamp"
mkdir -p "$dest"

# --- Python: messense rocketmq 0.4.4 (manylinux1 x86_64 wheel with librocketmq.so) ---------
if [[ "$(uname -m)" != "x86_64" || "$(uname -s)" != "Linux" ]]; then
    die "PyPI rocketmq 0.4.4 ships only a Linux x86_64 wheel; this machine is $(uname -s) $(uname -m)"
fi
if [[ ! -x "$venv/bin/python" ]]; then
    say "creating venv $venv"
    python3 -m venv "$venv" || die "python3 -m venv failed (on Debian/Ubuntu install python3-venv)"
fi
say "pip install $PY_PIN into $venv"
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
        --timeout 30 --retries 2 --quiet "$PY_PIN"; then
    die "pip install $PY_PIN failed: is PyPI reachable (https://pypi.org/simple/rocketmq/, proxy, PIP_INDEX_URL)?"
fi
if ! "$venv/bin/python" -c 'from rocketmq.client import Producer, PushConsumer, Message' 2>/dev/null; then
    die "$PY_PIN installed but 'from rocketmq.client import ...' fails (librocketmq.so not loadable?)"
fi

# --- Python: the official RocketMQ 5.x gRPC client -------------------------------------------
if [[ ! -x "$venv_grpc/bin/python" ]]; then
    say "creating venv $venv_grpc"
    python3 -m venv "$venv_grpc" || die "python3 -m venv failed (on Debian/Ubuntu install python3-venv)"
fi
say "pip install $PY_GRPC_PIN into $venv_grpc"
if ! "$venv_grpc/bin/python" -m pip install --disable-pip-version-check --no-input \
        --timeout 30 --retries 2 --quiet "$PY_GRPC_PIN"; then
    die "pip install $PY_GRPC_PIN failed: is PyPI reachable (https://pypi.org/simple/rocketmq-python-client/, proxy, PIP_INDEX_URL)?"
fi
if ! "$venv_grpc/bin/python" -c 'from rocketmq import ClientConfiguration, Credentials, Message, Producer' 2>/dev/null; then
    die "$PY_GRPC_PIN installed but 'from rocketmq import ClientConfiguration, Credentials, Message, Producer' fails"
fi

# --- Node: ali-ons 3.12.0 and rocketmq-client-nodejs 1.0.8 -------------------------------------
# One npm install names both: with --no-save, an install of one alone prunes the other.
say "npm install --prefix $node_prefix $NPM_PIN $NPM_GRPC_PIN"
mkdir -p "$node_prefix"
if ! npm install --prefix "$node_prefix" --no-audit --no-fund --no-save \
        --fetch-retries 2 --fetch-retry-mintimeout 2000 --fetch-retry-maxtimeout 10000 --fetch-timeout 30000 --loglevel error \
        "$NPM_PIN" "$NPM_GRPC_PIN"; then
    die "npm install $NPM_PIN $NPM_GRPC_PIN failed: is the npm registry reachable ($(npm config get registry 2>/dev/null || echo '?'))?"
fi
if ! node -e "require('$node_prefix/node_modules/ali-ons')" 2>/dev/null; then
    die "$NPM_PIN installed but require('ali-ons') fails"
fi
if ! node -e "const c = require('$node_prefix/node_modules/rocketmq-client-nodejs'); if (!c.Producer || !c.SimpleConsumer || !c.PushConsumer) process.exit(1)" 2>/dev/null; then
    die "$NPM_GRPC_PIN installed but require('rocketmq-client-nodejs') lacks Producer, SimpleConsumer or PushConsumer"
fi

printf '%s' "$want_stamp" >"$stamp"
say "installed $want_stamp into $dest in $((SECONDS - start)) s"
