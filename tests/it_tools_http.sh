#!/usr/bin/env bash
# Tool stages and HTTP edge cases against a real router (issue 15, items 5
# and 6): `switchboard router` alone (its one model stays down; the
# pipelines here are tool-only), driven by tests/tools_http.py with threads
# and raw sockets. Covers the per-stage concurrency limit and queue (503
# past it), the scrubbed environment, the process group killed on timeout,
# large input on stdin, duplicate Content-Length, NUL in names and text,
# and JSON nested at the writer's limit. Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
SB=$(realpath "${SB_BIN:-bin/switchboard}")
DATA=$(realpath tests/data)
tmp=$(mktemp -d /tmp/sb-tools-XXXXXX)
run=$tmp/run
mkdir -m 700 "$run" "$tmp/live"
marker="99$$"                  # `sleep $marker`: the orphan test's processes, and only they
rt=
cleanup() {
    if [ -n "$rt" ]; then
        kill "$rt" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$rt" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$rt" 2>/dev/null
    fi
    for p in $(pgrep -f "sleep $marker" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
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
rt=$!
python3 tests/tools_http.py "http://127.0.0.1:$port" "$tmp/live" "$marker"
rc=$?
if [ $rc -ne 0 ]; then echo "--- router.log (tail)"; tail -20 "$tmp/router.log"; fi
kill "$rt"; for _ in $(seq 1 100); do kill -0 "$rt" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$rt" 2>/dev/null; then echo "FAIL the router did not stop on SIGTERM"; rc=1; fi
rt=
if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$tmp/router.log"; then
    echo "FAIL sanitizer report in the router's log:"; grep -A30 -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$tmp/router.log" | head -60; rc=1
fi
exit $rc
