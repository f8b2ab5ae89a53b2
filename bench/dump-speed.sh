#!/usr/bin/env bash
# bench/dump-speed.sh - how fast `lru_crawler metadump all` lists keys that
# live on SSD, where a listing must read each key from its tuple.
#
# usage: SSD_DIR=<dir on the disk under test> bench/dump-speed.sh SERVER [SERVER ...]
#
# For each server binary in turn: starts it cold (-m MEM, -t 2, an SSD file
# in SSD_DIR), loads RECORDS values of VALUE bytes with KEY-byte keys (about
# 7 in 8 end up on SSD at the defaults), drops the page cache's copy of the
# SSD file, then times REPEAT metadumps and prints keys listed, seconds and
# keys per second, with the server's device reads (`ssd_reads` -
# `ssd_reads_mem`) over the dump.
#
# Variables (defaults): MEM=64 RECORDS=400000 VALUE=1000 KEY=40 REPEAT=2.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${SSD_DIR:?set SSD_DIR to a directory on the disk under test (not tmpfs)}"
[ $# -ge 1 ] || { echo "usage: SSD_DIR=dir $0 SERVER [SERVER ...]" >&2; exit 2; }
MEM=${MEM:-64}
RECORDS=${RECORDS:-400000}
VALUE=${VALUE:-1000}
KEY=${KEY:-40}
REPEAT=${REPEAT:-2}
out=$(mktemp -d)
spid=
cleanup() {
    [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
    rm -f "$SSD_DIR"/dump-speed.ssd*
    rm -rf "$out"
}
trap cleanup EXIT
cc -O2 -Wall -Wextra -pthread "$here/tac-bench.c" -o "$out/tac-bench" -lm -lssl -lcrypto || exit 1
port=$((20000 + RANDOM % 20000))

stat_of() {   # stat_of NAME: one value of `stats tiers`
    printf 'stats tiers\r\nquit\r\n' | nc -q 2 127.0.0.1 "$port" |
        awk -v n="$1" '$2 == n { sub("\r", "", $3); print $3 }'
}

for server in "$@"; do
    rm -f "$SSD_DIR"/dump-speed.ssd*
    "$server" -u root -l 127.0.0.1 -p "$port" -U 0 -m "$MEM" -t 2 \
        -o "ssd_path=$SSD_DIR/dump-speed.ssd:4g" 2>"$out/stderr" &
    spid=$!
    for _ in $(seq 100); do nc -z 127.0.0.1 "$port" 2>/dev/null && break; sleep 0.1; done
    "$out/tac-bench" -s "127.0.0.1:$port" --load-only -n "$RECORDS" -k "$KEY" -v "$VALUE" \
        -c 8 -t 2 -q --seed 1 >/dev/null || { echo "load failed" >&2; exit 1; }
    sleep 3
    echo "== $server: ssd_items $(stat_of ssd_items) of $RECORDS"
    for r in $(seq "$REPEAT"); do
        sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null
        r0=$(stat_of ssd_reads); m0=$(stat_of ssd_reads_mem)
        res=$(python3 - "$port" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
t0 = time.monotonic()
s.sendall(b"lru_crawler metadump all\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    chunk = s.recv(1 << 20)
    if not chunk:
        break
    buf += chunk
print(buf.count(b"\n") - 1, "%.3f" % (time.monotonic() - t0))
PY
)
        r1=$(stat_of ssd_reads); m1=$(stat_of ssd_reads_mem)
        read -r n t <<< "$res"
        awk -v n="$n" -v t="$t" -v d=$(( (r1 - r0) - (m1 - m0) )) 'BEGIN {
            printf "metadump: %d keys in %.2f s, %.0f keys/s, %d device reads\n", n, t, n / t, d }'
    done
    kill "$spid"; wait "$spid" 2>/dev/null; spid=
done
