#!/usr/bin/env bash
# The router with real processes and real HTTP: `switchboard run` starts the
# fixture workers and the router; tests/router_http.py then drives the
# gateway with the real `openai` client, curl -N, raw sockets (slow and
# oversized requests) and SIGHUP. Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init router
run=$tmp/run
port=$(it_ports 1)
head -c 4096 /dev/urandom > "$tmp/corrupt.gguf"     # its worker exits 2: the model is down
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  api_key_env: SB_TEST_API_KEY
  drain_ms: 2000
models:
  tiny:   { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 1024, max_queue: 128, max_tokens: 64 }
  tight:  { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_queue: 1, max_tokens: 64 }
  broken: { gguf: $tmp/corrupt.gguf }
cache:
  path: $run/cache.sqlite
pipelines:
  p:
    description: a small hotline on a random-weight fixture
    stages:
      - name: route
        kind: intent
        model: tiny
        system: "Route the call."
        labels:
          billing: { description: "bills", examples: ["the meter reading is off"] }
          complaint: { description: "complaints", examples: ["I want to complain"] }
          human_agent: { description: "a person", examples: ["operator"] }
        min_confidence: 0.2
        fallback: human_agent
      - name: lookup
        kind: tool
        when: { intent: [billing] }
        command: ["/bin/echo", "{\"balance\": 42, \"intent\": \"{{intent}}\"}"]
        timeout_ms: 3000
      - name: answer
        kind: generate
        model: tiny
        prompt: "Intent {{intent}}. Facts: {{stages.lookup.output}}. Caller: {{input}}"
        max_tokens: 6
  raw:
    stages:
      - { name: g, kind: generate, model: tiny, chat: false, prompt: "Q:</s>{{input}}</s>A:", max_tokens: 1 }
  chatp:
    stages:
      - { name: g, kind: generate, model: tiny, prompt: "Caller: {{input}}", max_tokens: 1 }
  slow:
    timeout_ms: 300
    stages:
      - { name: wait, kind: tool, command: ["/bin/sleep", "3"], timeout_ms: 5000 }
  toolcut:
    stages:
      - { name: wait, kind: tool, command: ["/bin/sleep", "3"], timeout_ms: 200 }
      - { name: after, kind: tool, command: ["/bin/echo", "went on"] }
YAML
export SB_TEST_API_KEY="test-key-$$" SB_ROUTER_BODY_TIMEOUT_MS=1000
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
python3 tests/router_http.py "http://127.0.0.1:$port" "$sup" "$tmp/rt.yaml" "$run"
rc=$?
if [ $rc -ne 0 ]; then echo "--- run.log (tail; all of it in /tmp/sb-router-last.log)"; tail -40 "$tmp/run.log"; cp "$tmp/run.log" /tmp/sb-router-last.log; fi
# A clean stop: SIGTERM drains and every process exits.
it_stop "$sup" runtime || rc=1
grep -q "router\[.*stopped" "$tmp/run.log" || { echo "FAIL the router did not log a clean stop"; tail -5 "$tmp/run.log"; rc=1; }
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
