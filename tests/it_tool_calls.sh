#!/usr/bin/env bash
# it_tool_calls.sh - tool calls forced by the grammar on real workers serving
# the three tiny fixtures (random weights, so only the grammar makes their
# answers calls): required / named / single / auto / none, streamed and not,
# arguments validated with jsonschema against each function's parameters,
# and the refusals (tests/tool_calls_check.py).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init tools
socks=()
for m in tiny-llama-spm-Q4_0 tiny-llama3-Q4_K_M tiny-phi3-Q4_K_M; do
    "$SB" worker --model "$DATA/$m.gguf" --socket "$tmp/$m.sock" -t 1 --parallel 2 > "$tmp/$m.log" 2>&1 &
    it_pids+=($!)
    socks+=("$tmp/$m.sock")
done
for s in "${socks[@]}"; do
    for _ in $(seq 1 100); do [ -S "$s" ] && break; sleep 0.05; done
    [ -S "$s" ] || { echo "it_tool_calls: FAIL: no worker at $s: $(cat "${s%.sock}.log")"; exit 1; }
done
rc=0
# One checker per worker, at once: each worker computes on its own thread
# (-t 1), so the three take the wall time of the slowest, not their sum.
checkers=()
for s in "${socks[@]}"; do
    (cd tests && python3 tool_calls_check.py "$s") > "$s.check" 2>&1 &
    checkers+=($!)
done
for i in "${!checkers[@]}"; do
    wait "${checkers[$i]}" || rc=1
    cat "${socks[$i]}.check"
done
# Under SAN=1 a worker's leaks and UBSan reports are in its log once it exits.
for p in "${it_pids[@]}"; do it_stop "$p" worker || rc=1; done
for m in tiny-llama-spm-Q4_0 tiny-llama3-Q4_K_M tiny-phi3-Q4_K_M; do it_san_check "$tmp/$m.log" "worker $m" || rc=1; done
[ $rc -eq 0 ] && echo "it_tool_calls: ok" || echo "it_tool_calls: FAIL"
exit $rc
