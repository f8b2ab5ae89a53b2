#!/usr/bin/env bash
# Full test run: set-up + build, `make check` (unit tests + integration suite
# against ./tac-memcached), then an ASan+UBSan build in build-asan/ and the
# integration suite again against it, less the tests marked slow, a
# ThreadSanitizer build in build-tsan/ running the three-tier stress test, and
# a short run of each libFuzzer harness (tests/fuzz), and with MEMCACHED_SRC
# set, memcached 1.6.18's own t/ core files (tests/conformance/run.sh). Ends
# with "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && ! sudo -n true 2>/dev/null; then
    echo "test.sh: setup may ask for your sudo password to install packages" >&2
fi

RESULTS=$(mktemp -d /tmp/tac-test.XXXXXX)
failed_steps=()

summary() {
    "$REPO/.venv/bin/python" - "$RESULTS" "${#failed_steps[@]}" <<'PY' 2>/dev/null || echo "0 passed, $(( ${#failed_steps[@]} > 0 ? ${#failed_steps[@]} : 1 )) failed"
import glob, os, sys
import xml.etree.ElementTree as ET
res, steps = sys.argv[1], int(sys.argv[2])
p = f = s = 0
for x in sorted(glob.glob(os.path.join(res, "*.xml"))):
    for ts in ET.parse(x).getroot().iter("testsuite"):
        t, fl, er, sk = (int(ts.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
        p += t - fl - er - sk; f += fl + er; s += sk
for trs in glob.glob(os.path.join(res, "unit", "*.trs")):
    for line in open(trs):
        if line.startswith(":test-result:"):
            r = line.split()[1]
            if r in ("PASS", "XFAIL"): p += 1
            elif r == "SKIP": s += 1
            else: f += 1
# a failed step that produced no failing test (a build, say) still counts
print("%d passed, %d failed, %d skipped" % (p, max(f, steps), s))
PY
}

# A step's heading, with the wall-clock time, so that a log shows where the run's minutes go.
step() {
    echo "== $1 [$(date +%H:%M:%S)]"
}

finish() {
    echo
    step "end"
    if [ ${#failed_steps[@]} -gt 0 ]; then
        echo "test.sh: failed steps: ${failed_steps[*]}"
    fi
    summary
    [ ${#failed_steps[@]} -eq 0 ]
    exit $?
}

step "setup and build"
if ! ./scripts/setup.sh; then
    failed_steps+=(setup/build)
    finish
fi

step "make check (unit tests + integration suite against ./tac-memcached)"
if ! TAC_JUNIT_DIR="$RESULTS" TAC_JUNIT_NAME=default make -j2 check VERBOSE=1; then
    failed_steps+=("make-check")
fi
mkdir -p "$RESULTS/unit"
cp tests/unit/*.trs "$RESULTS/unit/" 2>/dev/null || true

# Builds ./tac-memcached with a sanitizer in $1/src (configure flag $2).
# configure refuses an out-of-tree build of an already configured source dir,
# so $1/src is a mirror of the sources (mtimes kept: rebuilds are incremental).
sanitizer_build() {
    local dir=$1 flag=$2
    mkdir -p "$dir/src"
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -z --cached --others --exclude-standard \
            | rsync -a --from0 --files-from=- ./ "$dir/src/" || return 1
    else
        rsync -a --exclude=/build-asan/ --exclude=/build-tsan/ --exclude=/build/ --exclude=/.venv/ \
            --exclude='*.o' --exclude='*.a' --exclude=.deps/ --exclude=/config.status --exclude=/config.h \
            --exclude=/Makefile --exclude=/tac-memcached ./ "$dir/src/" || return 1
    fi
    (
        set -e
        cd "$dir/src"
        if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt configure ]; then
            autoreconf -fi
        fi
        if [ ! -f Makefile ] || [ configure -nt config.status ]; then
            ./configure "$flag"
        fi
        make -j2 tac-memcached
    ) || return 1
    ln -sf src/tac-memcached "$dir/tac-memcached"
}

step "ASan+UBSan build in build-asan/"
asan_ok=1
sanitizer_build build-asan --enable-sanitizers || asan_ok=0
if [ $asan_ok = 1 ]; then
    step "integration suite against build-asan/tac-memcached"
    if ! TAC_SERVER="$REPO/build-asan/tac-memcached" TAC_START_TIMEOUT=30 TAC_SKIP_SLOW=1 \
         ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
         UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
         TAC_JUNIT_DIR="$RESULTS" TAC_JUNIT_NAME=asan tests/run-integration.sh; then
        failed_steps+=("asan-integration")
    fi
else
    failed_steps+=("asan-build")
fi

step "ThreadSanitizer build in build-tsan/: the verified three-tier stress test, 1 minute"
# DRAM -> NVM -> SSD with get/gets/set/delete/touch/gat/incr/decr/append from 12
# threads (tests/stress/test_stress_ssd.py); a data race or a lock-order
# inversion that ThreadSanitizer reports on the server's stderr fails it.
if sanitizer_build build-tsan --enable-tsan; then
    if ! TAC_SERVER="$REPO/build-tsan/tac-memcached" TAC_START_TIMEOUT=30 TAC_SKIP_SLOW=1 STRESS_SECONDS=45 \
         TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" \
         TAC_JUNIT_DIR="$RESULTS" TAC_JUNIT_NAME=tsan tests/run-integration.sh -k "test_stress_ssd and uring"; then
        failed_steps+=("tsan-stress")
    fi
else
    failed_steps+=("tsan-build")
fi

# memcached 1.6.18's own t/ suite, only when a checkout of it is given
# (MEMCACHED_SRC; CI has none): the 44 core files (text protocol, binary.t,
# binary-get.t) against this build only, four files at a time, bounded to 4
# minutes (about 2.5 on two cores); a failure of a file doc/design.md lists
# as unable to pass is shown, not counted.  Both columns, every file:
# tests/conformance/run.sh (README, "memcached's own test suite").
if [ -n "${MEMCACHED_SRC:-}" ]; then
    step "memcached 1.6.18's t/ suite, core files (MEMCACHED_SRC=$MEMCACHED_SRC)"
    if ! CONFORMANCE_SET=core STOCK_MEMCACHED=none CONFORMANCE_TIMEOUT=200 \
            timeout -k 10 240 tests/conformance/run.sh; then
        failed_steps+=("conformance")
    fi
fi

step "libFuzzer harnesses (clang, ASan+UBSan): text, meta, binary"
if tests/fuzz/build.sh; then
    if ! TAC_JUNIT_DIR="$RESULTS" tests/fuzz/run.sh; then
        failed_steps+=("fuzz")
    fi
else
    failed_steps+=("fuzz-build")
fi
finish
