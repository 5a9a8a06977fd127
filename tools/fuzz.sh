#!/usr/bin/env bash
# tools/fuzz.sh - build and run every libFuzzer target tests/fuzz/fuzz_*.c.
#
#   tools/fuzz.sh                 all targets, FUZZ_SECONDS (default 60) each
#   tools/fuzz.sh frame gguf      only fuzz_frame.c and fuzz_gguf.c
#   FUZZ_SECONDS=600 make fuzz
#
# The library is built with clang into build-fuzz/ with coverage
# instrumentation (-fsanitize=fuzzer-no-link) plus ASan and UBSan, and each
# target is linked against it. Adding a target means adding a file: it only
# has to define LLVMFuzzerTestOneInput and use the public headers.
# Corpora grow in tests/fuzz/corpus-NAME/ (git-ignored); if tests/fuzz/seed-NAME/
# exists its files are used as seeds. Crash reproducers land in build-fuzz/.
# Exit status: non-zero if any target found a crash, leak or timeout.
# The targets and what each checks: docs/operations.md, "Fuzzing the parsers
# that read from the network". `make test` also links each target with
# tests/fuzz/replay.c and replays its seeds (tests/it_fuzz_seeds.sh).
set -u
cd "$(dirname "$0")/.."
CC=${FUZZ_CC:-clang}
SECONDS_EACH=${FUZZ_SECONDS:-60}
BUILD=build-fuzz
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
command -v "$CC" >/dev/null || { echo "fuzz.sh: $CC not found (apt-get install clang libclang-rt-dev)"; exit 2; }

# CFLAGS goes through the environment, not the make command line: a
# command-line CFLAGS would replace the Makefile's own flags (includes, -std).
# -k: a file that does not build with clang (someone's work in progress)
# must not stop fuzzing the others; the targets link only what they use.
mkdir -p $BUILD
if ! CFLAGS="-O1 -g $SAN -fsanitize=fuzzer-no-link -Wno-unknown-warning-option" \
        make -k -s BUILD=$BUILD BIN=$BUILD/bin CC="$CC" $BUILD/libswitchboard.a \
        >$BUILD/lib.log 2>&1; then
    echo "fuzz.sh: some library files do not build with $CC (see $BUILD/lib.log):"
    grep -oE '^[a-z/_]+\.c:[0-9]+:[0-9]+: error' $BUILD/lib.log | sort -u | head
fi
objs=()
for src in $(find common ipc worker cache kb router supervisor -name '*.c' 2>/dev/null |
                grep -v '^supervisor/main\.c$'); do
    o=$BUILD/${src%.c}.o
    [ -f "$o" ] && [ "$o" -nt "$src" ] && objs+=("$o")
done
rm -f $BUILD/libfuzz.a
ar rcs $BUILD/libfuzz.a "${objs[@]}" || { echo "fuzz.sh: no objects to archive"; exit 2; }

PKGS="libevent libevent_pthreads msgpack yaml-0.1 sqlite3 libcurl libcrypto"
INCLUDES="-I."     # includes name their module: "worker/gguf/sb_gguf.h"
targets=()
if [ $# -gt 0 ]; then
    for n in "$@"; do targets+=("tests/fuzz/fuzz_${n#fuzz_}.c"); done
else
    targets=(tests/fuzz/fuzz_*.c)
fi
status=0
for src in "${targets[@]}"; do
    [ -e "$src" ] || { echo "fuzz.sh: no such target $src"; status=2; continue; }
    name=$(basename "$src" .c)
    short=${name#fuzz_}
    bin=$BUILD/fuzz/$name
    mkdir -p "$BUILD/fuzz" "tests/fuzz/corpus-$short"
    # shellcheck disable=SC2086
    $CC -std=c11 -g -O1 -D_GNU_SOURCE -pthread $SAN -fsanitize=fuzzer $INCLUDES \
        $(pkg-config --cflags $PKGS) -o "$bin" "$src" $BUILD/libfuzz.a \
        $(pkg-config --libs $PKGS) -lm || { echo "fuzz.sh: cannot build $name"; status=2; continue; }
    seeds=()
    [ -d "tests/fuzz/seed-$short" ] && seeds+=("tests/fuzz/seed-$short")
    echo "== $name: ${SECONDS_EACH}s"
    log=$BUILD/fuzz/$name.log
    "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$BUILD/fuzz/$name-" -print_final_stats=1 \
        "tests/fuzz/corpus-$short" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" | tail -3
    if [ $rc -ne 0 ]; then
        echo "fuzz.sh: $name FAILED (exit $rc), see $log"
        grep -m5 -E 'ERROR|SUMMARY|Test unit written' "$log"
        status=1
    else
        echo "fuzz.sh: $name clean ($(ls "tests/fuzz/corpus-$short" | wc -l) corpus files)"
    fi
done
exit $status
