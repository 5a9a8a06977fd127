#!/usr/bin/env bash
# Upstream models: a model entry that points at a remote OpenAI-compatible
# endpoint instead of a GGUF. The upstream here is a second `switchboard run`
# (its own runtime dir, port and API key, a fixture model); the edge is a
# first one whose composer is that upstream. tests/upstream_check.py drives
# both over real HTTP: pipelines and plain completions through the upstream
# (whole and streamed, identical to asking the upstream directly), a wrong
# key, an upstream that accepts and never answers (the stage fails within
# its timeout_ms), an upstream that is stopped (fails at once) - while the
# edge keeps serving its local model. Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init upstream
read -r port_up port_edge port_slow port_closed < <(it_ports 4)

# The upstream: one fixture model behind its own API key.
cat > "$tmp/up.yaml" <<YAML
runtime: { dir: $tmp/up-run, http: 127.0.0.1:$port_up, api_key_env: SB_UP_SERVER_KEY, drain_ms: 2000 }
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 64 }
YAML
# The edge: a local intent model, the upstream as composer, and upstreams
# that are slow, refuse connections or get the wrong key.
cat > "$tmp/edge.yaml" <<YAML
runtime: { dir: $tmp/edge-run, http: 127.0.0.1:$port_edge, drain_ms: 2000 }
models:
  intent:   { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 64 }
  composer: { upstream: "http://127.0.0.1:$port_up/v1", model: tiny, api_key_env: SB_UP_KEY, timeout_ms: 20000 }
  slow:     { upstream: "http://127.0.0.1:$port_slow/v1/", model: tiny, timeout_ms: 1500 }
  slower:   { upstream: "http://127.0.0.1:$port_slow/v1", model: tiny, timeout_ms: 60000 }
  closed:   { upstream: "http://127.0.0.1:$port_closed/v1", timeout_ms: 5000 }
  badkey:   { upstream: "http://127.0.0.1:$port_up/v1", model: tiny, api_key_env: SB_UP_BAD_KEY }
cache:
  path: $tmp/edge-run/cache.sqlite
pipelines:
YAML
for m in composer slow closed; do cat >> "$tmp/edge.yaml" <<YAML
  p_$m:
    stages:
      - name: route
        kind: intent
        model: intent
        labels:
          billing: { description: "bills", examples: ["the meter reading is off"] }
          human_agent: { description: "a person", examples: ["operator"] }
      - name: answer
        kind: generate
        model: $m
        prompt: "Intent {{intent}}. Caller: {{input}}"
        max_tokens: 8
YAML
done
cat >> "$tmp/edge.yaml" <<YAML
  p_score_remote:
    stages:
      - name: route
        kind: intent
        model: composer
        labels: { a: { description: "a" }, b: { description: "b" } }
YAML

export SB_UP_SERVER_KEY="up-key-$$" SB_UP_KEY="up-key-$$" SB_UP_BAD_KEY="wrong-$$"
python3 - "$port_slow" > "$tmp/slow.log" 2>&1 <<'PY' &
# Accepts connections and reads requests, never answers: a hung upstream.
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
def hold(c):
    while c.recv(65536):
        pass
while True:
    c, _ = s.accept()
    threading.Thread(target=hold, args=(c,), daemon=True).start()
PY
it_pids+=($!)
# Listening before anything calls it: on a loaded box the interpreter takes
# a while to start, and a call before bind() is refused, not hung.
for _ in $(seq 1 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port_slow") 2>/dev/null && break; sleep 0.05; done
"$SB" run -c "$tmp/up.yaml" > "$tmp/up.log" 2>&1 &
up_pid=$!; it_pids+=($up_pid)
"$SB" run -c "$tmp/edge.yaml" > "$tmp/edge.log" 2>&1 &
edge_pid=$!; it_pids+=($edge_pid)

python3 tests/upstream_check.py "http://127.0.0.1:$port_edge" "http://127.0.0.1:$port_up" "$up_pid" \
    "$port_slow" "$port_closed"
rc=$?
# Stop the edge while a call to a hung upstream is in flight: the drain
# deadline passes, the router cancels it and must free it (ASan checks).
t_stop=$(date +%s)
curl -s -m 30 "http://127.0.0.1:$port_edge/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model": "slower", "messages": [{"role": "user", "content": "hi"}]}' > "$tmp/inflight.out" 2>&1 &
curl_pid=$!
sleep 0.5
for p in "$edge_pid" "$up_pid"; do
    kill "$p" 2>/dev/null
    for _ in $(seq 1 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
done
if kill -0 "$edge_pid" 2>/dev/null; then echo "FAIL the edge runtime did not stop on SIGTERM"; rc=1; fi
wait "$curl_pid" 2>/dev/null
# (Whether its 503 body reaches the client before the router exits is the
# router's shutdown business; here: the call ended with the drain, no hang.)
# Timing is the subject: the edge drains 2 s and its children are SIGKILLed
# 2 s after that; left open, the call would last the client's 30 s (the
# upstream's timeout is 60 s). 15 s tells them apart on a loaded box.
if [ $(( $(date +%s) - t_stop )) -le 15 ]; then echo "ok   in-flight upstream call ended at shutdown"
else echo "FAIL in-flight upstream call outlived the shutdown"; rc=1; fi
grep -q "router\[.*stopped" "$tmp/edge.log" || { echo "FAIL the edge router did not log a clean stop"; rc=1; }
left=$(find "$tmp/edge-run" "$tmp/up-run" -maxdepth 1 -type s 2>/dev/null | wc -l)
[ "$left" = 0 ] || { echo "FAIL $left socket(s) left after SIGTERM"; rc=1; }
for log in "$tmp/edge.log" "$tmp/up.log"; do it_san_check "$log" "$(basename "$log")" || rc=1; done
if [ $rc -ne 0 ]; then
    echo "--- edge.log (tail)"; tail -30 "$tmp/edge.log"
    echo "--- up.log (tail)"; tail -15 "$tmp/up.log"
fi
exit $rc
