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
SB=$(realpath "${SB_BIN:-bin/switchboard}")
DATA=$(realpath tests/data)
tmp=$(mktemp -d /tmp/sb-admit-XXXXXX)
run=$tmp/run
sup=
cleanup() {
    if [ -n "$sup" ]; then
        kill "$sup" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$sup" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$sup" 2>/dev/null
    fi
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
# Both ports from one process that holds them while it picks (no duplicate).
read -r port port_up < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
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
sup=$!
python3 tests/router_admit.py "http://127.0.0.1:$port" "$tmp/run.log" "$tmp/tool.pid" "$port_up"
rc=$?
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; tail -30 "$tmp/run.log"; fi
kill "$sup"; for _ in $(seq 1 100); do kill -0 "$sup" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$sup" 2>/dev/null; then echo "FAIL the runtime did not stop on SIGTERM"; rc=1; fi
sup=
if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$tmp/run.log"; then
    echo "FAIL sanitizer report in the runtime's log:"; grep -A30 -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$tmp/run.log" | head -60; rc=1
fi
exit $rc
