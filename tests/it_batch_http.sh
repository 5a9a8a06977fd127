#!/usr/bin/env bash
# Many callers at once through the gateway, with
# real processes: `switchboard run` on the tiny fixture at max_queue 4, then
# tests/batch_http.py sends 16 concurrent requests (chats, streamed chats,
# pipelines) and checks that each is answered 200 or 503 + Retry-After
# (never a hang, never a 500), that the queue bound holds while /health and
# /v1/models answer within 1 s, that a stage's priority orders the model's
# queue and reaches the worker, and what /metrics shows of the worker's
# batch. A worker that knows --parallel (the batching worker) gets
# parallel: 4; an older one runs without it, and the same checks hold
# with the router's default capacity. Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init batch
run=$tmp/run
port=$(it_ports 1)
par=""
if "$SB" worker --help 2>&1 | grep -q -- "--parallel"; then par=", parallel: 4"; fi
# A greedy answer of 1500 tokens (no EOS on these prompts; ctx beyond the
# fixture's 2048 training context) keeps the worker busy for about half a
# second (plain build), one of 4000 for a second and a half.
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  drain_ms: 1000
  log_level: debug
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 4096, max_queue: 4, max_tokens: 4000$par }
pipelines:
  longp:
    stages:
      - { name: g, kind: generate, model: tiny, prompt: "{{input}}", max_tokens: 1500 }
  low:
    stages:
      - { name: g, kind: generate, model: tiny, prompt: "{{input}}", max_tokens: 4, priority: -5 }
  high:
    stages:
      - { name: g, kind: generate, model: tiny, prompt: "{{input}}", max_tokens: 4, priority: 5 }
YAML
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
python3 tests/batch_http.py "http://127.0.0.1:$port" "$tmp/run.log" "$run/tiny.sock" "${par:+4}"
rc=$?
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; grep -v " debug: " "$tmp/run.log" | tail -30; fi
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
