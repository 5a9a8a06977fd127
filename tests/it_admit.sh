#!/usr/bin/env bash
# Admission and hung-up callers, with real processes and raw sockets:
# `switchboard run` with the tiny fixture at max_queue 4; then
# tests/router_admit.py sends a 200-request burst whose bodies arrive
# together, hangs up on long non-streaming chats, completions and pipelines
# (FIN and RST) - also one whose upstream model never answers - and kills
# the worker under load. Set SB_BIN to test
# another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init admit
run=$tmp/run
read -r port port_up < <(it_ports 2)
# ctx beyond the fixture's 2048 training context: a greedy 4000-token
# answer (no EOS on these prompts) keeps the worker busy for seconds.
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  drain_ms: 1000
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 4096, max_queue: 4, max_tokens: 4000 }
  far:  { upstream: "http://127.0.0.1:$port_up/v1", model: tiny, timeout_ms: 20000 }    # router_admit.py: never answers
pipelines:
  longgen:
    stages:
      - { name: g, kind: generate, model: tiny, prompt: "{{input}}", max_tokens: 4000 }
  sleepy:
    stages:
      - { name: wait, kind: tool, command: ["/bin/sh", "-c", "echo \$\$ > $tmp/tool.pid; exec /bin/sleep 30"], timeout_ms: 60000 }
YAML
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
python3 tests/router_admit.py "http://127.0.0.1:$port" "$tmp/run.log" "$tmp/tool.pid" "$port_up"
rc=$?
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; tail -30 "$tmp/run.log"; fi
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
