#!/usr/bin/env bash
# `make bench`: switchboard vs llama.cpp on the three hotline-shaped models.
#
#   tools/bench.sh [--models tinyllama,phi3,llama3] [--rounds N] [--quick]
#                  [--threads T] [--sb PATH] [--out DIR]
#                  [--no-scaling | --scaling-only] [--no-interleaved-bw]
#                  [--batched-only | --no-batched] [--batched-rounds N]
#                  [--tune-profile FILE|off] [--untuned] [--baseline-profile FILE]
#
#   --quick    pp 128, tg 32, 3 rounds: a fast look, not a result
#   --sb PATH  the switchboard binary to measure (default bin/switchboard;
#              e.g. build-me/bin/switchboard for your own build)
#   --out DIR  where results.json/results.md go (default build/bench)
#   --no-interleaved-bw  for a --sb binary without `bench --membw`
#   --batched-only   only step 5 (e.g. --batched-only --models phi3)
#   --no-batched     skip step 5
#   --batched-rounds N   rounds of step 5 (default 3)
#   --tune-profile FILE|off  the kernel tuning profile ours runs with and
#              whose int8 peak the pp "% of int8 peak" columns use (sets
#              SB_TUNE_PROFILE; default: the one `switchboard tune` wrote for
#              this CPU, if any; off: built-in kernel choices, no such columns)
#   --untuned  also run ours on the built-in kernel choices (SB_TUNE_PROFILE=off)
#              in every round, beside the tuned run: before and after tuning
#              from the same rounds
#   --baseline-profile FILE  with --untuned: that second run uses FILE's plan
#              instead of none (an A/B of two plans in the same rounds)
#
# Steps (each is skipped when its result already exists):
#   1. llama.cpp and its llama-bench/llama-quantize   (tools/llamacpp.sh)
#   2. the forged benchmark models in models/bench/   (tests/bench/forge.py)
#   3. memory read bandwidth, T threads, best of 10   (tools/membw.sh)
#   4. per model, R rounds of: switchboard bench, then llama-bench, each -r 1
#      on the same file with the same threads; medians, ratios, bandwidth
#      fraction (against the best-of-4 probe before the round, and against
#      the probes ours interleaves with its decode windows: bench --membw);
#      then TinyLlama decode at -t 1 vs -t 2             (tests/bench/compare.py)
#   5. batched decode, per model, N rounds of `switchboard bench
#      --parallel 1,2,4,8,16 -p 64 -n 32` and `llama-batched-bench -npp 64
#      -ntg 32 -npl 1,2,4,8,16`, order alternating; S_TG and per-sequence
#      latency side by side                              (tests/bench/batched.py)
# Output: build/bench/results.json (every sample, with load averages) and
# build/bench/results.md (the table for docs/PERFORMANCE.md); step 5:
# build/bench/batched.json and batched.md.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

models="tinyllama,phi3,llama3"
rounds=5
pp=512
tg=128
threads=2
sb="$repo_root/bin/switchboard"
out="build/bench"
extra=()
batched=1       # 0: skip step 5; 2: only step 5
batched_rounds=3

die() { echo "bench: error: $*" >&2; exit 1; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --models) models="${2:?--models needs a list}"; shift 2 ;;
        --rounds) rounds="${2:?--rounds needs N}"; shift 2 ;;
        --threads) threads="${2:?--threads needs T}"; shift 2 ;;
        --sb) sb="${2:?--sb needs a path}"; shift 2 ;;
        --out) out="${2:?--out needs a directory}"; shift 2 ;;
        --quick) pp=128; tg=32; rounds=3; shift ;;
        --no-scaling) extra+=(--no-scaling); shift ;;
        --untuned) extra+=(--untuned); shift ;;
        --baseline-profile) extra+=(--baseline-profile "${2:?--baseline-profile needs FILE}"); shift 2 ;;
        --scaling-only) extra+=(--scaling-only); models=tinyllama; batched=0; shift ;;
        --no-interleaved-bw) extra+=(--no-interleaved-bw); shift ;;
        --batched-only) batched=2; shift ;;
        --no-batched) batched=0; shift ;;
        --batched-rounds) batched_rounds="${2:?--batched-rounds needs N}"; shift 2 ;;
        --tune-profile) export SB_TUNE_PROFILE="${2:?--tune-profile needs FILE or off}"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
[[ "$batched_rounds" =~ ^[1-9][0-9]*$ ]] || die "--batched-rounds must be a positive integer"

eval "$(tools/llamacpp.sh --env)"
[[ -x "$LLAMACPP_BIN/llama-bench" ]] || die "no llama-bench in $LLAMACPP_BIN"
[[ $batched == 0 || -x "$LLAMACPP_BIN/llama-batched-bench" ]] \
    || die "no llama-batched-bench in $LLAMACPP_BIN"

python3 -c "import numpy, gguf" 2>/dev/null || {
    echo "bench: installing numpy/gguf for the model forge"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet numpy gguf \
        || die "pip install numpy gguf failed"
}
python3 tests/bench/forge.py --models "$models"

# membw.sh compiles the tool on first use; run it once here so the compile
# is not part of the measurement.
tools/membw.sh -s 64 -r 1 -t 1 >/dev/null 2>&1

[[ -x "$sb" ]] || die "$sb not found (run make, or pass --sb)"
# Measure a private copy: other engineers rebuild bin/ while we run.
mkdir -p "$out"
cp -pf "$sb" "$out/switchboard"   # -p: keeps the build time, reported in results

load1="$(cut -d' ' -f1 /proc/loadavg)"
echo "bench: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if awk -v l="$load1" 'BEGIN { exit !(l > 0.5) }'; then
    # Both engines spin-wait at thread barriers; with another busy process
    # on a 2-core box, -t 2 can run several times slower than -t 1.
    echo "bench: WARNING: the machine is busy (load $load1); numbers will be noisy" >&2
fi
[[ $batched == 2 ]] || python3 tests/bench/compare.py \
    --sb "$out/switchboard" \
    --llama-bench "$LLAMACPP_BIN/llama-bench" \
    --llama-commit "$LLAMACPP_COMMIT" \
    --membw build/tools/membw \
    --models "$models" --rounds "$rounds" --pp "$pp" --tg "$tg" \
    --threads "$threads" --out "$out" "${extra[@]}"
[[ $batched == 0 ]] || python3 tests/bench/batched.py \
    --sb "$out/switchboard" \
    --batched-bench "$LLAMACPP_BIN/llama-batched-bench" \
    --llama-commit "$LLAMACPP_COMMIT" \
    --models "$models" --rounds "$batched_rounds" --threads "$threads" --out "$out"
