#!/usr/bin/env bash
# Callers' personal data through a running runtime, and nothing of it
# written anywhere. `switchboard run` on the tiny fixtures with the cache,
# traces, feedback and the OTel file export on; its composer is
# tests/fake_openai.py's "echo" model, which records every body it receives.
# The pipelines declare privacy policies: pseudonymize (the upstream
# composer; a tool stage given the real values, `privacy: reveal`, which
# echoes them back; a cached one whose tool echoes the placeholders), mask
# and reject. tests/privacy_leak.py sends the calls (IDs, mobiles,
# cards, e-mail as digits, spaced, Chinese numerals, English words) and
# checks the replies; then every file the runtime wrote (cache + WAL,
# feedback, OTel, the traces and feedback export read back over HTTP, its
# log) and the upstream's record are searched for every value in every
# rendering, while it runs and again after it stopped: zero hits.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init privacy-leak
run=$tmp/run
port=$(it_ports 1)
python3 tests/fake_openai.py "$tmp/up.port" "$tmp/upstream.log" &
it_pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/up.port" ] && break; sleep 0.05; done
port_up=$(cat "$tmp/up.port")
cat > "$tmp/rt.yaml" <<YAML
runtime: { dir: $run, http: 127.0.0.1:$port, drain_ms: 2000 }
models:
  tiny:     { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 16 }
  composer: { upstream: "http://127.0.0.1:$port_up/v1", model: echo, timeout_ms: 20000 }
cache:
  path: $run/cache.sqlite
console:
  traces: 500
  show_caller_text: true
  otel_file: $run/otel.jsonl
pipelines:
  hotline:
    privacy: { detect: [ID, PHONE, TEL, CARD, EMAIL, PASSPORT, PLATE], mode: pseudonymize }
    stages:
      - name: route
        kind: intent
        model: tiny
        labels:
          billing: { description: "bills", examples: ["the meter reading is off"] }
          human_agent: { description: "a person", examples: ["operator"] }
      - { name: lookup, kind: tool, command: ["/bin/cat"], privacy: reveal, timeout_ms: 5000 }
      - { name: answer, kind: generate, model: composer, prompt: "Caller: {{input}} Lookup: {{stages.lookup.output}}" }
  account:
    privacy: { mode: pseudonymize }
    stages:
      - name: route
        kind: intent
        model: tiny
        labels:
          billing: { description: "bills", examples: ["the meter reading is off"] }
          human_agent: { description: "a person", examples: ["operator"] }
      - { name: lookup, kind: tool, command: ["/bin/cat"], privacy: reveal, timeout_ms: 5000 }
  plain:
    privacy: { mode: pseudonymize }
    output: echo
    stages:
      - { name: note, kind: generate, model: tiny, prompt: "Caller: {{input}}", max_tokens: 2 }
      - { name: echo, kind: tool, command: ["/bin/cat"], timeout_ms: 5000 }
  stream:
    privacy: { mode: pseudonymize }
    stages:
      - { name: answer, kind: generate, model: composer, prompt: "Caller: {{input}}" }
  masked:
    privacy: { mode: mask }
    stages:
      - { name: answer, kind: generate, model: composer, prompt: "Caller: {{input}}" }
  strict:
    privacy: { detect: [ID, PHONE], mode: reject }
    stages:
      - { name: answer, kind: generate, model: composer, prompt: "Caller: {{input}}" }
YAML
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
it_wait_ready "$tmp/run.log" 60 "$sup" || { echo "FAIL the runtime did not start"; tail -20 "$tmp/run.log"; exit 1; }
rc=0
python3 tests/privacy_leak.py calls "http://127.0.0.1:$port" "$run" "$tmp/values.json" "${SB_LEAK_CALLS:-100}" || rc=1
if [ -s "$tmp/values.json" ]; then
    python3 tests/privacy_leak.py scan "$tmp/values.json" "$run" "$tmp/run.log" "$tmp/upstream.log" || rc=1
    it_stop "$sup" runtime || rc=1
    # After the stop: the WAL checkpointed into the cache file, the log complete.
    python3 tests/privacy_leak.py scan "$tmp/values.json" "$run" "$tmp/run.log" "$tmp/upstream.log" | tail -1
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; tail -20 "$tmp/run.log"; fi
it_san_check "$tmp/run.log" runtime || rc=1
exit $rc
