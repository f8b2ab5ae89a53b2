#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang, ASan and UBSan into
# tests/fuzz/bin/: fuzz_text, fuzz_meta, fuzz_binary.  Needs a configured
# tree (config.h; scripts/setup.sh makes one) and clang with libFuzzer
# (Debian: clang, libclang-rt-14-dev).  The gcc build is untouched.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
cd "$top"
CC=${FUZZ_CC:-clang}
if ! command -v "$CC" >/dev/null; then
    echo "fuzz/build.sh: $CC not found (apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi
[ -f config.h ] || { echo "fuzz/build.sh: run ./configure first (config.h missing)" >&2; exit 1; }
# The server's sources, less main() (the same list as libtaccore.a).
srcs=$(sed -n '/^libtaccore_a_SOURCES/,/^$/p' Makefile.am | tr -d '\\' | tr ' \t' '\n\n' | grep '\.c$')
out="$here/bin"
mkdir -p "$out" "$here/obj"
flags=(-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -I. -pthread -Wno-unused-command-line-argument)
libs=$(pkg-config --libs libevent libevent_pthreads libpmem liburing libsasl2 openssl)
objs=()
for f in $srcs; do
    o="$here/obj/$(echo "$f" | tr '/' '_' | sed 's/\.c$/.o/')"
    if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ config.h -nt "$o" ] || \
       [ -n "$(find . -maxdepth 2 -name '*.h' -newer "$o" -print -quit)" ]; then
        "$CC" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$f" -o "$o"
    fi
    objs+=("$o")
done
# The wraps give ASan the bounds of each item in its slab chunk (see
# fuzz_proto.c).
wraps=-Wl,--wrap=item_alloc,--wrap=slabs_alloc_ex,--wrap=slabs_free
for p in text meta binary; do
    P=$(echo "$p" | tr a-z A-Z)
    "$CC" "${flags[@]}" -Wall -Wextra -fsanitize=fuzzer -DFUZZ_PROTO_$P "$here/fuzz_proto.c" \
        "${objs[@]}" $wraps $libs -lnuma -lm -o "$out/fuzz_$p"
done
echo "fuzz/build.sh: built $out/fuzz_text, fuzz_meta, fuzz_binary"
