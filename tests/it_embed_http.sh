#!/usr/bin/env bash
# Encoder models behind the runtime: a worker serves the tiny
# random E5 fixture of tests/e5_tiny.py (built here, no download) next to a
# decoder fixture; tests/embed_http.py checks the worker's `embed` method and
# POST /v1/embeddings with the real openai client. Set SB_BIN to test
# another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init embedhttp
run=$tmp/run
port=$(it_ports 1)
it_tiny_e5 || { echo "FAIL convert-e5"; exit 1; }
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  api_key_env: SB_TEST_API_KEY
  drain_ms: 2000
models:
  e5:   { gguf: $tmp/e5.gguf, threads: 1, max_queue: 2 }
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 16 }
pipelines:
  route:
    stages:
      - name: route
        kind: intent
        model: e5
        labels:
          billing:     { description: "bills", examples: ["the meter reading is off"] }
          complaint:   { description: "complaints", examples: ["I want to complain"] }
          human_agent: { description: "a person", examples: ["operator"] }
          tax:         { description: "taxes" }
        examples_file: examples.tsv
        out_of_scope: ["what is the weather like", "tell me a joke"]
        classifier: 1nn         # random weights: only an exact example is sure to be nearest
        fallback: human_agent
  hybrid:
    stages:
      - name: route
        kind: intent
        model: e5
        method: hybrid
        score_model: tiny
        hybrid_margin: 2
        labels:
          billing:   { description: "bills", examples: ["the meter reading is off"] }
          complaint: { description: "complaints", examples: ["I want to complain"] }
  wrongkind:
    stages:
      - { name: route, kind: intent, model: tiny, method: embed, labels: { a: {}, b: {} } }
YAML
printf 'tax\tmy income tax return\ntax\t个税怎么申报\nout_of_scope\tsing me a song\n' > "$tmp/examples.tsv"
export SB_TEST_API_KEY="test-key-$$"
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
it_wait_http "http://127.0.0.1:$port/health" 200 0.05 || { echo "FAIL the runtime did not come up"; tail -20 "$tmp/run.log"; exit 1; }
python3 tests/embed_http.py "http://127.0.0.1:$port" "$run" "$SB" "$tmp/e5.gguf" "$tmp/run.log" "$sup"
rc=$?
[ $rc -eq 0 ] || { echo "--- run.log (tail)"; tail -30 "$tmp/run.log"; }
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
