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
      python3-dev netcat-openbsd rsync clang libclang-rt-14-dev nutcracker)
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

# Stock memcached is only a reference for the tests: it must not hold port 11211.
if [ "${SUDO[0]:-}" != __no_sudo__ ]; then
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        if systemctl is-enabled --quiet memcached 2>/dev/null || systemctl is-active --quiet memcached 2>/dev/null; then
            "${SUDO[@]}" systemctl disable --now memcached >/dev/null 2>&1 || true
        fi
    fi
    # A daemon started by the package (sysvinit, or a container without systemd) runs as user memcache.
    pids=()
    if [ -r /run/memcached/memcached.pid ]; then pids+=("$(cat /run/memcached/memcached.pid 2>/dev/null || true)"); fi
    if command -v pgrep >/dev/null 2>&1; then
        while read -r pid; do pids+=("$pid"); done < <(pgrep -u memcache -x memcached 2>/dev/null || true)
    fi
    for pid in "${pids[@]}"; do
        [ -n "$pid" ] || continue
        if [ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" = /usr/bin/memcached ] \
           && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- '-p 11211'; then
            echo "setup.sh: stopping the packaged memcached (pid $pid) on port 11211"
            "${SUDO[@]}" kill "$pid" 2>/dev/null || true
        fi
    done
fi

# Python venv for the integration and stress suites.
PY_REQS="pytest==8.3.5 pymemcache==4.0.0 pylibmc==1.6.3 python-binary-memcached==0.33.0"
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

# Build (in-tree; the sanitizer build lives in build-asan/, see scripts/test.sh).
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt configure ] \
   || [ ! -f Makefile.in ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi
fi
if [ ! -f Makefile ] || [ configure -nt config.status ]; then
    ./configure
fi
make -j2
