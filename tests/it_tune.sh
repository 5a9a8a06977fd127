#!/usr/bin/env bash
# switchboard tune and the profile the engine reads (docs/KERNELS.md, "Tuning"):
#  1. `tune --budget 1` writes a profile for this CPU (no models: machine
#     figures, built-in choices), to --out or to $XDG_CACHE_HOME/switchboard/;
#  2. a profile with a non-default variant for every quant type this level
#     has twins of, and a non-default split (one stream, one row a dot,
#     where the built-in reads four runs through vec_dot4), is applied (one log line) and
#     every fixture's `switchboard logits --exact` output (forced tokens
#     through the prompt path, then greedy decode steps; every float with all
#     its digits) is byte-identical to the untuned run's (SB_TUNE_PROFILE=off),
#     while the same comparison does see the AVX2 kernels' other float order
#     (so it can fail);
#  3. a foreign, stale, corrupt or unknown-variant profile is ignored with
#     exactly one log line naming the file and the reason, and the output is
#     the untuned one; with no profile at the default path nothing is logged.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init tune
pass=0; fail=0
ok() { echo "ok: $1"; pass=$((pass+1)); }
bad() { echo "FAIL: $1"; fail=$((fail+1)); }

# 1. the machine profile
if XDG_CACHE_HOME="$tmp/xdg" SB_TUNE_PROFILE= "$SB" tune -t 2 --budget 1 > "$tmp/tune.out" 2> "$tmp/tune.err"; then
    prof=$(ls "$tmp"/xdg/switchboard/tune-*.json 2>/dev/null | head -1)
    if [ -n "$prof" ] && python3 - "$prof" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "switchboard-tune/1", p
for k in ("vendor", "family", "model", "stepping", "microcode", "flags"): assert k in p["cpu"], k
m = p["measured"]
assert m["bandwidth_gbs_1"] > 0 and m["bandwidth_gbs_t"] > 0, m
assert m["gemm_family"] in ("amx", "avx512_vnni", "avx2", "scalar"), m
assert m["peak_macs_per_core"].get(m["gemm_family"]) or m["gemm_family"] == "scalar", m
# the gemm family on both threads at once: more than none, at most two cores' worth (with slack)
t = m["gemm_peak_macs_all_threads"]
assert m["gemm_family"] == "scalar" or 0 < t < 2.5 * m["peak_macs_per_core"][m["gemm_family"]], m
assert p["plan"]["split"] == {"rows_per_task": 16, "tasks_per_thread": 24, "gemm_rows": 256, "streams": 4, "dot_rows": 4, "task_kib": 256}, p["plan"]
assert p["plan"]["dot"] == {}, p["plan"]
EOF
    then ok "tune wrote $(basename "$prof") under XDG_CACHE_HOME"; else bad "tune's profile: $(cat "$tmp/tune.err")"; fi
else
    bad "tune exited $?: $(head -c 400 "$tmp/tune.err")"; prof=""
fi
"$SB" tune --help | grep -q "usage: switchboard tune" && ok "tune --help" || bad "tune --help"
"$SB" tune --budget 0 2> /dev/null; [ $? -eq 2 ] && ok "bad --budget exits 2" || bad "bad --budget"
[ -n "$prof" ] || { echo "tune: $pass passed, $fail failed"; exit 1; }

# 2. a tuned profile: every twin this level has, other split
python3 - "$prof" "$tmp/tuned.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
lvl = p["level"]
types = {"avx512": ["Q4_0", "Q5_0", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"],
         "avx2": ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]}.get(lvl, [])
twins = ["-pf0", "-pf4k", "-pf16k", "-pf32k"]
p["plan"]["dot"] = {t: lvl + twins[i % 4] for i, t in enumerate(types)}
p["plan"]["split"] = {"rows_per_task": 4, "tasks_per_thread": 8, "gemm_rows": 128, "streams": 1, "dot_rows": 1, "task_kib": 0}
json.dump(p, open(sys.argv[2], "w"))
EOF
runs=0; seen_avx2=0
for ref in tests/data/golden/*.forced.json; do
    name=$(basename "$ref" .forced.json)
    ids=$(python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['tokens'])))" "$ref")
    SB_TUNE_PROFILE=off "$SB" logits -m "tests/data/$name.gguf" --ids "$ids" -n 6 -t 2 --exact > "$tmp/plain.json" 2> "$tmp/plain.err" || { bad "$name untuned: $(head -c 300 "$tmp/plain.err")"; continue; }
    SB_TUNE_PROFILE="$tmp/tuned.json" "$SB" logits -m "tests/data/$name.gguf" --ids "$ids" -n 6 -t 2 --exact > "$tmp/tuned.out" 2> "$tmp/tuned.err" || { bad "$name tuned: $(head -c 300 "$tmp/tuned.err")"; continue; }
    if grep -q '"level": *"avx512"' "$tmp/tuned.json"; then
        SB_KERNELS=avx2 SB_TUNE_PROFILE=off "$SB" logits -m "tests/data/$name.gguf" --ids "$ids" -n 6 -t 2 --exact > "$tmp/avx2.json" 2> /dev/null
        cmp -s "$tmp/plain.json" "$tmp/avx2.json" || seen_avx2=$((seen_avx2+1))
    fi
    if ! grep -q "tune profile $tmp/tuned.json applied" "$tmp/tuned.err"; then bad "$name: profile not applied: $(head -c 300 "$tmp/tuned.err")"; continue; fi
    if cmp -s "$tmp/plain.json" "$tmp/tuned.out"; then runs=$((runs+1)); else bad "$name: tuned logits differ from untuned"; fi
    grep -q "tune profile" "$tmp/plain.err" && bad "$name: SB_TUNE_PROFILE=off still read a profile"
done
[ $runs -ge 8 ] && ok "tuned = untuned, byte for byte, on $runs fixtures" || bad "only $runs fixtures compared"
if grep -q '"level": *"avx512"' "$tmp/tuned.json"; then
    [ $seen_avx2 -ge 1 ] && ok "the comparison sees a float order change (AVX2 kernels differ on $seen_avx2 fixtures)" \
        || bad "--exact output does not see the AVX2 kernels' float order"
fi

# splits at the edges: a cap of 1-3 tasks a thread (below the floor of 4 the
# split otherwise keeps: it once looped forever there) and a task floor far
# above any matrix; the output is still the untuned one
model=tests/data/tiny-llama-spm-Q4_K_M.gguf
SB_TUNE_PROFILE=off "$SB" logits -m $model -p "Hello" -n 4 -t 2 --exact > "$tmp/edge_ref.json" 2> /dev/null
for edge in "1 0" "2 0" "3 16" "24 1048576"; do
    set -- $edge
    python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p['plan']['split'].update(tasks_per_thread=int(sys.argv[3]), task_kib=int(sys.argv[4])); json.dump(p, open(sys.argv[2], 'w'))" \
        "$tmp/tuned.json" "$tmp/edge.json" "$1" "$2"
    if SB_TUNE_PROFILE="$tmp/edge.json" timeout 60 "$SB" logits -m $model -p "Hello" -n 4 -t 2 --exact > "$tmp/edge.out" 2> "$tmp/edge.err" \
        && cmp -s "$tmp/edge_ref.json" "$tmp/edge.out"; then ok "tasks_per_thread $1, task_kib $2: untuned output"
    else bad "tasks_per_thread $1, task_kib $2: $(tail -c 300 "$tmp/edge.err")"; fi
done

# 3. profiles that must be ignored, each with one line naming file and reason
model=tests/data/tiny-llama-spm-Q4_K_M.gguf
SB_TUNE_PROFILE=off "$SB" logits -m $model -p "Hello" -n 4 -t 2 > "$tmp/ref.json" 2> /dev/null
ignored() {     # NAME REASON-SUBSTRING: the profile $tmp/NAME.json
    SB_TUNE_PROFILE="$tmp/$1.json" "$SB" logits -m $model -p "Hello" -n 4 -t 2 > "$tmp/out.json" 2> "$tmp/err"
    local n; n=$(grep -c "tune profile" "$tmp/err")
    if [ "$n" -eq 1 ] && grep -q "tune profile $tmp/$1.json ignored: .*$2" "$tmp/err" && cmp -s "$tmp/ref.json" "$tmp/out.json"; then
        ok "$1 profile ignored ($(grep "tune profile" "$tmp/err" | sed 's/.*ignored: //' | head -c 90))"
    else
        bad "$1 profile: $n lines: $(head -c 400 "$tmp/err")"
    fi
}
edit() {        # NAME PYTHON-STATEMENT on p
    python3 -c "import json,sys; p=json.load(open(sys.argv[1])); $2; json.dump(p, open(sys.argv[2], 'w'))" "$tmp/tuned.json" "$tmp/$1.json"
}
edit foreign 'p["cpu"]["model"] += 1'
ignored foreign "another CPU (model"
edit stale 'p["cpu"]["microcode"] = "0x" + ("2" if p["cpu"]["microcode"] != "0x2" else "3")'
ignored stale "stale: microcode"
edit unknown 'p["plan"]["dot"]["Q4_K"] = "avx512-pf7"; p["level"] = "avx512"'
ignored unknown "unknown variant"
head -c 100 "$tmp/tuned.json" > "$tmp/corrupt.json"
ignored corrupt "bad JSON"
ignored missing "No such file"

# no profile at the default path: silent, untuned
XDG_CACHE_HOME="$tmp/empty" SB_TUNE_PROFILE= "$SB" logits -m $model -p "Hello" -n 4 -t 2 > "$tmp/out.json" 2> "$tmp/err"
if ! grep -q "tune profile" "$tmp/err" && cmp -s "$tmp/ref.json" "$tmp/out.json"; then ok "no profile: silent, untuned"
else bad "no profile: $(head -c 300 "$tmp/err")"; fi

echo "tune: $pass passed, $fail failed"
[ $fail -eq 0 ]
