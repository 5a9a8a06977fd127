#!/usr/bin/env bash
# it_tools_openai.sh - OpenAI tool calling and logprobs through the gateway,
# driven by the official `openai` client (tests/tools_openai.py): a runtime
# (`switchboard run`) serving two tiny fixtures, whose random weights write
# calls only because the grammar makes them; then docs/router.md's parameter
# table row by row (tests/params_http.py).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init tools-openai
run=$tmp/run
port=$(it_ports 1)
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  api_key_env: SB_TEST_API_KEY
models:
  llama3: { gguf: $DATA/tiny-llama3-Q4_K_M.gguf, threads: 1, ctx: 2048, max_tokens: 1024, parallel: 2 }
  phi3:   { gguf: $DATA/tiny-phi3-Q4_K_M.gguf, threads: 1, ctx: 2048, max_tokens: 1024, parallel: 1 }
pipelines:
  p:
    stages:
      - { name: g, kind: generate, model: llama3, prompt: "Caller: {{input}}", max_tokens: 2 }
YAML
export SB_TEST_API_KEY="test-key-$$"
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
for _ in $(seq 1 200); do
    curl -sf -H "Authorization: Bearer $SB_TEST_API_KEY" "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.05
done
python3 tests/tools_openai.py "http://127.0.0.1:$port" "$SB_TEST_API_KEY"
rc=$?
python3 tests/params_http.py "http://127.0.0.1:$port" "$SB_TEST_API_KEY" llama3 || rc=1
[ $rc -eq 0 ] || { echo "--- run.log (tail)"; tail -30 "$tmp/run.log"; }
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
[ $rc -eq 0 ] && echo "it_tools_openai: ok" || echo "it_tools_openai: FAIL"
exit $rc
