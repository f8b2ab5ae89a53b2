#!/usr/bin/env bash
# bench/smoke.sh - CI smoke test of a memcached-compatible server with tac-bench.
#
# usage: bench/smoke.sh SERVER_BINARY [TAC_BENCH_BINARY]
#
# Starts SERVER_BINARY on a free 127.0.0.1 port (-m 64 -t 2 -U 0), runs
# tac-bench for about 10 s in total (load of 20000 records, then 7 s of
# YCSB-B with 1 s warmup) and fails unless throughput > 0, wrong values == 0,
# misses == 0, and no errors.  tac-bench is taken from the second argument,
# else bench/tac-bench if built, else compiled from bench/tac-bench.c into a
# temporary directory.  Prints "1 passed, 0 failed" or "0 passed, 1 failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
server=${1:?usage: smoke.sh SERVER_BINARY [TAC_BENCH_BINARY]}
bench=${2:-}
tmp=$(mktemp -d)
spid=
cleanup() {
    [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
    echo "smoke: FAIL: $*"
    [ -s "$tmp/server.log" ] && sed 's/^/  server: /' "$tmp/server.log" | tail -20
    echo "0 passed, 1 failed"
    exit 1
}

if [ -z "$bench" ]; then
    if [ -x "$here/tac-bench" ] && [ "$here/tac-bench" -nt "$here/tac-bench.c" ]; then
        bench=$here/tac-bench
    else
        cc -O2 -Wall -Wextra -pthread "$here/tac-bench.c" -o "$tmp/tac-bench" -lm ||
            fail "cannot build tac-bench"
        bench=$tmp/tac-bench
    fi
fi
[ -x "$server" ] || fail "no server binary $server"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
       echo $((20000 + RANDOM % 20000)))
user_args=()
[ "$(id -u)" = 0 ] && user_args=(-u root)
"$server" "${user_args[@]}" -l 127.0.0.1 -p "$port" -U 0 -m 64 -t 2 >"$tmp/server.log" 2>&1 &
spid=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$spid" 2>/dev/null || fail "server exited before listening"
    sleep 0.1
done

"$bench" -s "127.0.0.1:$port" -w B -n 20000 -T 7 --warmup 1 -c 4 -d 8 \
    --json "$tmp/r.json" -q >"$tmp/bench.out" 2>&1
rc=$?
cat "$tmp/bench.out"
[ -s "$tmp/r.json" ] || fail "tac-bench wrote no JSON (exit $rc)"
python3 - "$tmp/r.json" <<'EOF' || fail "checks failed"
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
if not d["throughput"] > 0: bad.append("throughput %s" % d["throughput"])
if d["wrong"] != 0: bad.append("wrong values %d" % d["wrong"])
if d["misses"] != 0: bad.append("misses %d" % d["misses"])
if d["errors"] or d["connection_errors"] or d["load"]["errors"]:
    bad.append("errors %d/%d/%d" % (d["errors"], d["connection_errors"], d["load"]["errors"]))
if d["load"]["records"] != d["records"]: bad.append("loaded %d of %d" % (d["load"]["records"], d["records"]))
print("smoke: throughput %.0f ops/s, p99 %.0f us, hits %d, misses %d, wrong %d"
      % (d["throughput"], d["latency"]["all"]["p99_us"], d["hits"], d["misses"], d["wrong"]))
if bad:
    print("smoke: " + "; ".join(bad)); sys.exit(1)
EOF
[ $rc -eq 0 ] || fail "tac-bench exit $rc"
echo "smoke: OK"
echo "1 passed, 0 failed"
