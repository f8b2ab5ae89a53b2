#!/usr/bin/env bash
# Runs each libFuzzer harness (tests/fuzz/build.sh), two at a time
# (FUZZ_JOBS), for FUZZ_SECONDS (default 10) on its seed corpus and
# dictionary, inputs up to FUZZ_MAX_LEN bytes (default 256 KB, room for one
# key repeated past 65,536 times); a crash, a sanitizer report or a damaged
# canary fails the run.  libFuzzer's seed is printed; FUZZ_SEED sets it.
# With TAC_JUNIT_DIR set, writes one JUnit XML (fuzz.xml) with a test case
# per protocol.
# Usage: tests/fuzz/run.sh [text|meta|binary ...]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
secs=${FUZZ_SECONDS:-10}
seed=${FUZZ_SEED:-$(( $(od -An -N4 -tu4 /dev/urandom) % 2147483647 + 1 ))}
protos=("$@")
[ ${#protos[@]} -gt 0 ] || protos=(text meta binary)
work=$(mktemp -d /tmp/tac-fuzz.XXXXXX)
cases=""
fails=0
# One harness: its log in $work/$p.log, its result line in $work/$p.result.
fuzz_one() {
    local p=$1 bin="$here/bin/fuzz_$1" start rc
    mkdir -p "$work/corpus-$p" "$work/art-$p"
    start=$(date +%s)
    "$bin" -seed="$seed" -max_total_time="$secs" -print_final_stats=1 -dict="$here/$p.dict" \
        -max_len="${FUZZ_MAX_LEN:-262144}" \
        -artifact_prefix="$work/art-$p/" "$work/corpus-$p" "$here/corpus/$p" \
        > "$work/$p.log" 2>&1
    rc=$?
    echo "$rc $(( $(date +%s) - start ))" > "$work/$p.result"
}
# Two at a time: each libFuzzer process uses one core, and -max_total_time is
# wall time, so on two cores this runs as many inputs in less time.
running=0
for p in "${protos[@]}"; do
    fuzz_one "$p" &
    running=$((running + 1))
    if [ $running -ge "${FUZZ_JOBS:-2}" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait
for p in "${protos[@]}"; do
    read -r rc took < "$work/$p.result" || { rc=1; took=0; }
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$p.log")
    if [ "$rc" -eq 0 ]; then
        echo "fuzz $p: ok, ${runs:-?} inputs in ${took}s (FUZZ_SEED=$seed)"
        cases+="<testcase classname=\"fuzz\" name=\"$p\" time=\"$took\"/>"
    else
        fails=$((fails + 1))
        echo "fuzz $p: FAILED (rc $rc, FUZZ_SEED=$seed); log and input in $work"
        grep -E "ERROR|SUMMARY|runtime error|canary" "$work/$p.log" | head -20
        cases+="<testcase classname=\"fuzz\" name=\"$p\" time=\"$took\"><failure message=\"libFuzzer rc $rc, see $work\"/></testcase>"
    fi
done
if [ -n "${TAC_JUNIT_DIR:-}" ]; then
    mkdir -p "$TAC_JUNIT_DIR"
    n=${#protos[@]}
    echo "<testsuites><testsuite name=\"fuzz\" tests=\"$n\" failures=\"$fails\" errors=\"0\" skipped=\"0\">$cases</testsuite></testsuites>" \
        > "$TAC_JUNIT_DIR/fuzz.xml"
fi
[ $fails -eq 0 ] && rm -rf "$work"
[ $fails -eq 0 ]
