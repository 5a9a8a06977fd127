#!/usr/bin/env bash
# `switchboard run` logs one "ready: ..." line once GET /health answers 200
# (docs/operations.md, "Ready"), so a script can wait for that line instead
# of polling. The router learns that workers are up from probes of its own,
# so the moment every child is ready is too early: /health then still
# answered 503 `degraded` for up to a second. Here /health is asked at once
# after the line, with no retry: a line logged before the router has seen
# every worker fails the test.
#   - two workers and the router: the line, then /health 200 straight away;
#   - a model that fails (exit 2): no line, /health stays 503; the model
#     fixed and SIGHUP: the line, then /health 200 straight away (the
#     router has seen the model down, so this one does not depend on which
#     process came up first);
#   - exactly one line per start: not again after a restart or a reload;
#   - --no-router: the line once the workers are up.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init ready
ST="python3 tests/rt_state.py"
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
n_ready() { grep -cE "$it_ready_re" "$1"; }
health() { curl -s -m 10 -o "$tmp/health.json" -w '%{http_code}' "http://127.0.0.1:$1/health"; }

model=$DATA/tiny-llama-spm-Q2_K.gguf
head -c 4096 /dev/urandom > "$tmp/corrupt.gguf"     # not GGUF: its worker exits 2
config() {  # config FILE DIR PORT MODEL...: the models as NAME=GGUF
    local f=$1 dir=$2 port=$3; shift 3
    printf 'runtime: { dir: %s, http: "127.0.0.1:%s", drain_ms: 1000 }\nmodels:\n' "$dir" "$port" > "$f"
    local m
    for m in "$@"; do printf '  %s: { gguf: %s, threads: 1, ctx: 256 }\n' "${m%%=*}" "${m#*=}" >> "$f"; done
}
read -r port port2 port3 < <(it_ports 3)

# ---- two workers and the router
config "$tmp/a.yaml" "$tmp/run" "$port" a="$model" b="$model"
"$SB" run -c "$tmp/a.yaml" 2> "$tmp/a.log" & sup=$!; it_pids+=($sup)
if it_wait_ready "$tmp/a.log" 60 "$sup"; then
    code=$(health "$port")
    [ "$code" = 200 ] && grep -q '"status":"ok"' "$tmp/health.json" &&
        ok "after the ready line GET /health answers 200 at once ($(grep -E "$it_ready_re" "$tmp/a.log" | sed 's/.*info: //'))" ||
        bad "the ready line came before /health said 200: $code $(cat "$tmp/health.json")"
else
    bad "no ready line within 60 s: $(tail -5 "$tmp/a.log")"
fi
it_stop "$sup" supervisor || fail=$((fail + 1))
it_san_check "$tmp/a.log" "the runtime's log" || fail=$((fail + 1))

# ---- a model that fails: no line, /health 503; fixed and reloaded: the line
config "$tmp/f.yaml" "$tmp/frun" "$port2" good="$model" broken="$tmp/corrupt.gguf"
"$SB" run -c "$tmp/f.yaml" 2> "$tmp/f.log" & sup=$!; it_pids+=($sup)
# "runtime up" is logged once nothing is starting any more: ready or failed.
for _ in $(seq 1 3000); do grep -q "runtime up in" "$tmp/f.log" && break; sleep 0.02; done
if grep -q "runtime up in .*: 2 ready, 1 failed" "$tmp/f.log"; then
    # Until the router has seen the good worker up too, as a line would wait for.
    end=$(( $(date +%s) + 60 ))
    until code=$(health "$port2"); grep -q '"good":{"status":"up"' "$tmp/health.json" ||
          [ "$(date +%s)" -ge $end ]; do sleep 0.05; done
    [ "$(n_ready "$tmp/f.log")" = 0 ] && [ "$code" = 503 ] && grep -q '"good":{"status":"up"' "$tmp/health.json" &&
        ok "a failed model: no ready line, /health $code while the other model is up" ||
        bad "a failed model: $(n_ready "$tmp/f.log") ready line(s), /health $code $(cat "$tmp/health.json")"
else
    bad "the broken model did not fail: $(tail -3 "$tmp/f.log")"
fi
# The router has known `broken` as down for a while and looks again only
# every second: a line logged as soon as the retried worker is ready would
# find /health still 503 (unless that probe fell in the same few ms).
cp "$model" "$tmp/fixed.gguf" && mv -f "$tmp/fixed.gguf" "$tmp/corrupt.gguf"
kill -HUP "$sup"
if it_wait_ready "$tmp/f.log" 60 "$sup"; then
    code=$(health "$port2")
    [ "$code" = 200 ] && ok "the failed model fixed and reloaded: the ready line, then /health 200 at once" ||
        bad "the ready line after the reload came before /health said 200: $code $(cat "$tmp/health.json")"
else
    bad "no ready line after the fix and a reload: $(tail -5 "$tmp/f.log")"
fi
# ---- once per start: a worker's restart and another reload do not repeat it
old=$($ST get "$tmp/frun" good pid)
kill -9 "$old"
if $ST wait "$tmp/frun" good ready 60 --not-pid "$old" > /dev/null; then
    kill -HUP "$sup"
    for _ in $(seq 1 3000); do [ "$(grep -c "reload done" "$tmp/f.log")" = 2 ] && break; sleep 0.02; done
    [ "$(n_ready "$tmp/f.log")" = 1 ] && ok "one ready line after a worker's restart and two reloads" ||
        bad "$(n_ready "$tmp/f.log") ready lines: $(grep -E "$it_ready_re" "$tmp/f.log")"
else
    bad "worker good was not restarted after kill -9"
fi
it_stop "$sup" supervisor || fail=$((fail + 1))
it_san_check "$tmp/f.log" "the runtime's log" || fail=$((fail + 1))

# ---- --no-router: no /health; ready once the workers are
config "$tmp/n.yaml" "$tmp/nrun" "$port3" a="$model"
"$SB" run -c "$tmp/n.yaml" --no-router 2> "$tmp/n.log" & sup=$!; it_pids+=($sup)
if it_wait_ready "$tmp/n.log" 60 "$sup" && grep -E "$it_ready_re" "$tmp/n.log" | grep -q "no router" &&
   [ "$($ST get "$tmp/nrun" a state)" = ready ]; then
    ok "--no-router: ready once the worker is"
else
    bad "--no-router: $(tail -3 "$tmp/n.log")"
fi
it_stop "$sup" supervisor || fail=$((fail + 1))

echo "it_ready: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
