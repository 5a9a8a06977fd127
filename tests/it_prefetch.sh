#!/usr/bin/env bash
# it_prefetch.sh - every kernel file that asks for the weights ahead
# (kq_prefetch_ahead, worker/kernels/kq_x86.h) still has prefetch
# instructions in its object. GCC 12 once deleted all of them from three
# files without a warning (its IPA pass found the prefetch-only helper
# "const", and a call to a const void function is dead code): batched
# decode of the 0.5B then ran at 161 t/s instead of 246. Nothing else
# notices: the numbers a kernel computes do not change.
set -u
cd "$(dirname "$0")/.."
build=${SB_BUILD:-build}
fail() { echo "it_prefetch: FAIL: $*"; exit 1; }
command -v objdump >/dev/null || fail "objdump not found (binutils, which gcc depends on)"
files=$(grep -l 'kq_prefetch_ahead(' worker/kernels/*.c)
[ -n "$files" ] || fail "no kernel file calls kq_prefetch_ahead"
n=0
for src in $files; do
    obj="$build/${src%.c}.o"
    [ -f "$obj" ] || fail "$obj not built"
    count=$(objdump -d "$obj" | grep -c 'prefetch')
    [ "$count" -gt 0 ] || fail "$src calls kq_prefetch_ahead, but $obj holds no prefetch instruction"
    echo "it_prefetch: $src: $count prefetch instructions"
    n=$((n + 1))
done
echo "it_prefetch: OK ($n files)"
