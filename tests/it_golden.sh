#!/usr/bin/env bash
# Every fixture model against llama.cpp's own outputs (tests/data/golden):
# the forced-token file and the chat file through `switchboard logits --ids`,
# and the chat file again through `-p PROMPT` so that tokenizer, special
# tokens and BOS handling are checked end to end. Models with Q4_K / Q5_K /
# Q6_K weights run the forced tokens once more with SB_REPACK=1 (the x8
# layout: gemv8 for decode, unpack + gemm for the prompt).
set -u
cd "$(dirname "$0")/.."
SB=${SB_BIN:-bin/switchboard}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
for ref in tests/data/golden/*.forced.json tests/data/golden/*.chat.json; do
    name=$(basename "$ref" .json); model=${name%.*}
    tol=0.25; case $model in *f16) tol=0.02;; esac
    ids=$(python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['tokens'])))" "$ref")
    n=$(python3 -c "import json,sys;print(len(json.load(open(sys.argv[1]))['greedy']))" "$ref")
    modes="ids"; case $name in *.chat) modes="ids prompt";; esac
    case $name in *Q4_K*.forced|*Q5_K*.forced|*Q6_K*.forced) modes="$modes x8";; esac
    for mode in $modes; do
        if [ $mode = ids ] || [ $mode = x8 ]; then
            SB_REPACK=$([ $mode = x8 ] && echo 1 || echo 0) \
                "$SB" logits -m "tests/data/$model.gguf" --ids "$ids" -n "$n" -t 2 > "$tmp/out.json" 2> "$tmp/err"
        else
            prompt=$(python3 -c "import json,sys;print(json.load(open('tests/data/golden/prompts.json'))[sys.argv[1]],end='')" "$model")
            "$SB" logits -m "tests/data/$model.gguf" -p "$prompt" -n "$n" -t 2 > "$tmp/out.json" 2> "$tmp/err"
        fi
        rc=$?
        if [ $rc -ne 0 ]; then
            echo "FAIL $name ($mode): switchboard logits exited $rc: $(head -c 300 "$tmp/err")"; fail=$((fail+1)); continue
        fi
        if out=$(python3 tests/golden_check.py "$ref" "$tmp/out.json" --tol $tol); then
            echo "$out ($name, $mode)"; pass=$((pass+1))
        else
            echo "$out ($name, $mode)"; fail=$((fail+1))
        fi
    done
done
echo "golden: $pass passed, $fail failed"
[ $fail -eq 0 ]
