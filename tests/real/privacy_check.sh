#!/usr/bin/env bash
# privacy_check.sh - `make privacy-check`: the leak check at full size and on
# the real models (docs/PRIVACY.md, "The leak test"). Not part of `make
# check`: the real part is minutes of inference on the models `make models`
# installs.
#
#   1. tests/it_privacy_leak.sh with 500 calls: the tiny fixtures, a fake
#      upstream model that records every body, cloud sync to a real
#      PostgreSQL; every byte written and sent searched for every value.
#   2. configs/demo.yaml's hotline pipeline (multilingual-e5-small routing,
#      Qwen2.5-Coder-0.5B extracting and answering) under a pseudonymize
#      policy, derived by tests/real/privacy_real.py, cache synced to a
#      cloud on a throwaway PostgreSQL: SB_PRIVACY_REAL_CALLS (500) calls
#      with made-up identifiers; every reply without a placeholder left or
#      another caller's value, and those that mention the caller's number
#      showing the real one; then every file of the runtime, its log, a
#      pg_dump of the cloud and the cloud's log searched: zero hits.
# Exit 0 when all pass, 1 when one fails, 2 when a model is missing.
set -u
cd "$(dirname "$0")/../.."
. tests/itlib.sh
it_init privacy-check
it_cleanup_more() { it_pg_stop; }
for m in qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf multilingual-e5-small.Q4_0.gguf; do
    [ -f "models/$m" ] || { echo "privacy-check: models/$m missing (make models)"; exit 2; }
done
rc=0
echo "== 1. the leak check, 500 calls, tiny fixtures, fake upstream, cloud sync"
SB_LEAK_CALLS=500 SB_BIN="$SB" bash tests/it_privacy_leak.sh > "$tmp/leak.out" 2>&1 || rc=1
grep -E "^FAIL|calls in|cloud's database|passed, [0-9]+ failed|SKIP" "$tmp/leak.out" | head -40

echo "== 2. the demo's hotline on the real models, ${SB_PRIVACY_REAL_CALLS:-500} calls, cloud sync"
it_pg_start || { echo "FAIL PostgreSQL did not start (tools/deps.sh installs it)"; exit 1; }
printf 'listen: 127.0.0.1:0\ndatabase: "%s"\nadmin_token: "t0k"\npush_threshold: 0\nedges:\n  real: "s3cret"\n' \
    "$PG_DSN" > "$tmp/cloud.yaml"
it_cloud_start "$tmp/cloud.yaml" "$tmp/cloud.log" || { echo "FAIL the cloud did not start"; exit 1; }
echo s3cret > "$tmp/edge.secret"
openssl rand -hex 32 > "$tmp/site.key" && chmod 600 "$tmp/site.key"
port=$(it_ports 1)
python3 tests/real/privacy_real.py config "$PWD" "$tmp/demo.yaml" "$tmp/run" "$port" "$tmp/site.key" \
    "$CLOUD" "$tmp/edge.secret" || { echo "FAIL deriving the config"; exit 1; }
"$SB" run -c "$tmp/demo.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
it_wait_ready "$tmp/run.log" 300 "$sup" || { echo "FAIL the runtime did not start"; tail -20 "$tmp/run.log"; exit 1; }
python3 tests/real/privacy_real.py calls "http://127.0.0.1:$port" "$tmp/values.json" "${SB_PRIVACY_REAL_CALLS:-500}" \
    > "$tmp/real.out" 2>&1 || rc=1
grep -E "^FAIL|calls in|passed, [0-9]+ failed" "$tmp/real.out" | head -40
n0=$(grep -c "cache sync with .* sent" "$tmp/run.log")
for _ in $(seq 60); do [ "$(grep -c "cache sync with .* sent" "$tmp/run.log")" -ge $((n0 + 2)) ] && break; sleep 0.5; done
it_pg_dump > "$tmp/cloud.sql" || rc=1
echo "the cloud's database: $(grep -c "⟨" "$tmp/cloud.sql") line(s) with a placeholder (uploaded entries)"
python3 tests/privacy_leak.py scan "$tmp/values.json" "$tmp/run" "$tmp/run.log" "$tmp/cloud.sql" "$tmp/cloud.log" \
    > "$tmp/scan.out" 2>&1 || rc=1
grep -E "^FAIL|passed, [0-9]+ failed" "$tmp/scan.out"
it_stop "$sup" runtime || rc=1
python3 tests/privacy_leak.py scan "$tmp/values.json" "$tmp/run" "$tmp/run.log" > "$tmp/scan2.out" 2>&1 || rc=1
echo "after the stop: $(tail -1 "$tmp/scan2.out")"
grep -E "^FAIL" "$tmp/scan2.out"
[ "$rc" = 0 ] && echo "privacy-check: ok" || echo "privacy-check: FAIL (outputs in $tmp are removed on exit; rerun to inspect)"
exit $rc
