#!/usr/bin/env bash
# tools/ab_bench.sh OLD NEW [ROUNDS] [MODEL...] - two switchboard builds on the
# same benchmark models, alternating which goes first each round, one
# `bench -p 512 -n 128 -t 2 -r 1 --json` per sample (with the load average),
# then the per-model medians. For "did this change slow anything down":
# the two builds share every round's noise, which a comparison of two
# separate `make bench` runs does not.
#   OLD, NEW  switchboard binaries (copy them out of bin/ first)
#   ROUNDS    default 5
#   MODEL     paths; default the forged TinyLlama and Phi-3 shapes
# Output: one line per sample on stdout, then the medians.
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
old=$1 new=$2 rounds=${3:-5}
shift $(( $# >= 3 ? 3 : 2 ))
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(models/bench/tinyllama-1.1b-shape.Q2_K.gguf
                                     models/bench/phi-3-mini-4k-shape.Q4_K_M.gguf)
for b in "$old" "$new"; do [[ -x $b ]] || { echo "ab_bench: $b: not an executable" >&2; exit 2; }; done
for m in "${models[@]}"; do [[ -r $m ]] || { echo "ab_bench: $m: not readable" >&2; exit 2; }; done
samples=$(mktemp)
trap 'rm -f "$samples"' EXIT
for ((r = 1; r <= rounds; r++)); do
    if (( r % 2 )); then order=(old new); else order=(new old); fi
    for m in "${models[@]}"; do
        for which in "${order[@]}"; do
            bin=$old; [[ $which == new ]] && bin=$new
            load=$(cut -d' ' -f1 /proc/loadavg)
            json=$("$bin" bench -m "$m" -p 512 -n 128 -t 2 -r 1 --json 2>/dev/null | tail -1)
            line="$r $(basename "$m" .gguf) $which $load $json"
            echo "$line" | tee -a "$samples"
        done
    done
done
python3 - "$samples" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r, model, which, load, js = line.split(" ", 4)
    d = json.loads(js)
    rows.setdefault((model, which), []).append((d["pp_tps"], d["tg_tps"]))
print("\n| model | build | pp512 median (t/s) | tg128 median (t/s) | rounds |")
print("|---|---|---:|---:|---:|")
for (model, which), v in sorted(rows.items()):
    print("| %s | %s | %.1f | %.2f | %d |" % (model, which, statistics.median(p for p, _ in v),
                                           statistics.median(t for _, t in v), len(v)))
PY
