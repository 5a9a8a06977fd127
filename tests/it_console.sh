#!/usr/bin/env bash
# The operator's view with real processes: `switchboard run` on the fixture
# model; tests/console_api.py checks the histograms against the client's
# timings, call ids, traces and feedback over HTTP; tests/console_browser.py
# opens GET /console in headless Chromium, makes calls and checks that they
# show within 1 s, that a trace opens and that a mark is stored, and saves
# screenshots to $SB_BUILD (default build/). Then the feedback round trip:
# `switchboard feedback export` and tools/eval_routing.py reading it.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init console
run=$tmp/run
out=$(realpath "${SB_BUILD:-build}")
mkdir -p "$out"
port=$(it_ports 1)
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
          human_agent: { description: "a person", examples: ["operator"] }
        min_confidence: 0.2
        fallback: human_agent
      - name: lookup
        kind: tool
        when: { intent: [billing] }
        command: ["/bin/echo", "{\"balance\": 42}"]
        timeout_ms: 3000
      - name: answer
        kind: generate
        model: tiny
        prompt: "Intent {{intent}}. Facts: {{stages.lookup.output}}. Caller: {{input}}"
        max_tokens: 6
YAML
export SB_TEST_API_KEY=console-test-key
"$SB" run -c "$tmp/c.yaml" > "$tmp/run.log" 2>&1 &
it_pids+=($!)
fail=0
if ! it_wait_http "http://127.0.0.1:$port/health" 200 0.05; then
    echo "FAIL the runtime did not come up"; tail -20 "$tmp/run.log"; exit 1
fi
url=http://127.0.0.1:$port
python3 tests/console_api.py "$url" "$SB_TEST_API_KEY" p || fail=1
if command -v chromium > /dev/null; then
    python3 tests/console_browser.py "$url" "$SB_TEST_API_KEY" p "$out" || fail=1
    [ -s "$out/console.png" ] && echo "ok   screenshots: $out/console.png $out/console-trace.png"
else
    echo "FAIL chromium is not installed (tools/deps.sh installs it)"; fail=1
fi
# Feedback round trip: the marks, exported, are what route eval reads.
"$SB" feedback export -c "$tmp/c.yaml" > "$tmp/fb.tsv" || { echo "FAIL feedback export"; fail=1; }
curl -sf -H "Authorization: Bearer $SB_TEST_API_KEY" "$url/v1/feedback.tsv" > "$tmp/fb_http.tsv"
if [ -s "$tmp/fb.tsv" ] && cmp -s "$tmp/fb.tsv" "$tmp/fb_http.tsv" && grep -q "^billing	my secret words 4711$" "$tmp/fb.tsv"; then
    echo "ok   switchboard feedback export == GET /v1/feedback.tsv, label<TAB>utterance"
else
    echo "FAIL feedback export:"; cat "$tmp/fb.tsv"; fail=1
fi
[ "$(stat -c %a "$run/feedback.sqlite")" = 600 ] && echo "ok   feedback.sqlite is 0600" || { echo "FAIL feedback.sqlite mode"; fail=1; }
if python3 tools/eval_routing.py "$url" "$tmp/fb.tsv" --pipeline p --key "$SB_TEST_API_KEY" > "$tmp/eval.out" 2>&1 &&
   grep -qi "accuracy" "$tmp/eval.out"; then
    echo "ok   tools/eval_routing.py reads the export ($(grep -ci . "$tmp/fb.tsv") examples)"
else
    echo "FAIL eval_routing on the export:"; tail -5 "$tmp/eval.out"; fail=1
fi
it_stop "${it_pids[0]}" runtime || fail=1
it_san_check "$tmp/run.log" "the runtime's log" || fail=1
# A console client that stops reading (tests/console_slow.py): a runtime
# that shows the caller's text, so 64 KB calls overflow the socket buffers.
port2=$(it_ports 1)
sed -e "s|127.0.0.1:$port|127.0.0.1:$port2|" -e "s|^  traces: 100|  traces: 100\n  show_caller_text: true|" \
    -e "s|dir: $run|dir: $run.slow|" -e "s|path: $run/cache.sqlite|path: $run.slow/cache.sqlite|" "$tmp/c.yaml" > "$tmp/c2.yaml"
"$SB" run -c "$tmp/c2.yaml" > "$tmp/run2.log" 2>&1 &
pid2=$!
it_pids+=($pid2)
if it_wait_http "http://127.0.0.1:$port2/health" 200 0.05; then
    python3 tests/console_slow.py "http://127.0.0.1:$port2" "$SB_TEST_API_KEY" p || fail=1
else
    echo "FAIL the second runtime did not come up"; tail -20 "$tmp/run2.log"; fail=1
fi
it_stop "$pid2" runtime || fail=1
it_san_check "$tmp/run2.log" "the second runtime's log" || fail=1
[ $fail = 0 ] && echo "it_console: passed" || { echo "it_console: FAILED"; tail -20 "$tmp/run.log"; }
exit $fail
