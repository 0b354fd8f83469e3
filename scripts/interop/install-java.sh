#!/usr/bin/env bash
# Builds the Java interop drivers with Maven, all under target/ (gitignored; nothing is
# installed globally):
# - scripts/interop/java (crates/cli/tests/interop_java.rs) against two pinned releases of the
#   official RocketMQ remoting client;
# - scripts/interop/java-grpc (crates/cli/tests/interop_java_grpc.rs) against the official 5.x
#   gRPC client org.apache.rocketmq:rocketmq-client-java (one shaded jar).
# Layout:
#   target/m2                               Maven local repository (-Dmaven.repo.local)
#   target/interop/java/v<version>/build    compiled driver classes (build/classes)
#   target/interop/java/v<version>/classpath.txt
#                                           the resolved runtime classpath: rocketmq-client,
#                                           rocketmq-tools (mqadmin's MQAdminStartup) and the
#                                           ACL hook (rocketmq-acl for 4.9.x)
#   target/interop/java/installed.stamp     written last; when it matches the pins below that
#                                           build is skipped.
#   target/interop/java-grpc/v<version>/{build,classpath.txt}, .../installed.stamp
#                                           the same for the gRPC driver.
#
# Pins: 4.9.8 is the last 4.9.x release; 5.5.0 is the newest 5.x rocketmq-client that Maven
# Central serves (5.5.1 and 5.4.1 do not resolve there). mqadmin runs from the 5.5.0 classpath.
# rocketmq-client-java 5.0.8 is the gRPC client (its shaded slf4j finds no logging backend, so
# it writes no log file; the driver's stdout and stderr are what a run leaves).
#
# Usage: scripts/interop/install-java.sh [--force]
# Exits non-zero with a clear message if java/mvn are missing or Maven Central is unreachable.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
project="$repo_root/scripts/interop/java"
dest="$repo_root/target/interop/java"
m2="$repo_root/target/m2"
stamp="$dest/installed.stamp"

VERSIONS=(4.9.8 5.5.0)
sources_sum="$(cat "$project/pom.xml" "$project"/src/main/java/ferromq/interop/*.java | cksum | cut -d' ' -f1)"
want_stamp="rocketmq-client:${VERSIONS[*]} sources:$sources_sum"

GRPC_VERSION=5.0.8
grpc_project="$repo_root/scripts/interop/java-grpc"
grpc_dest="$repo_root/target/interop/java-grpc"
grpc_stamp="$grpc_dest/installed.stamp"
grpc_sum="$(cat "$grpc_project/pom.xml" "$grpc_project"/src/main/java/ferromq/interop/grpc/*.java | cksum | cut -d' ' -f1)"
grpc_want_stamp="rocketmq-client-java:$GRPC_VERSION sources:$grpc_sum"

say() { printf 'java interop install: %s\n' "$*"; }
die() { printf 'java interop install: ERROR: %s\n' "$*" >&2; exit 1; }

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; fi

all_built() {
    local v
    for v in "${VERSIONS[@]}"; do
        [[ -f "$dest/v$v/classpath.txt" && -f "$dest/v$v/build/classes/ferromq/interop/Driver.class" ]] || return 1
    done
}

grpc_built() {
    [[ -f "$grpc_dest/v$GRPC_VERSION/classpath.txt" \
        && -f "$grpc_dest/v$GRPC_VERSION/build/classes/ferromq/interop/grpc/Driver.class" ]]
}

remoting_done=0
if [[ $force -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]] && all_built; then
    say "already built ($want_stamp) in $dest (--force rebuilds)"
    remoting_done=1
fi
grpc_done=0
if [[ $force -eq 0 && -f "$grpc_stamp" && "$(cat "$grpc_stamp")" == "$grpc_want_stamp" ]] && grpc_built; then
    say "already built ($grpc_want_stamp) in $grpc_dest (--force rebuilds)"
    grpc_done=1
fi
if [[ $remoting_done -eq 1 && $grpc_done -eq 1 ]]; then
    exit 0
fi

command -v java >/dev/null 2>&1 || die "java is required (install a JDK >= 11, e.g. Debian openjdk-17-jdk-headless)"
command -v mvn >/dev/null 2>&1 || die "mvn is required (install Maven >= 3.6, e.g. Debian maven)"

if [[ $remoting_done -eq 0 ]]; then
    start=$SECONDS
    rm -f "$stamp"
    mkdir -p "$dest" "$m2"
    for v in "${VERSIONS[@]}"; do
        extra=()
        if [[ "$v" == 4.* ]]; then extra=(-Drocketmq.acl); fi
        say "mvn compile against rocketmq-client $v (Maven repository $m2)"
        if ! (cd "$project" && nice -n 10 mvn -q -B -Dmaven.repo.local="$m2" \
                -Drocketmq.version="$v" -Dinterop.out="$dest/v$v" "${extra[@]}" compile); then
            die "mvn compile against rocketmq-client $v failed: is Maven Central reachable (settings.xml, proxy)? See the output above."
        fi
    done
    all_built || die "mvn finished but the driver classes or classpath.txt are missing under $dest"
    printf '%s' "$want_stamp" >"$stamp"
    say "built the driver against rocketmq-client ${VERSIONS[*]} into $dest in $((SECONDS - start)) s"
fi

if [[ $grpc_done -eq 0 ]]; then
    start=$SECONDS
    rm -f "$grpc_stamp"
    mkdir -p "$grpc_dest" "$m2"
    say "mvn compile against rocketmq-client-java $GRPC_VERSION (Maven repository $m2)"
    if ! (cd "$grpc_project" && nice -n 10 mvn -q -B -Dmaven.repo.local="$m2" \
            -Drocketmq.grpc.version="$GRPC_VERSION" -Dinterop.out="$grpc_dest/v$GRPC_VERSION" compile); then
        die "mvn compile against rocketmq-client-java $GRPC_VERSION failed: is Maven Central reachable (settings.xml, proxy)? See the output above."
    fi
    grpc_built || die "mvn finished but the gRPC driver classes or classpath.txt are missing under $grpc_dest"
    printf '%s' "$grpc_want_stamp" >"$grpc_stamp"
    say "built the gRPC driver against rocketmq-client-java $GRPC_VERSION into $grpc_dest in $((SECONDS - start)) s"
fi
