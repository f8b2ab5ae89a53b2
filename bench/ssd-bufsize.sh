#!/usr/bin/env bash
# Evidence for the SSD tier's buf and page size defaults, measured with fio.
#
#   bench/ssd-bufsize.sh [DIR]      # DIR: where the test file goes (default bench/out/ssd-bufsize)
#
# Env: RUNTIME (seconds per fio run, default 10), SIZE (test file, default 2g, keep <= 2g),
#      BUFS (default "64k 128k 256k 512k 1m 4m"), ENGINE (fio ioengine, default io_uring),
#      RATE (write rate of the throttled background writer, default 200m),
#      STEPS (which of seqw rr mix mixrate seqr to run, default all of them).
#
# Runs, all O_DIRECT on one preallocated file:
#   1. sequential writes, one buf per write, 1 and 2 writes in flight      -> MB/s
#   2. random 4 KiB reads alone at queue depth 1 and 32                     -> IOPS, mean/p99 latency
#   3. the same reads while a sequential writer (2 bufs in flight) runs     -> IOPS, latency, writer MB/s
#      a) writer unthrottled, b) writer limited to RATE (default 200m = 200 MiB/s)
#   4. whole-page reads, one buf per request (and one 8m request), qd 1    -> MB/s, time per 8 MB page
# Every fio command is printed before it runs; results go to stdout as Markdown table rows and
# the raw fio JSON to DIR/*.json. The test file is deleted at the end (also on error).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-bench/out/ssd-bufsize}
RUNTIME=${RUNTIME:-10}
SIZE=${SIZE:-2g}
BUFS=${BUFS:-"64k 128k 256k 512k 1m 4m"}
ENGINE=${ENGINE:-io_uring}
RATE=${RATE:-200m}
STEPS=" ${STEPS:-seqw rr mix mixrate seqr} "
want() { case "$STEPS" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
command -v fio >/dev/null || { echo "ssd-bufsize.sh: fio not found (apt-get install -y fio)" >&2; exit 1; }
mkdir -p "$DIR"
F="$DIR/fio-test.dat"
trap 'rm -f "$F"' EXIT
case "$(stat -f -c %T "$DIR")" in tmpfs|ramfs) echo "ssd-bufsize.sh: $DIR is on tmpfs" >&2; exit 1 ;; esac

COMMON=(--filename="$F" --size="$SIZE" --direct=1 --ioengine="$ENGINE" --output-format=json)
TIMED=(--time_based --runtime="$RUNTIME" --ramp_time=1)

run() { # run NAME fio-args... : print the command, keep the JSON
    local name=$1; shift
    echo "\$ fio $*" >&2
    fio "$@" > "$DIR/$name.json"
}

# Parse one fio JSON: one line per job, "jobname read_IOPS read_mean_us read_p99_us write_MB/s read_MB/s"
summary() {
    python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for j in d["jobs"]:
    r, w = j["read"], j["write"]
    pct = r.get("clat_ns", {}).get("percentile", {})
    p99 = pct.get("99.000000", 0) / 1000
    print(j["jobname"], f'{r["iops"]:.0f}', f'{r["clat_ns"]["mean"]/1000:.0f}', f'{p99:.0f}',
          f'{w["bw_bytes"]/1e6:.0f}', f'{r["bw_bytes"]/1e6:.0f}')
EOF
}

echo "# layout: writing $SIZE once with 1m writes" >&2
run layout --name=layout --rw=write --bs=1m --iodepth=2 "${COMMON[@]}"

want seqw && {
echo "## sequential write"
echo "| buf | in flight | MB/s |"
echo "|---|---|---|"
for bs in $BUFS; do
    for qd in 1 2; do
        run "seqw-$bs-qd$qd" --name=seqw --rw=write --bs="$bs" --iodepth="$qd" "${COMMON[@]}" "${TIMED[@]}"
        read -r _ _ _ _ mbps _ < <(summary "$DIR/seqw-$bs-qd$qd.json")
        echo "| $bs | $qd | $mbps |"
    done
done
}

want rr && {
echo "## random 4 KiB reads, no writer"
echo "| read qd | IOPS | mean µs | p99 µs |"
echo "|---|---|---|---|"
for qd in 1 32; do
    run "rr-qd$qd" --name=rr --rw=randread --bs=4k --iodepth="$qd" "${COMMON[@]}" "${TIMED[@]}"
    read -r _ iops mean p99 _ _ < <(summary "$DIR/rr-qd$qd.json")
    echo "| $qd | $iops | $mean | $p99 |"
done
}

mix() { # mix TITLE TAG [writer-args...]
    local title=$1 tag=$2; shift 2
    echo "## random 4 KiB reads with a sequential writer (2 bufs in flight, $title)"
    echo "| buf | read qd | IOPS | mean µs | p99 µs | writer MB/s |"
    echo "|---|---|---|---|---|---|"
    for bs in $BUFS; do
        for qd in 1 32; do
            run "mix$tag-$bs-qd$qd" "${COMMON[@]}" "${TIMED[@]}" \
                --name=writer --rw=write --bs="$bs" --iodepth=2 "$@" \
                --name=reader --rw=randread --bs=4k --iodepth="$qd"
            iops=; mean=; p99=; wmb=
            while read -r job i m p w _; do
                case $job in reader) iops=$i mean=$m p99=$p ;; writer) wmb=$w ;; esac
            done < <(summary "$DIR/mix$tag-$bs-qd$qd.json")
            echo "| $bs | $qd | $iops | $mean | $p99 | $wmb |"
        done
    done
}
want mix && mix "writer unthrottled" ""
want mixrate && mix "writer limited to --rate=$RATE" "-rate$RATE" --rate="$RATE"

want seqr && {
echo "## whole-page sequential reads (queue depth 1)"
echo "| request | MB/s | ms per 8 MB |"
echo "|---|---|---|"
for bs in $BUFS 8m; do
    run "seqr-$bs" --name=seqr --rw=read --bs="$bs" --iodepth=1 "${COMMON[@]}" "${TIMED[@]}"
    read -r _ _ _ _ _ rmb < <(summary "$DIR/seqr-$bs.json")
    echo "| $bs | $rmb | $(python3 -c "print(f'{8.388608e3/$rmb:.1f}')") |"
done
}
