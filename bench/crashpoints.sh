#!/usr/bin/env bash
# bench/crashpoints.sh - every named crash point x SEEDS x {plain, dram_log,
# tier_key}: the server _exits at the point under the mixed load of
# tests/integration/test_crash_points.py, restarts, and every key is checked.
# Prints one line per point (runs, points reached, and the keys found wrong,
# stale, resurrected, stale-marked served fresh, and, with dram_log=on, lost)
# and the run time.  Needs a build with the debug hooks
# (./configure --enable-debug-hooks, or a sanitizer build).
#
#   bench/crashpoints.sh                              # ./tac-memcached, seeds 1 2 3
#   SEEDS="7 8 9" CONFIGS="plain dram_log" POINTS="journal_record move_nvm_to_ssd" \
#   TAC_SERVER=/path/to/tac-memcached OUT=/tmp/cp.jsonl bench/crashpoints.sh
#
# A point that needs the DRAM log (dramlog_*, restart_replay_record) runs with
# it in every configuration.  The JSON line of every run (counts, the first
# bad keys, the time) stays in OUT; a run to repeat alone is
# TAC_CP_RUNS=point:seed:config .venv/bin/python -m pytest -s tests/integration/test_crash_points.py
set -u
cd "$(dirname "$0")/.."
server=${TAC_SERVER:-$PWD/tac-memcached}
export TAC_SERVER=$server
seeds=${SEEDS:-1 2 3}
configs=${CONFIGS:-plain dram_log tier_key}
all_points=$(TAC_CRASH_LIST=1 "$server" -h)
points=${POINTS:-$all_points}
if ! printf '%s\n' $all_points | grep -qx journal_record; then
    echo "crashpoints: $server has no debug hooks (TAC_CRASH_LIST=1 prints no points)" >&2
    exit 2
fi
out=${OUT:-$(mktemp /tmp/crashpoints.XXXXXX.jsonl)}
: > "$out"
runs=
for p in $points; do
    for s in $seeds; do
        for c in $configs; do
            runs="$runs$p:$s:$c;"
        done
    done
done
t0=$(date +%s)
TAC_CP_RUNS="$runs" TAC_CP_OUT="$out" .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/integration/test_crash_points.py >"$out.log" 2>&1 || { tail -30 "$out.log"; exit 1; }
t1=$(date +%s)
.venv/bin/python - "$out" "$((t1 - t0))" <<'PY'
import collections, json, sys
rows = collections.OrderedDict()
cols = ("runs", "reached", "wrong", "stale", "resurrected", "stale-marked fresh", "lost", "errors")
bad = []
for ln in open(sys.argv[1]):
    r = json.loads(ln)
    row = rows.setdefault(r["point"], collections.Counter())
    row["runs"] += 1
    row["reached"] += r.get("reached", 0)
    row["errors"] += 1 if "error" in r else 0
    for k in cols[2:7]:
        row[k] += r.get(k, 0)
    if "error" in r or any(r.get(k, 0) for k in cols[2:7]):
        bad.append(r)
print("%-24s" % "point" + "".join("%12s" % c for c in cols))
tot = collections.Counter()
for p, row in rows.items():
    tot.update(row)
    print("%-24s" % p + "".join("%12d" % row[c] for c in cols))
print("%-24s" % "total" + "".join("%12d" % tot[c] for c in cols))
print("%d points, %d runs (%d reached the point), %s s" % (len(rows), tot["runs"], tot["reached"], sys.argv[2]))
for r in bad[:20]:
    print("\n%s seed %s %s:" % (r["point"], r["seed"], r["config"]),
          r.get("error", "")[:600] or "\n  ".join(r.get("examples", [])[:3]))
PY
echo "results: $out"
