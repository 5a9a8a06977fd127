#!/usr/bin/env bash
# What idle sessions cost the router in memory: `switchboard run` with the
# tiny fixture model and a pipeline that asks four slots;
# tests/sessions_rss.py makes N sessions of 4 turns each (default 10000)
# and prints the router's RSS before and after. A measurement for
# docs/PERFORMANCE.md, not part of make check (minutes).
#   bash tests/sessions_rss.sh [N]
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init rss
port=$(it_ports 1)
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $tmp/run
  http: 127.0.0.1:$port
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 4 }
cache:
  path: $tmp/run/cache.sqlite
pipelines:
  mem:
    conversation: { ttl_s: 86400 }
    stages:
      - name: extract
        kind: generate
        model: tiny
        json: true
        prompt: "Extract the slots from: {{input}}"
        max_tokens: 4
        ask:
          account: { en: "What is your account number?" }
          name: { en: "And your name, please?" }
          city: { en: "Which city are you calling from?" }
          topic: { en: "What is the call about?" }
      - { name: say, kind: tool, command: ["/bin/echo", "done"] }
YAML
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
it_pids+=($!)
it_wait_ready "$tmp/run.log" 90 "$!" || { echo "FAIL the runtime did not come up"; tail -20 "$tmp/run.log"; exit 1; }
python3 tests/sessions_rss.py "http://127.0.0.1:$port" "$tmp/run" "${1:-10000}"
rc=$?
ls -l "$tmp/run/sessions.sqlite" | awk '{printf "sessions_rss: sessions.sqlite %.1f MB\n", $5 / 1048576}'
exit $rc
