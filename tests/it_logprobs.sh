#!/usr/bin/env bash
# it_logprobs.sh - a worker's logprobs on the single-sequence path (--parallel
# 1) equal `switchboard logits` for the same prefixes within 1e-4, on two
# fixtures; under a grammar they are the masked distribution's
# (tests/logprobs_check.py).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init logprobs
for m in tiny-llama3-Q4_K_M tiny-phi3-Q8_0; do
    "$SB" worker --model "$DATA/$m.gguf" --socket "$tmp/$m.sock" -t 1 --parallel 1 > "$tmp/$m.log" 2>&1 &
    it_pids+=($!)
    for _ in $(seq 1 100); do [ -S "$tmp/$m.sock" ] && break; sleep 0.05; done
    (cd tests && python3 logprobs_check.py "$SB" "$DATA/$m.gguf" "$tmp/$m.sock") ||
        { echo "it_logprobs: FAIL ($m)"; exit 1; }
    it_stop "${it_pids[-1]}" "worker $m" && it_san_check "$tmp/$m.log" "worker $m" || { echo "it_logprobs: FAIL"; exit 1; }
done
echo "it_logprobs: ok"
