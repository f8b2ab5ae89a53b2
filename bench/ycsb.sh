#!/usr/bin/env bash
# bench/ycsb.sh - YCSB 0.17.0's own memcached binding (site.ycsb.db.MemcachedClient
# over spymemcached 2.11.4) against a tac-memcached this script starts: load,
# then workload A, then workload B, all with dataintegrity=true (every read
# value is checked).  Prints each phase's ops/s, every Return= line and the
# server's tier stats after each phase; exits non-zero when any operation
# returned anything but OK, or the server died.
#
# The binding is not on the Maven registry: it is compiled at run time from
# a YCSB source checkout (a clone or bare mirror of brianfrankcooper/YCSB
# with tag 0.17.0) named by YCSB_MIRROR.  Its jars (YCSB core 0.17.0,
# spymemcached 2.11.4 and their dependencies) come from Maven's default
# remote repository through `mvn dependency:copy`.  Nothing of YCSB goes
# into this repository; it is built under YCSB_WORK.
#
# Usage: bench/ycsb.sh                        (environment below)
# Environment:
#   YCSB_MIRROR   YCSB checkout or bare mirror (required the first time)
#   YCSB_WORK     where the binding is built   (default ${TMPDIR:-/tmp}/tac-ycsb)
#   TAC_SERVER    server binary                (default ./tac-memcached)
#   MEM           -m in MB                     (default 256)
#   NVM           NVM size, empty for none     (default 512m)
#   SSD           SSD size, empty for none     (default 4g)
#   NVM_DIR       NVM file's directory         (default /dev/shm)
#   SSD_DIR       SSD file's directory, on a disk, not tmpfs (default ${TMPDIR:-/var/tmp})
#   SERVER_THREADS  -t                         (default 2)
#   SERVER_ARGS   more server arguments        (default none)
#   RECORDS       recordcount                  (default 1000000)
#   OPS           operationcount per workload  (default 100000000: RUN_SECONDS ends it)
#   RUN_SECONDS   maxexecutiontime per workload (default 120)
#   THREADS       YCSB client threads          (default 8)
#   PORT          server port                  (default a free one)
#   YCSB_ARGS     more YCSB arguments for every phase (e.g. "-p writeallfields=true")
#   OUT           directory for the logs        (default a new temporary one)
set -euo pipefail

CORE_VERSION=0.17.0
JARS=(
  site.ycsb:core:$CORE_VERSION
  net.spy:spymemcached:2.11.4
  org.apache.htrace:htrace-core4:4.1.0-incubating
  org.codehaus.jackson:jackson-mapper-asl:1.9.13
  org.codehaus.jackson:jackson-core-asl:1.9.13
  org.hdrhistogram:HdrHistogram:2.1.4
  log4j:log4j:1.2.17
)
BINDING=memcached/src/main/java/site/ycsb/db/MemcachedClient.java

REPO=$(cd "$(dirname "$0")/.." && pwd)
YCSB_WORK=${YCSB_WORK:-${TMPDIR:-/tmp}/tac-ycsb}
TAC_SERVER=${TAC_SERVER:-$REPO/tac-memcached}
MEM=${MEM:-256}
NVM=${NVM-512m}
SSD=${SSD-4g}
NVM_DIR=${NVM_DIR:-/dev/shm}
SSD_DIR=${SSD_DIR:-${TMPDIR:-/var/tmp}}
SERVER_THREADS=${SERVER_THREADS:-2}
RECORDS=${RECORDS:-1000000}
OPS=${OPS:-100000000}
RUN_SECONDS=${RUN_SECONDS:-120}
THREADS=${THREADS:-8}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/tac-ycsb-run.XXXXXX")}

say() { printf '[ycsb.sh] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 2; }

# ---- the binding, built once per YCSB_WORK ----
build_binding() {
  local cls=$YCSB_WORK/classes/site/ycsb/db/MemcachedClient.class gav a v
  mkdir -p "$YCSB_WORK/lib" "$YCSB_WORK/classes" "$YCSB_WORK/src"
  for gav in "${JARS[@]}"; do
    IFS=: read -r _ a v <<<"$gav"
    [ -s "$YCSB_WORK/lib/$a-$v.jar" ] && continue
    command -v mvn >/dev/null || die "mvn is needed to fetch $gav"
    say "fetching $gav"
    (cd "$YCSB_WORK" && mvn -B -q dependency:copy -Dartifact="$gav" \
        -DoutputDirectory="$YCSB_WORK/lib" >"$YCSB_WORK/mvn.log" 2>&1) ||
      { tail -20 "$YCSB_WORK/mvn.log" >&2; die "could not fetch $gav"; }
  done
  [ -f "$cls" ] && [ -f "$YCSB_WORK/workloada" ] && [ -f "$YCSB_WORK/workloadb" ] && return 0
  [ -n "${YCSB_MIRROR:-}" ] || die "set YCSB_MIRROR to a YCSB checkout (tag $CORE_VERSION)"
  git -C "$YCSB_MIRROR" show "$CORE_VERSION:$BINDING" >"$YCSB_WORK/src/MemcachedClient.java" ||
    die "$YCSB_MIRROR has no $BINDING at tag $CORE_VERSION"
  git -C "$YCSB_MIRROR" show "$CORE_VERSION:workloads/workloada" >"$YCSB_WORK/workloada"
  git -C "$YCSB_MIRROR" show "$CORE_VERSION:workloads/workloadb" >"$YCSB_WORK/workloadb"
  say "compiling MemcachedClient ($CORE_VERSION)"
  javac -nowarn -encoding UTF-8 -cp "$YCSB_WORK/lib/*" -d "$YCSB_WORK/classes" \
    "$YCSB_WORK/src/MemcachedClient.java" || die "javac failed"
}

# ---- the server ----
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stats() {   # stats [sub]: the server's answer, one "name value" a line
  python3 - "$PORT" "${1:-}" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(("stats %s\r\n" % sys.argv[2]).encode())
buf = b""
while not buf.endswith(b"END\r\n"):
    d = s.recv(65536)
    if not d:
        break
    buf += d
for ln in buf.decode().splitlines():
    if ln.startswith("STAT "):
        print(ln[5:])
PY
}

TIER_STATS='^(tiers|dram_malloced|dram_items|nvm_pages_used|nvm_pages_total|nvm_items|ssd_items|ssd_pages_free|ssd_pages_total|meta_tuples|evict_dram_to_nvm|evict_dram_to_ssd|evict_nvm_to_ssd|set_fallback_nvm|set_fallback_ssd|nvm_alloc_failures|meta_alloc_failures|nvm_fallback_ssd|nvm_pages_drained|nvm_tuples_to_ssd|nvm_mover_wants|dram_page_moves_[a-z]+|tier_watchdog_moves|fetch_no_room|evictor_backlog|ssd_items_dropped|ssd_full) '

show_stats() {
  say "server stats after $1"
  { stats | grep -E '^(curr_items|cmd_get|cmd_set|store_no_memory|evictions|slabs_moved|slab_automove_moves) ' || true
    stats tac | grep -E '^store_wait_timeouts ' || true
    stats tiers | grep -E "$TIER_STATS" || true; } | sed 's/^/  /'
}

SERVER_PID=
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
  [ -n "${NVM_FILE:-}" ] && rm -f "$NVM_FILE" "$NVM_FILE".state* "$NVM_FILE".dramlog
  [ -n "${SSD_FILE:-}" ] && rm -f "$SSD_FILE" "$SSD_FILE".state* "$SSD_FILE".dramlog
  return 0
}
trap stop_server EXIT

start_server() {
  PORT=${PORT:-$(free_port)}
  local opts=() args=(-l 127.0.0.1 -p "$PORT" -U 0 -t "$SERVER_THREADS" -m "$MEM")
  [ "$(id -u)" -eq 0 ] && args+=(-u root)
  if [ -n "$NVM" ]; then
    NVM_FILE=$NVM_DIR/tac-ycsb-$$.nvm
    opts+=("nvm_path=$NVM_FILE:$NVM")
  fi
  if [ -n "$SSD" ]; then
    SSD_FILE=$SSD_DIR/tac-ycsb-$$.ssd
    opts+=("ssd_path=$SSD_FILE:$SSD")
  fi
  if [ ${#opts[@]} -gt 0 ]; then
    args+=(-o "$(IFS=,; echo "${opts[*]}")")
  fi
  # shellcheck disable=SC2206
  args+=(${SERVER_ARGS:-})
  say "server: $TAC_SERVER ${args[*]}"
  "$TAC_SERVER" "${args[@]}" >"$OUT/server.log" 2>&1 &
  SERVER_PID=$!
  local i
  for i in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  cat "$OUT/server.log" >&2
  die "the server did not start"
}

# ---- a YCSB phase ----
BAD=0
phase() {   # phase NAME FLAG WORKLOAD [more args]
  local name=$1 flag=$2 wl=$3; shift 3
  local log=$OUT/$name.out rc=0
  say "$name: YCSB $flag -P $wl ($RECORDS records, $THREADS threads)"
  # shellcheck disable=SC2086
  (cd "$YCSB_WORK" && exec java -cp "classes:lib/*" site.ycsb.Client "$flag" \
      -db site.ycsb.db.MemcachedClient -P "$wl" \
      -p memcached.hosts="127.0.0.1:$PORT" -p recordcount="$RECORDS" \
      -p threadcount="$THREADS" -p dataintegrity=true "$@" ${YCSB_ARGS:-}) \
      >"$log" 2>"$OUT/$name.err" || rc=$?
  local tput
  tput=$(awk -F', ' '/^\[OVERALL\], Throughput/ {print $3}' "$log")
  printf '%s: %s ops/s\n' "$name" "${tput:-?}"
  grep -E '^\[[A-Z_-]+\], Return=' "$log" | sed "s/^/$name: /" || true
  if [ "$rc" -ne 0 ]; then
    say "$name: YCSB exited $rc"; tail -5 "$OUT/$name.err" >&2; BAD=1
  fi
  if grep -E '^\[[A-Z_-]+\], Return=' "$log" | grep -qv ', Return=OK,'; then
    say "$name: non-OK returns"; BAD=1
  fi
  grep -qE '^\[[A-Z_-]+\], Return=OK' "$log" || { say "$name: no operation returned"; BAD=1; }
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    cat "$OUT/server.log" >&2; die "the server died during $name"
  fi
  show_stats "$name"
}

build_binding
[ -x "$TAC_SERVER" ] || die "no server binary at $TAC_SERVER"
mkdir -p "$OUT"
say "logs in $OUT"
start_server
phase load -load workloada
phase workloada -t workloada -p operationcount="$OPS" -p maxexecutiontime="$RUN_SECONDS"
phase workloadb -t workloadb -p operationcount="$OPS" -p maxexecutiontime="$RUN_SECONDS"
printf 'store_wait_timeouts: %s\n' "$(stats tac | awk '$1 == "store_wait_timeouts" {print $2}')"
stop_server
exit $BAD
