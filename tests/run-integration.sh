#!/usr/bin/env bash
# Integration + stress suites (pytest) against $TAC_SERVER (default: the repo-root
# ./tac-memcached). Also an automake TESTS entry, run by `make check`.
# Optional: TAC_JUNIT_DIR=<dir> and TAC_JUNIT_NAME=<label> write <dir>/<label>.xml.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
export TAC_SERVER="${TAC_SERVER:-$REPO/tac-memcached}"
PY="$REPO/.venv/bin/python"
if [ ! -x "$PY" ]; then
    echo "run-integration.sh: $PY missing; run scripts/setup.sh first" >&2
    exit 99
fi
if [ ! -x "$TAC_SERVER" ]; then
    echo "run-integration.sh: server binary $TAC_SERVER missing (build it or set TAC_SERVER)" >&2
    exit 99
fi
args=(-q -p no:cacheprovider -rfEs)
if [ -n "${TAC_JUNIT_DIR:-}" ]; then
    mkdir -p "$TAC_JUNIT_DIR"
    args+=("--junitxml=$TAC_JUNIT_DIR/${TAC_JUNIT_NAME:-integration}.xml")
fi
cd "$REPO"
echo "run-integration.sh: TAC_SERVER=$TAC_SERVER"
"$PY" -m pytest "${args[@]}" tests/integration tests/stress "$@"
rc=$?
case $rc in
    0) exit 0 ;;
    5) echo "run-integration.sh: pytest collected no tests" >&2; exit 99 ;;
    *) exit 1 ;;
esac
