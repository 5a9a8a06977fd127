#!/usr/bin/env bash
# it_logprobs.sh - a worker's logprobs on the single-sequence path (--parallel
# 1) equal `switchboard logits` for the same prefixes within 1e-4, on two
# fixtures, at the default kernel level and (on an AVX-512 machine) at AVX2;
# under a grammar they are the masked distribution's
# (tests/logprobs_check.py).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init logprobs
# Each kernel level sums in its own order, and each must keep a token's
# numbers independent of how its sequence was cut into passes: on an
# AVX-512 machine (CI) the AVX2 kernels run a second time (SB_KERNELS=avx2;
# tiny-phi3-Q8_0 differed there by 0.026 when they were not invariant).
for level in $(it_kernel_levels); do
    run=(env)   # the default level: whatever the environment asks for
    [ "$level" = default ] || run=(env SB_KERNELS="$level")
    for m in tiny-llama3-Q4_K_M tiny-phi3-Q8_0; do
        sock="$tmp/$m-$level.sock" log="$tmp/$m-$level.log"
        "${run[@]}" "$SB" worker --model "$DATA/$m.gguf" --socket "$sock" -t 1 --parallel 1 > "$log" 2>&1 &
        it_pids+=($!)
        for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.05; done
        echo "# $m, kernels: $level"
        (cd tests && "${run[@]}" python3 logprobs_check.py "$SB" "$DATA/$m.gguf" "$sock") ||
            { echo "it_logprobs: FAIL ($m, kernels $level)"; exit 1; }
        it_stop "${it_pids[-1]}" "worker $m" && it_san_check "$log" "worker $m" || { echo "it_logprobs: FAIL"; exit 1; }
    done
done
echo "it_logprobs: ok"
