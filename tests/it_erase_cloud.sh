#!/usr/bin/env bash
# `switchboard privacy erase` across a fleet: two edge runtimes (tiny
# fixtures, pipelines without a privacy policy, so callers' numbers are
# stored as said) syncing every 5 s with a real `switchboard cloud` on a
# throwaway PostgreSQL. A number said at both edges reaches edge B's
# cache, traces, feedback, session store and OTel export, and the cloud's
# database; it is erased at edge A by value, and within one sync interval
# nothing under B's runtime dir, nothing B serves, and nothing in a
# pg_dump of the cloud holds it in any rendering; the cloud's and the
# edges' logs never hold it, nor its hash. Then a call erased at A leaves
# B and the cloud likewise, and a session's erase reaches B. Refused
# tokens and --local-only say what they did. Skipped, saying so, without
# PostgreSQL.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init erasecloud
it_cleanup_more() { it_pg_stop; }
it_pg_start; rc=$?
if [ "$rc" = 2 ]; then echo "it_erase_cloud: SKIP: PostgreSQL is not installed (tools/deps.sh fleet installs it)"; exit 0; fi
[ "$rc" = 0 ] || { echo "FAIL PostgreSQL did not start: $(tail -3 "$tmp/initdb.log" "$tmp/pg/log" 2>/dev/null)"; exit 1; }
INTERVAL=5
cat > "$tmp/cloud.yaml" <<YAML
listen: 127.0.0.1:0
database: "$PG_DSN"
admin_token: "admin-tok-42"
push_threshold: 0
edges:
  a: "secret-a"
  b: "secret-b"
YAML
it_cloud_start "$tmp/cloud.yaml" "$tmp/cloud.log" || { echo "FAIL the cloud did not start: $(cat "$tmp/cloud.log")"; exit 1; }
cat > "$tmp/keys.txt" <<KEYS
app       app-key-0123456789    client
dpo       dpo-key-0123456789    console,admin
KEYS
chmod 600 "$tmp/keys.txt"
read -r port_a port_b < <(it_ports 2)
edge_cfg() {    # NAME PORT
    echo "secret-$1" > "$tmp/secret-$1"
    chmod 600 "$tmp/secret-$1"
    cat <<YAML
runtime: { dir: $tmp/run-$1, http: 127.0.0.1:$2, api_keys_file: $tmp/keys.txt, drain_ms: 2000 }
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
cache:
  path: $tmp/run-$1/cache.sqlite
  sync: { url: "$CLOUD", edge_id: $1, secret_file: $tmp/secret-$1, interval_s: $INTERVAL }
console:
  traces: 100
  show_caller_text: true
  otel_file: $tmp/run-$1/otel.jsonl
  feedback_path: $tmp/run-$1/feedback.sqlite
YAML
    cat "$DATA/erase_pipelines.yaml"
}
edge_cfg a "$port_a" > "$tmp/a.yaml"
edge_cfg b "$port_b" > "$tmp/b.yaml"
for e in a b; do
    "$SB" run -c "$tmp/$e.yaml" > "$tmp/$e.log" 2>&1 &
    it_pids+=($!)
    eval "pid_$e=$!"
done
it_wait_ready "$tmp/a.log" 60 "$pid_a" || { echo "FAIL edge a did not start"; tail -20 "$tmp/a.log"; exit 1; }
it_wait_ready "$tmp/b.log" 60 "$pid_b" || { echo "FAIL edge b did not start"; tail -20 "$tmp/b.log"; exit 1; }
rc=0
SB_ERASE_KEY=dpo-key-0123456789 python3 tests/erase_cloud.py "$SB" "$tmp" "$INTERVAL" \
    "http://127.0.0.1:$port_a" "http://127.0.0.1:$port_b" "$PGRUN" "$PGBIN" || rc=1
it_stop "$pid_a" "edge a" || rc=1
it_stop "$pid_b" "edge b" || rc=1
it_san_check "$tmp/a.log" "edge a" || rc=1
it_san_check "$tmp/b.log" "edge b" || rc=1
it_stop "$CLOUD_PID" cloud || rc=1
it_san_check "$tmp/cloud.log" cloud || rc=1
# After the stop (databases checkpointed and closed): still nothing at B.
for v in 13800138000 "138 0013 8000" "幺三八零零幺三八零零零" 6222020200112233445; do
    if grep -rqaF -- "$v" "$tmp/run-b"; then echo "FAIL after stop: '$v' in $(grep -rlaF -- "$v" "$tmp/run-b")"; rc=1; fi
done
grep -rqaF 13912345678 "$tmp/run-b" || { echo "FAIL after stop: the other caller's number is gone from edge b too"; rc=1; }
[ "$rc" = 0 ] && echo "it_erase_cloud: all passed" || echo "it_erase_cloud: FAILED"
exit $rc
