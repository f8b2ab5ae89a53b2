#!/bin/bash
# Wake-ups per second of an idle server's threads (voluntary context switches
# in /proc/<pid>/task/*/status), for each server given.  Each server starts
# with DRAM, NVM and SSD (or as TIERS says), takes a small load, settles for
# SETTLE seconds and is then watched for WINDOW seconds without a request.
#
#   SSD_DIR=<dir on a disk file system> bench/idle-wakeups.sh <server> [<server>...]
#
# Variables: SSD_DIR (required unless TIERS=dram), TIERS=three|dram (default
# three), SETTLE (default 5), WINDOW (default 10), PORT (default 22990).
# stock memcached may be given too; it runs with no tier options.
set -euo pipefail

TIERS=${TIERS:-three}
SETTLE=${SETTLE:-5}
WINDOW=${WINDOW:-10}
PORT=${PORT:-22990}
[ $# -ge 1 ] || { sed -n '2,12p' "$0"; exit 2; }
if [ "$TIERS" = three ] && [ -z "${SSD_DIR:-}" ]; then
    echo "idle-wakeups: set SSD_DIR to a directory on a disk file system" >&2
    exit 2
fi

snap() {
    local pid=$1
    for t in /proc/"$pid"/task/*; do
        printf '%s %s\n' "$(cat "$t/comm")" \
            "$(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")"
    done
}

for bin in "$@"; do
    work=$(mktemp -d "${SSD_DIR:-/tmp}/idle-wakeups.XXXXXX")
    nvm=/dev/shm/idle-wakeups-$$-$PORT
    args=(-p "$PORT" -U 0 -m 64 -t 4)
    [ "$(id -u)" = 0 ] && args+=(-u root)
    help=$("$bin" -h 2>/dev/null || true)
    if [ "$TIERS" = three ] && [[ $help == *nvm_path* ]]; then
        args+=(-o "nvm_path=$nvm:128m,ssd_path=$work/ssd:512m")
    fi
    "$bin" "${args[@]}" >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
        sleep 0.1
    done
    python3 - "$PORT" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for i in range(2000):
    key = b"idle:%040d" % i
    val = b"v" * (100 + i * 37 % 4000)
    s.sendall(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key, len(val), val))
s.sendall(b"version\r\n")
buf = b""
while not buf.endswith(b"\r\n"):
    buf += s.recv(4096)
EOF
    sleep "$SETTLE"
    snap "$pid" >"$work/a"
    sleep "$WINDOW"
    snap "$pid" >"$work/b"
    echo "== $bin (TIERS=$TIERS, idle ${WINDOW} s after ${SETTLE} s)"
    paste "$work/a" "$work/b" | awk -v w="$WINDOW" '
        { r[$1] += ($4 - $2) / w; tot += ($4 - $2) / w }
        END { for (n in r) printf "  %-16s %7.1f/s\n", n, r[n]; printf "  %-16s %7.1f/s\n", "TOTAL", tot }' |
        sort
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$work" "$nvm"
done
