#!/usr/bin/env bash
# Tool stages and HTTP edge cases against a real router: `switchboard router` alone (its one model stays down; the
# pipelines here are tool-only), driven by tests/tools_http.py with threads
# and raw sockets. Covers the per-stage concurrency limit and queue (503
# past it), the scrubbed environment, the process group killed on timeout,
# large input on stdin, duplicate Content-Length, NUL in names and text,
# and JSON nested at the writer's limit. Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init tools
run=$tmp/run
mkdir -m 700 "$run" "$tmp/live"
marker="99$$"                  # `sleep $marker`: the orphan test's processes, and only they
it_cleanup_more() {
    for p in $(pgrep -f "sleep $marker" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
}
port=$(it_ports 1)
# The concurrency probe: count the live calls (a file each) while this one runs.
cat > "$tmp/count.sh" <<'SH'
touch "$1/$$"
ls "$1" | wc -l >> "$1.log"
sleep 0.3
rm -f "$1/$$"
echo done
SH
deep=$(python3 -c 'print("{\"a\":" + "[" * 62 + "\"x\",\"y\"" + "]" * 62 + "}")')
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  api_key_env: SB_TEST_API_KEY
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, max_tokens: 8 }
pipelines:
  count:
    cache: false
    stages:
      - { name: t, kind: tool, command: ["/bin/sh", "$tmp/count.sh", "$tmp/live"], max_concurrent: 4, max_queue: 8 }
  env:
    cache: false
    stages:
      - name: t
        kind: tool
        command: ["/usr/bin/env"]
        env: { SB_TOOL_VAR: "from the stage", LANG: C }
  orphan:
    cache: false
    timeout_ms: 4000
    stages:
      - { name: t, kind: tool, command: ["/bin/sh", "-c", "sleep $marker & sleep $marker; echo never"], timeout_ms: 300 }
  cutoff:
    cache: false
    timeout_ms: 500
    stages:
      - { name: t, kind: tool, command: ["/bin/sh", "-c", "sleep $marker & sleep $marker"], timeout_ms: 10000 }
  big:
    cache: false
    stages:
      - { name: t, kind: tool, command: ["/usr/bin/sha256sum"] }
  bigarg:
    cache: false
    stages:
      - { name: t, kind: tool, command: ["/bin/echo", "{{input}}"] }
  deep:
    cache: false
    stages:
      - { name: t, kind: tool, command: ["/usr/bin/printf", "%s", '$deep'] }
YAML
export SB_TEST_API_KEY="tools-key-$$" SB_TEST_OTHER_SECRET="other-$$"
"$SB" router -c "$tmp/rt.yaml" --no-socket > "$tmp/router.log" 2>&1 &
rt=$!; it_pids+=($rt)
python3 tests/tools_http.py "http://127.0.0.1:$port" "$tmp/live" "$marker"
rc=$?
if [ $rc -ne 0 ]; then echo "--- router.log (tail)"; tail -20 "$tmp/router.log"; fi
it_stop "$rt" router || rc=1
it_san_check "$tmp/router.log" "the router's log" || rc=1
exit $rc
