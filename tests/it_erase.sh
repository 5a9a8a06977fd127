#!/usr/bin/env bash
# `switchboard privacy erase` against a real runtime on the tiny fixtures,
# with pipelines WITHOUT a privacy policy (so callers' numbers are stored
# as said): a value put into a session's transcript, call traces, cache
# entries and a feedback mark - as digits, spaced, and in Chinese numerals -
# is erased by value, then a session by its id and a call by its id. After
# each, every byte under the runtime dir (databases and their WALs) and
# what the router still serves are searched for every rendering: zero hits,
# while another caller's number stays. The erase needs the admin role, and
# the log names the key, never the value. The OTel export is in the runtime
# dir, so it is searched too.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init erase
run=$tmp/run
port=$(it_ports 1)
keys=$tmp/keys.txt
cat > "$keys" <<KEYS
app       app-key-0123456789    client
ops       ops-key-0123456789    console
dpo       dpo-key-0123456789    console,admin
KEYS
chmod 600 "$keys"
{ cat <<YAML
runtime: { dir: $run, http: 127.0.0.1:$port, api_keys_file: $keys, drain_ms: 2000 }
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
cache:
  path: $run/cache.sqlite
console:
  traces: 100
  show_caller_text: true
  otel_file: $run/otel.jsonl
YAML
  cat "$DATA/erase_pipelines.yaml"; } > "$tmp/rt.yaml"
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
it_wait_ready "$tmp/run.log" 60 "$sup" || { echo "FAIL the runtime did not start"; tail -20 "$tmp/run.log"; exit 1; }
rc=0
SB_ERASE_KEY=dpo-key-0123456789 SB_OPS_KEY=ops-key-0123456789 \
    python3 tests/erase_http.py "http://127.0.0.1:$port" "$run" "$SB" "$tmp/rt.yaml" "$tmp/run.log" || rc=1
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" runtime || rc=1
# After the stop (the databases checkpointed and closed): still nothing.
for v in 13800138000 "138 0013 8000" "幺三八零零幺三八零零零" 13700001111 6222020200112233445; do
    if grep -rqaF -- "$v" "$run"; then echo "FAIL after stop: '$v' in $(grep -rlaF -- "$v" "$run")"; rc=1; fi
done
grep -rqaF 13912345678 "$run" || { echo "FAIL after stop: the other caller's number is gone too"; rc=1; }
[ "$rc" = 0 ] && echo "it_erase: all passed" || echo "it_erase: FAILED"
exit $rc
