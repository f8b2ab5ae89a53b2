#!/usr/bin/env bash
# bench/device-limit.sh - how close the SSD tier gets to its device.
#
# usage: SSD_DIR=<dir on the disk under test> bench/device-limit.sh [SERVER_BINARY]
#
# 1. fio: random 4 KiB reads, O_DIRECT, io_uring, queue depth 32, one job,
#    on a FIO_SIZE file in SSD_DIR (the filesystem the SSD file lives on).
#    That is the device's read rate the tier could reach.
# 2. tac-memcached (-m MEM, -t THREADS, an SSD file in SSD_DIR), loaded with
#    a data set 8x its DRAM (VALUE-byte values), then a read-only load with
#    uniform keys (so about 7 in 8 reads are SSD hits) from pipelined
#    clients (CONNS connections x DEPTH) for DURATION seconds.
# 3. Prints the server's device reads per second (`ssd_reads` -
#    `ssd_reads_mem`, over the recorded interval) as a share of fio's rate,
#    and the CPU both sides used: on a 2-core machine the cores, not the
#    disk, may be the limit.
#
# Variables (defaults): MEM=64 (MB) THREADS=2 VALUE=1000 CONNS=16 DEPTH=32
# DURATION=20 FIO_SECONDS=15 FIO_SIZE=2G OUT=<temp dir, kept when given>.
# fio comes from the Debian package `fio`; when it is missing and this runs
# as root, the script installs it with apt-get.
set -u
here=$(cd "$(dirname "$0")" && pwd)
server=${1:-$here/../tac-memcached}
: "${SSD_DIR:?set SSD_DIR to a directory on the disk under test (not tmpfs)}"
MEM=${MEM:-64}
THREADS=${THREADS:-2}
VALUE=${VALUE:-1000}
CONNS=${CONNS:-16}
DEPTH=${DEPTH:-32}
DURATION=${DURATION:-20}
FIO_SECONDS=${FIO_SECONDS:-15}
FIO_SIZE=${FIO_SIZE:-2G}
keep_out=${OUT:-}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
spid=
cleanup() {
    [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
    rm -f "$SSD_DIR/device-limit.fio" "$SSD_DIR"/device-limit.ssd*
    [ -z "$keep_out" ] && rm -rf "$out"
}
trap cleanup EXIT
die() { echo "device-limit: $*" >&2; exit 1; }

[ -x "$server" ] || die "no server binary $server"
rm -f "$SSD_DIR"/device-limit.ssd*   # and its restart state: start cold
if ! command -v fio >/dev/null; then
    [ "$(id -u)" = 0 ] || die "fio is missing: apt-get install fio"
    (apt-get update -qq && apt-get install -y -qq fio) >/dev/null 2>&1 ||
        die "cannot install fio"
fi
bench=$out/tac-bench
cc -O2 -Wall -Wextra -pthread "$here/tac-bench.c" -o "$bench" -lm -lssl -lcrypto ||
    die "cannot build tac-bench"

echo "== fio: 4 KiB random reads, depth 32, $FIO_SECONDS s, $SSD_DIR"
fio --name=randread --filename="$SSD_DIR/device-limit.fio" --size="$FIO_SIZE" \
    --rw=randread --bs=4k --iodepth=32 --ioengine=io_uring --direct=1 \
    --numjobs=1 --time_based --runtime="$FIO_SECONDS" --group_reporting \
    --output-format=json --output="$out/fio.json" >/dev/null 2>&1 ||
    die "fio failed (see $out/fio.json)"
fio_iops=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"]))' "$out/fio.json")
echo "fio: $fio_iops reads/s"
rm -f "$SSD_DIR/device-limit.fio"

records=$((MEM * 8 * 1024 * 1024 / VALUE))
ssd_mb=$((MEM * 8 * 2 + 512))
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
user_args=()
[ "$(id -u)" = 0 ] && user_args=(-u root)
echo "== tac-memcached: -m $MEM -t $THREADS, SSD ${ssd_mb} MB, $records records of $VALUE B (8x DRAM)"
"$server" "${user_args[@]}" -l 127.0.0.1 -p "$port" -U 0 -m "$MEM" -t "$THREADS" \
    -o "ssd_path=$SSD_DIR/device-limit.ssd:${ssd_mb}m" >"$out/server.log" 2>&1 &
spid=$!
for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$spid" 2>/dev/null || die "server exited: $(tail -3 "$out/server.log")"
    sleep 0.1
done

"$bench" -s "127.0.0.1:$port" -n "$records" -v "$VALUE" --load-only -c 8 -d 16 -q \
    --json "$out/load.json" >/dev/null 2>&1 || die "load failed"
sleep 3        # the last write bufs reach the file

# The read load runs in the background; stats are taken inside its
# recorded interval (after its 2 s warm-up) so that the rates are the
# server's own over a known span.
"$bench" -s "127.0.0.1:$port" -n "$records" -v "$VALUE" --no-load -w C --dist uniform \
    -c "$CONNS" -d "$DEPTH" -T "$((DURATION + 2))" --warmup 2 -q --no-stats \
    --json "$out/run.json" >"$out/run.out" 2>&1 &
bpid=$!
python3 - "$port" "$DURATION" "$fio_iops" "$spid" "$out/run.json" "$bpid" <<'EOF'
import json, os, socket, sys, time
port, dur, fio_iops, spid, run_json, bpid = (int(sys.argv[1]), float(sys.argv[2]),
                                             int(sys.argv[3]), int(sys.argv[4]),
                                             sys.argv[5], int(sys.argv[6]))
def stats():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"stats\r\nstats tiers\r\n")
    buf = b""
    while buf.count(b"END\r\n") < 2:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    out = {}
    for line in buf.decode().splitlines():
        p = line.split()
        if len(p) == 3 and p[0] == "STAT":
            out[p[1]] = p[2]
    return out
def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        f = f.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
time.sleep(3)
a, ca, ta = stats(), cpu(spid), time.monotonic()
time.sleep(dur - 2)
b, cb, tb = stats(), cpu(spid), time.monotonic()
span = tb - ta
def rate(k):
    return (int(b.get(k, 0)) - int(a.get(k, 0))) / span
dev = rate("ssd_reads") - rate("ssd_reads_mem")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:        # the client ends its run
    try:
        os.kill(bpid, 0)
    except ProcessLookupError:
        break
    time.sleep(0.2)
time.sleep(0.5)
r = json.load(open(run_json))
print(f"client: {r.get('throughput', 0):,.0f} gets/s, wrong {r.get('wrong', 0)}, "
      f"miss {r.get('misses', r.get('miss', 0))}")
print(f"server: {rate('get_hits_ssd'):,.0f} SSD hits/s, {dev:,.0f} device reads/s, "
      f"{(cb - ca) / span:.2f} cores")
print(f"device reads / fio: {dev / fio_iops:.2f} ({dev:,.0f} of {fio_iops:,} reads/s)")
EOF
