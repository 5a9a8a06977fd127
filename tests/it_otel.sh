#!/usr/bin/env bash
# console.otel_file with real processes: `switchboard run` on the fixture
# model writes every finished call as one OTLP/JSON line; tests/otel_check.py
# makes calls (a hit, a caller's ids, a stream, a failing tool, a timeout)
# and checks each line against the OTLP JSON encoding and the call's trace.
# Then: SIGHUP reopens the file (rotation by rename); a full disk
# (/dev/full) and an unwritable path never fail a call, are logged once and
# counted in /metrics.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init otel
run=$tmp/run
port=$(it_ports 1)
url=http://127.0.0.1:$port
config() {     # $1: the otel_file
    cat > "$tmp/c.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  api_key_env: SB_TEST_API_KEY
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 1024, max_queue: 128, max_tokens: 64 }
cache:
  path: $run/cache.sqlite
console:
  traces: 100
  otel_file: $1
pipelines:
  p:
    stages:
      - name: route
        kind: intent
        model: tiny
        system: "Route the call."
        labels:
          billing: { description: "bills", examples: ["the meter reading is off"] }
          complaint: { description: "complaints", examples: ["I want to complain"] }
        min_confidence: 0.2
        fallback: complaint
      - name: lookup
        kind: tool
        when: { intent: [billing] }
        command: ["/bin/echo", "{\"balance\": 42}"]
        timeout_ms: 3000
      - name: answer
        kind: generate
        model: tiny
        prompt: "Intent {{intent}}. Caller: {{input}}"
        max_tokens: 6
  tools:
    stages:
      - name: route
        kind: intent
        model: tiny
        labels: { billing: { description: "bills" }, complaint: { description: "complaints" } }
      - name: lookup
        kind: tool
        command: ["/bin/false"]
        timeout_ms: 3000
  slow:
    timeout_ms: 300
    stages:
      - name: wait
        kind: tool
        command: ["/bin/sleep", "5"]
        timeout_ms: 10000
YAML
}
config "$tmp/spans.jsonl"
export SB_TEST_API_KEY=otel-test-key
"$SB" run -c "$tmp/c.yaml" > "$tmp/run.log" 2>&1 &
sup=$!
it_pids+=($sup)
fail=0
if ! it_wait_http "$url/health" 200 0.05; then
    echo "FAIL the runtime did not come up"; tail -20 "$tmp/run.log"; exit 1
fi
python3 tests/otel_check.py "$url" "$SB_TEST_API_KEY" "$tmp/spans.jsonl" || fail=1
[ "$(stat -c %a "$tmp/spans.jsonl")" = 600 ] && echo "ok   the file is created 0600" || { echo "FAIL file mode"; fail=1; }

call() {       # prints the HTTP status of one pipeline call
    curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $SB_TEST_API_KEY" \
         -H 'Cache-Control: no-cache' -d '{"input": "hello there"}' "$url/v1/pipelines/p"
}
metric() {     # the otel counter for result $1
    curl -s "$url/metrics" | sed -n "s/^switchboard_otel_lines_total{result=\"$1\"} //p"
}
reload() {     # rewrite the config for otel_file $1, SIGHUP, wait for the router's reload
    local n
    n=$(grep -c "reloaded " "$tmp/run.log")
    config "$1"
    kill -HUP "$sup"
    for _ in $(seq 1 100); do [ "$(grep -c "reloaded " "$tmp/run.log")" -gt "$n" ] && return 0; sleep 0.05; done
    echo "FAIL the router did not reload"; fail=1
}

# Rotation by rename: the old file keeps what was written, SIGHUP starts a new one.
before=$(python3 tests/otel_check.py "$tmp/spans.jsonl" lines)
mv "$tmp/spans.jsonl" "$tmp/spans.jsonl.1"
reload "$tmp/spans.jsonl"
st=$(call)
if [ "$st" = 200 ] && [ "$(python3 tests/otel_check.py "$tmp/spans.jsonl" lines)" = 1 ] &&
   [ "$(python3 tests/otel_check.py "$tmp/spans.jsonl.1" lines)" = "$before" ]; then
    echo "ok   SIGHUP reopens otel_file: the next call goes to the new file"
else
    echo "FAIL rotation: status $st, new file $(wc -l < "$tmp/spans.jsonl" 2>&1)"; fail=1
fi
written=$(metric written)
[ "$written" = $((before + 1)) ] && echo "ok   /metrics: $written lines written" || { echo "FAIL written=$written"; fail=1; }

# A full disk and an unwritable path: the calls succeed, one log line each.
for target in /dev/full "$tmp/no/such/dir/spans.jsonl"; do
    f0=$(metric failed)
    reload "$target"
    sts="$(call) $(call) $(call)"
    f1=$(metric failed)
    logs=$(grep -c "otel_file '$target'" "$tmp/run.log")
    if [ "$sts" = "200 200 200" ] && [ $((f1 - f0)) = 3 ] && [ "$logs" = 1 ]; then
        echo "ok   otel_file $target: calls answer 200, 3 lines counted as failed, logged once"
    else
        echo "FAIL otel_file $target: statuses $sts, failed $f0 -> $f1, $logs log lines"; fail=1
    fi
done
grep "otel_file" "$tmp/run.log" | sed 's/^/     log: /'
it_stop "$sup" runtime || fail=1
it_san_check "$tmp/run.log" "the runtime's log" || fail=1
[ $fail = 0 ] && echo "it_otel: passed" || { echo "it_otel: FAILED"; tail -20 "$tmp/run.log"; }
exit $fail
