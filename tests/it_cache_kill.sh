#!/usr/bin/env bash
# The response cache survives kill -9 of the router while it is writing:
# 16 clients send distinct deterministic chat requests through the HTTP
# gateway while the router is killed with SIGKILL at random moments and
# restarted, ROUNDS times. Afterwards PRAGMA integrity_check must be ok and
# every request that was acknowledged (HTTP 200, X-Cache: miss — the router
# stores before it answers) must be a cache hit when asked again.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh          # it_ports, it_wait_http (not it_init: its own cleanup)
SB=$(realpath "${SB_BIN:-bin/switchboard}")
DATA=$(realpath tests/data)
ROUNDS=${ROUNDS:-6}
tmp=$(mktemp -d /tmp/sb-cachekill-XXXXXX)
run=$tmp/run
mkdir -m 0700 "$run"
worker= router=
cleanup() {
    for p in $router $worker; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
port=$(it_ports 1)
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 256, max_queue: 64, max_tokens: 8 }
cache:
  path: $run/cache.sqlite
pipelines: {}
YAML
"$SB" worker --name tiny --model "$DATA/tiny-llama-spm-Q4_K_M.gguf" --socket "$run/tiny.sock" -t 1 -c 256 \
    --max-queue 64 > "$tmp/worker.log" 2>&1 &
worker=$!
start_router() {
    "$SB" router -c "$tmp/rt.yaml" >> "$tmp/router.log" 2>&1 &
    router=$!
    it_wait_http "http://127.0.0.1:$port/health" 100 0.05 && return 0
    echo "FAIL router did not come up"; tail -5 "$tmp/router.log"; exit 1
}
fail=0
: > "$tmp/acked"
for r in $(seq 1 "$ROUNDS"); do
    start_router
    # 16 writers until the router dies under them.
    python3 - "$port" "$r" >> "$tmp/acked" <<'PY' &
import http.client, json, sys, threading
port, rnd = int(sys.argv[1]), sys.argv[2]
lock = threading.Lock()
def client(c):
    for i in range(10000):
        text = f"round {rnd} client {c} question {i}"
        body = json.dumps({"model": "tiny", "temperature": 0, "max_tokens": 2,
                           "messages": [{"role": "user", "content": text}]})
        try:
            h = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            h.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = h.getresponse(); resp.read()
            if resp.status == 200 and resp.getheader("X-Cache") == "miss":
                with lock: print(text, flush=True)
        except Exception:
            return          # the router is gone
ts = [threading.Thread(target=client, args=(c,)) for c in range(16)]
for t in ts: t.start()
for t in ts: t.join()
PY
    clients=$!
    # Kill only once this round has stored something (a loaded machine can
    # take seconds for the first answer), then at a random moment after.
    before=$(wc -l < "$tmp/acked")
    for _ in $(seq 1 200); do [ "$(wc -l < "$tmp/acked")" -gt "$before" ] && break; sleep 0.05; done
    sleep "0.$((1 + RANDOM % 7))"
    kill -9 "$router"; wait "$router" 2>/dev/null
    wait "$clients"
done
acked=$(wc -l < "$tmp/acked")
integrity=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])" "$run/cache.sqlite")
if [ "$integrity" = ok ]; then echo "ok   integrity_check after $ROUNDS kill -9 rounds"; else echo "FAIL integrity_check: $integrity"; fail=1; fi
start_router
missing=$(python3 - "$port" "$tmp/acked" <<'PY'
import http.client, json, sys
port = int(sys.argv[1]); missing = 0
for text in open(sys.argv[2], encoding="utf-8").read().splitlines():
    body = json.dumps({"model": "tiny", "temperature": 0, "max_tokens": 2,
                       "messages": [{"role": "user", "content": text}]})
    h = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = h.getresponse(); resp.read()
    if resp.getheader("X-Cache") != "hit": missing += 1
print(missing)
PY
)
if [ "$acked" -gt 0 ] && [ "$missing" = 0 ]; then
    echo "ok   all $acked acknowledged answers are cache hits after the kills"
else
    echo "FAIL $missing of $acked acknowledged answers missing from the cache"; fail=1
fi
echo "cache kill: $((2 - fail)) passed, $fail failed"
[ $fail -eq 0 ]
