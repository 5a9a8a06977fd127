#!/usr/bin/env bash
# Callers' personal data through a running runtime, and nothing of it
# written anywhere. `switchboard run` on the tiny fixtures with the cache,
# traces, feedback and the OTel file export on; its composer is
# tests/fake_openai.py's "echo" model, which records every body it receives.
# The pipelines declare privacy policies: pseudonymize (the upstream
# composer; a tool stage given the real values, `privacy: reveal`, which
# echoes them back; a cached one whose tool echoes the placeholders), mask
# and reject, and a conversation (its session store). The cache syncs
# every 5 s with a `switchboard cloud` on a throwaway PostgreSQL (skipped,
# saying so, without PostgreSQL). tests/privacy_leak.py sends the calls
# (IDs, mobiles, cards, e-mail as digits, spaced, Chinese numerals, English
# words; SB_LEAK_CALLS, default 100, `make privacy-check` 500) and checks
# the replies; then every file the runtime wrote (cache + WAL, sessions +
# WAL, feedback, OTel, the traces and feedback export read back over HTTP,
# its log), a pg_dump of the cloud's database, the cloud's log and the
# upstream's record are searched for every value in every rendering, while
# it runs and again after it stopped: zero hits.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init privacy-leak
it_cleanup_more() { it_pg_stop; }
run=$tmp/run
port=$(it_ports 1)
# The cloud tier: what the edge uploads must hold no value either.
sync_cfg="" cloud_paths=()
it_pg_start; pg_rc=$?
if [ "$pg_rc" = 2 ]; then
    echo "it_privacy_leak: SKIP the cloud part: PostgreSQL is not installed (tools/deps.sh installs it)"
elif [ "$pg_rc" != 0 ]; then
    echo "FAIL PostgreSQL did not start: $(tail -3 "$tmp/initdb.log" "$tmp/pg/log" 2>/dev/null)"; exit 1
else
    printf 'listen: 127.0.0.1:0\ndatabase: "%s"\nadmin_token: "t0k"\npush_threshold: 0\nedges:\n  leak: "s3cret"\n' \
        "$PG_DSN" > "$tmp/cloud.yaml"
    it_cloud_start "$tmp/cloud.yaml" "$tmp/cloud.log" || { echo "FAIL the cloud did not start: $(cat "$tmp/cloud.log")"; exit 1; }
    echo s3cret > "$tmp/edge.secret"
    sync_cfg="  sync: { url: \"$CLOUD\", edge_id: leak, secret_file: $tmp/edge.secret, interval_s: 5 }"
    cloud_paths=("$tmp/cloud.sql" "$tmp/cloud.log")
fi
python3 tests/fake_openai.py "$tmp/up.port" "$tmp/upstream.log" &
it_pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/up.port" ] && break; sleep 0.05; done
port_up=$(cat "$tmp/up.port")
openssl rand -hex 32 > "$tmp/site.key" && chmod 600 "$tmp/site.key"
cat > "$tmp/rt.yaml" <<YAML
runtime: { dir: $run, http: 127.0.0.1:$port, drain_ms: 2000, secret_key_file: $tmp/site.key }
models:
  tiny:     { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 16 }
  composer: { upstream: "http://127.0.0.1:$port_up/v1", model: echo, timeout_ms: 20000 }
cache:
  path: $run/cache.sqlite
$sync_cfg
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
  conv:
    privacy: { mode: pseudonymize }
    conversation: { ttl_s: 600 }
    stages:
      - { name: echo, kind: tool, command: ["/bin/cat"], timeout_ms: 5000 }
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
# Two syncs after the last call (the cursor and the outbox settled), then
# the cloud's whole database as pg_dump writes it.
cloud_dump() {
    [ -n "$sync_cfg" ] || return 0
    local n0 end
    n0=$(grep -c "cache sync with .* sent" "$tmp/run.log")
    end=$(( $(date +%s) + 30 ))
    while [ "$(grep -c "cache sync with .* sent" "$tmp/run.log")" -lt $((n0 + 2)) ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.5; done
    it_pg_dump > "$tmp/cloud.sql" || { echo "FAIL pg_dump"; return 1; }
    # The scan is only worth something if the entries got there.
    local n
    n=$(grep -c "⟨PHONE_1⟩" "$tmp/cloud.sql")
    if [ "$n" -lt 3 ]; then echo "FAIL the cloud holds $n entries with a placeholder: the sync did not carry them"; return 1; fi
    echo "ok   the cloud's database holds $n lines of uploaded entries (placeholders, the scan below finds no value)"
}
if [ -s "$tmp/values.json" ]; then
    cloud_dump || rc=1
    python3 tests/privacy_leak.py scan "$tmp/values.json" "$run" "$tmp/run.log" "$tmp/upstream.log" "${cloud_paths[@]}" || rc=1
    it_stop "$sup" runtime || rc=1
    # After the stop: the WAL checkpointed into the cache file, the log complete.
    python3 tests/privacy_leak.py scan "$tmp/values.json" "$run" "$tmp/run.log" "$tmp/upstream.log" "${cloud_paths[@]}" | tail -1
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; tail -20 "$tmp/run.log"; fi
it_san_check "$tmp/run.log" runtime || rc=1
if [ -n "$sync_cfg" ]; then it_stop "$CLOUD_PID" cloud || rc=1; it_san_check "$tmp/cloud.log" cloud || rc=1; fi
exit $rc
