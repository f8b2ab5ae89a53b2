#!/usr/bin/env bash
# 10-second smoke run of the load generator against the freshly built server
# (automake TESTS entry): keeps bench/tac-bench and bench/smoke.sh working.
# Speed is not judged here; bench/compare measures it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/.." && pwd)"
exec "$top/bench/smoke.sh" "${TAC_SERVER:-$top/tac-memcached}" "$top/bench/tac-bench"
