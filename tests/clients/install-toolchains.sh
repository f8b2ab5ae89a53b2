#!/usr/bin/env bash
# Installs what tests/integration/test_client_matrix.py needs besides Python: maven + a JDK
# (spymemcached tests in tests/clients/java) and nodejs + npm (memjs tests in tests/clients/node),
# then pre-fetches the Maven dependencies into <repo>/.m2 and the npm modules into
# tests/clients/node/node_modules, so that later runs work offline (mvn -o).
# Idempotent; when everything is in place it only checks a few files and returns.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
JAVA_DIR="$HERE/java"
NODE_DIR="$HERE/node"
M2="$REPO/.m2"

log() { echo "install-toolchains: $*"; }
# Debian's Maven prints bare colour resets even in batch mode
mvn_quiet() { mvn -q -B -Dstyle.color=never -Dmaven.repo.local="$M2" "$@" 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g'; }

# ---- Debian packages
need=()
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if ((${#need[@]})); then
    log "apt-get install ${need[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---- Maven dependencies (spymemcached, junit, plugins, surefire's junit4 provider)
stamp_java="$M2/.tac-clients-java.stamp"
want_java="$(sha256sum "$JAVA_DIR/pom.xml" | cut -d' ' -f1)"
if [ "$(cat "$stamp_java" 2>/dev/null || true)" != "$want_java" ]; then
    log "pre-fetching Maven dependencies into $M2"
    (cd "$JAVA_DIR" && mvn_quiet -DskipTests test)
    # prove that an offline run resolves everything
    (cd "$JAVA_DIR" && mvn_quiet -o -DskipTests test)
    echo "$want_java" >"$stamp_java"
fi

# ---- npm modules (memjs)
stamp_node="$NODE_DIR/node_modules/.tac-clients-node.stamp"
want_node="$(sha256sum "$NODE_DIR/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$stamp_node" 2>/dev/null || true)" != "$want_node" ]; then
    log "npm ci in $NODE_DIR"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want_node" >"$stamp_node"
fi
