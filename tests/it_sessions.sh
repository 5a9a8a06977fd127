#!/usr/bin/env bash
# Named API keys and conversations with real processes: `switchboard run`
# starts a tiny fixture worker and the router; tests/sessions_http.py
# drives the gateway over HTTP (roles, sessions, isolation, slots asked
# for, kill -9 of the router mid-conversation - also while a slot is
# awaited -, expiry, SIGHUP reloading the keys file).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init sessions
run=$tmp/run
port=$(it_ports 1)
keys=$tmp/keys.txt
cat > "$keys" <<KEYS
# name key roles
app   app-key-0123456789    client
other other-key-0123456789  client
ops   ops-key-0123456789    console
KEYS
chmod 600 "$keys"
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  api_key_env: SB_TEST_API_KEY
  api_keys_file: $keys
  drain_ms: 2000
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
cache:
  path: $run/cache.sqlite
sessions:
  sweep_s: 1
pipelines:
  conv:
    conversation: { ttl_s: 600, max_turns: 4, max_bytes: 4096 }
    stages:
      - name: route
        kind: intent
        model: tiny
        labels:
          billing: { description: "bills" }
          complaint: { description: "complaints" }
      - { name: say, kind: tool, command: ["/bin/echo", "{{intent}}: you said {{input}}"] }
  ask:
    conversation: { ttl_s: 600 }
    stages:
      - name: extract
        kind: generate
        model: tiny
        json: true
        prompt: "Extract the account and the name from: {{input}}"
        max_tokens: 4
        ask:
          account: { zh: "请问您的账号是多少？", en: "What is your account number?" }
          name: { en: "And your name, please?" }
      - { name: say, kind: tool, command: ["/bin/echo", "account {{stages.extract.json.account}} for {{stages.extract.json.name}}"] }
  many:
    conversation: { ttl_s: 600, max_turns: 1000 }
    stages:
      - { name: say, kind: tool, command: ["/bin/echo", "heard {{input}}"] }
  brief:
    conversation: { ttl_s: 2 }
    stages:
      - { name: say, kind: tool, command: ["/bin/echo", "you said {{input}}"] }
  plain:
    stages:
      - { name: say, kind: tool, command: ["/bin/echo", "you said {{input}}"] }
YAML
export SB_TEST_API_KEY="legacy-key-$$"
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
rc=0
if ! it_wait_ready "$tmp/run.log" 90 "$sup"; then
    echo "FAIL the runtime did not come up"; tail -30 "$tmp/run.log"; exit 1
fi
python3 tests/sessions_http.py "http://127.0.0.1:$port" "$run" "$keys" || rc=1
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; tail -40 "$tmp/run.log"; fi
grep -q "reload rejected.*api_keys_file.*mode 0644" "$tmp/run.log" ||
    { echo "FAIL the refused key file is not named in the log"; rc=1; }
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
