#!/usr/bin/env bash
# An encoder's token caps and hang-ups inside one long text: a random model
# of multilingual-e5-small's shape (tests/e5_tiny.py make_heavy_model, as
# slow per token as the real one, written here, no download) behind the
# runtime; tests/embed_limits.py checks that a 1 MB input is refused at once
# with 400 input_too_long (/v1/embeddings and a pipeline's intent stage),
# that a request over the per-request cap is too, and that a caller who
# hangs up in the middle of a text just under the cap frees the encoder
# within a second. Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init embedlim
run=$tmp/run
port=$(it_ports 1)
python3 -c 'import sys; sys.path.insert(0, "tests"); import e5_tiny; e5_tiny.make_heavy_model(sys.argv[1])' "$tmp/heavy.e5s1"
"$SB" convert-e5 "$tmp/heavy.e5s1" "$tmp/e5.gguf" > /dev/null || { echo "FAIL convert-e5"; exit 1; }
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  api_key_env: SB_TEST_API_KEY
  drain_ms: 2000
models:
  e5: { gguf: $tmp/e5.gguf, threads: 1 }
pipelines:
  route:
    stages:
      - name: route
        kind: intent
        model: e5
        labels:
          billing: { description: "bills", examples: ["the meter reading is off"] }
          other:   { description: "anything else", examples: ["hello world"] }
YAML
export SB_TEST_API_KEY="test-key-$$"
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
it_wait_http "http://127.0.0.1:$port/health" 200 0.05 || { echo "FAIL the runtime did not come up"; tail -20 "$tmp/run.log"; exit 1; }
python3 tests/embed_limits.py "http://127.0.0.1:$port"
rc=$?
[ $rc -eq 0 ] || { echo "--- run.log (tail)"; tail -30 "$tmp/run.log"; }
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
