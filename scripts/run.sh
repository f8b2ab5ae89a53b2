#!/usr/bin/env bash
# Build if needed, then run the server in the foreground (default 127.0.0.1:11211).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >&2
if [ $# -eq 0 ]; then
    set -- -l 127.0.0.1 -p 11211
fi
if [ "$(id -u)" -eq 0 ]; then
    case " $* " in *" -u "*) ;; *) set -- -u root "$@" ;; esac
fi
exec ./tac-memcached "$@"
