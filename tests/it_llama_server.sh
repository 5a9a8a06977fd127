#!/usr/bin/env bash
# An `upstream:` model served by a REAL llama-server, the
# one tools/llamacpp.sh builds from the same sdist as the reference: box B
# is `llama-server -np 4` on a fixture, box A is `switchboard run` whose
# model `box_b` points at it (parallel: 4, max_queue: 2). The driver
# (tests/llama_server_check.py) checks through our router a whole and a
# streamed completion (the same text as asking llama-server directly), a
# pipeline whose answer stage runs there, cancellation (a caller who hangs
# up - streamed or not - stops the generation on llama-server within a
# second) and back-pressure (4 calls at llama-server's 4 slots, 2 waiting
# here, the next one 503 + Retry-After at once, llama-server never queueing).
#
# Skips (exit 0, prints SKIP) without the binary: LLAMA_SERVER=PATH, or
# $LLAMACPP_DIR/build-0.3.36{,-noamx}/bin/llama-server (LLAMACPP_DIR defaults to
# build/llamacpp, as in tools/llamacpp.sh). Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
# tools/llamacpp.sh builds into build-V-noamx on CPUs that list AMX.
lsdir=${LLAMACPP_DIR:-build/llamacpp}/build-${LLAMACPP_PY_VERSION:-0.3.36}
LS=${LLAMA_SERVER:-$lsdir/bin/llama-server}
[ -n "${LLAMA_SERVER:-}" ] || [ -x "$LS" ] || LS=$lsdir-noamx/bin/llama-server
if [ ! -x "$LS" ]; then
    echo "SKIP it_llama_server: no llama-server at $LS (build it with LLAMACPP_DIR=... tools/llamacpp.sh, or set LLAMA_SERVER)"
    exit 0
fi
it_init llamasrv
read -r port_ls port_sb < <(it_ports 2)
# --no-repack: llama.cpp's repacked AMX matmul crashes (SIGSEGV in
# ggml_backend_amx_mul_mat) on CPUs that report AMX, as this CI box's do;
# the plain kernels serve the fixture fine. --metrics: requests_processing,
# requests_deferred, tokens_predicted_total for the checks.
"$LS" -m "$DATA/tiny-llama-spm-Q4_K_M.gguf" -np 4 -c 8192 -t 1 --host 127.0.0.1 --port "$port_ls" \
    --no-repack --metrics > "$tmp/llama-server.log" 2>&1 &
it_pids+=($!)
if ! it_wait_http "http://127.0.0.1:$port_ls/health" 300 0.1; then
    echo "FAIL llama-server did not come up"; tail -20 "$tmp/llama-server.log"; exit 1
fi
cat > "$tmp/a.yaml" <<YAML
runtime: { dir: $tmp/run, http: 127.0.0.1:$port_sb, drain_ms: 2000 }
models:
  intent: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 16 }
  box_b:  { upstream: "http://127.0.0.1:$port_ls/v1", model: tiny, parallel: 4, max_queue: 2,
            timeout_ms: 60000, max_tokens: 4000 }
pipelines:
  hot:
    stages:
      - name: route
        kind: intent
        model: intent
        labels:
          billing: { description: "bills", examples: ["the meter reading is off"] }
          human_agent: { description: "a person", examples: ["operator"] }
      - { name: answer, kind: generate, model: box_b, prompt: "Intent {{intent}}. Caller: {{input}}", max_tokens: 12 }
YAML
"$SB" run -c "$tmp/a.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
python3 tests/llama_server_check.py "http://127.0.0.1:$port_sb" "http://127.0.0.1:$port_ls"
rc=$?
if [ $rc -ne 0 ]; then
    cp "$tmp/run.log" /tmp/sb-llamasrv-run.log; cp "$tmp/llama-server.log" /tmp/sb-llamasrv-ls.log
    echo "--- run.log (tail; all of it in /tmp/sb-llamasrv-run.log)"; tail -20 "$tmp/run.log"
    echo "--- llama-server.log (tail)"; tail -20 "$tmp/llama-server.log"
fi
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
