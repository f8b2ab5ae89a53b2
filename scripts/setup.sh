#!/usr/bin/env bash
# Idempotent set-up for tac-memcached on Debian 12: system packages, the test
# venv (.venv) and an in-tree build (./tac-memcached). Fast when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    SUDO=(__no_sudo__)
fi

PKGS=(build-essential autoconf automake libtool pkg-config libevent-dev libjemalloc-dev libpmem-dev
      liburing-dev libnuma-dev libmemcached-tools libmemcached-dev zlib1g-dev memcached python3-venv
      python3-dev netcat-openbsd rsync clang libclang-rt-14-dev nutcracker libsasl2-dev libsasl2-modules sasl2-bin libssl-dev)
missing=()
for p in "${PKGS[@]}"; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$st" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "${SUDO[0]:-}" = __no_sudo__ ]; then
        echo "setup.sh: missing packages (${missing[*]}); run as root or install sudo" >&2
        exit 1
    fi
    echo "setup.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -q
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Stock memcached is only a reference for the tests.  The package may start
# one on port 11211; it is left alone: every test starts its servers, stock
# ones included, on free ports of its own.

# Python venv for the integration and stress suites.
PY_REQS="pytest==8.3.5 pymemcache==4.0.0 pylibmc==1.6.3 python-binary-memcached==0.33.0 prometheus-client==0.26.0 cryptography==50.0.2"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.reqs 2>/dev/null || true)" != "$PY_REQS" ]; then
    echo "setup.sh: creating .venv"
    rm -rf .venv
    "$PY" -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check $PY_REQS
    echo "$PY_REQS" > .venv/.reqs
fi

# Java (spymemcached) and Node (memjs) clients for the client matrix.
bash tests/clients/install-toolchains.sh

# memcached_exporter (Prometheus) for tests/integration/test_prometheus.py, built from its
# Go module into tools/bin (module and build caches in tools/go while it builds).  The
# module proxy serves this exact version but neither the module's version list (which
# `go install mod@ver` asks for) nor its checksum database entry: so the module is fetched
# with `go mod download`, checked against the hash pinned here, and built in place against
# its own go.sum.
EXPORTER_MOD=github.com/prometheus/memcached_exporter
EXPORTER_VER=v0.14.4
EXPORTER_SUM=h1:bVGqhAbE54ms5yojeXFGaA0oEolX8XvkvM2o/349uFY=
exporter_have=$(tools/bin/memcached_exporter --version 2>&1 || true)
if [[ "$exporter_have" != *"memcached_exporter, version ${EXPORTER_VER#v} "* ]]; then
    GO=$(command -v go 2>/dev/null || true)
    [ -n "$GO" ] || GO=/usr/local/go/bin/go
    if [ ! -x "$GO" ]; then
        echo "setup.sh: Go is missing (no go in PATH nor /usr/local/go/bin/go); it is needed to build" \
             "memcached_exporter $EXPORTER_VER: install Go 1.21 or newer and run setup.sh again" >&2
        exit 1
    fi
    echo "setup.sh: building memcached_exporter $EXPORTER_VER into tools/bin"
    mkdir -p tools/bin tools/go
    export_go() {
        GOPATH="$REPO/tools/go" GOMODCACHE="$REPO/tools/go/pkg/mod" GOCACHE="$REPO/tools/go/cache" \
            GOFLAGS="-modcacherw -buildvcs=false" GOTOOLCHAIN=local GONOSUMDB="$EXPORTER_MOD" "$GO" "$@"
    }
    dl=$(export_go mod download -json "$EXPORTER_MOD@$EXPORTER_VER")
    sum=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p' <<<"$dl")
    dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$dl")
    if [ "$sum" != "$EXPORTER_SUM" ] || [ ! -d "$dir" ]; then
        echo "setup.sh: $EXPORTER_MOD@$EXPORTER_VER has hash '$sum', expected $EXPORTER_SUM" >&2
        exit 1
    fi
    (cd "$dir" && export_go build -trimpath -o "$REPO/tools/bin/memcached_exporter.tmp" \
        -ldflags "-X github.com/prometheus/common/version.Version=${EXPORTER_VER#v}" ./cmd/memcached_exporter)
    mv -f tools/bin/memcached_exporter.tmp tools/bin/memcached_exporter
    rm -rf tools/go     # 250 MB of caches, of no use once the binary is there
fi

# Build (in-tree; the sanitizer build lives in build-asan/, see scripts/test.sh).
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt configure ] \
   || [ ! -f Makefile.in ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi
fi
if [ ! -f Makefile ] || [ configure -nt config.status ]; then
    ./configure
fi
make -j2
