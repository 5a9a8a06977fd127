#!/usr/bin/env bash
# it_fuzz_seeds.sh - every fuzz target (tests/fuzz/fuzz_*.c), linked with the
# plain replay driver by `make test`, runs over its seeds
# (tests/fuzz/seed-NAME/, which also hold each past finding's reproducer).
# Under SAN=1 that is ASan + UBSan on every seed. Fuzzing itself is
# `make fuzz` (clang + libFuzzer, minutes per target); this is milliseconds.
set -u
cd "$(dirname "$0")/.."
build=${SB_BUILD:-build}
status=0 n=0
for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    bin=$build/fuzz-replay/$name
    seeds=tests/fuzz/seed-${name#fuzz_}
    [ -d "$seeds" ] || continue
    if [ ! -x "$bin" ]; then echo "it_fuzz_seeds: $bin not built (make test builds it)"; status=1; continue; fi
    if ! out=$("$bin" "$seeds" 2>&1); then
        echo "it_fuzz_seeds: $name FAILED on $seeds:"; echo "$out" | tail -20; status=1
    else
        n=$((n + 1))
    fi
done
echo "it_fuzz_seeds: $n targets replayed their seeds"
exit $status
