#!/usr/bin/env bash
# `switchboard route train --paraphrases` on tiny fixtures (the random encoder
# of tests/e5_tiny.py, the tiny llama of tests/data as the writer):
#  - --paraphrases-file: its rows join their example's label (the count is
#    printed, rows for examples not trained on are skipped and counted), and
#    the adapter differs from one trained without them;
#  - the leave-some-out estimate holds an example's paraphrases out with it:
#    each fold trains on exactly the texts outside it, paraphrases of its
#    held-out examples excluded, and scores the config's examples only;
#  - the same bits on 1 and 2 threads, and the same adapter whether the
#    paraphrases are written in the run or read back from --save-paraphrases;
#  - the writer path: one progress line per example with an ETA, the default
#    writer the config's first local model that is not an encoder;
#  - a bad file is exit 2 naming the file and line.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init routepara
fail() { echo "it_route_paraphrase: FAIL: $*" >&2; exit 1; }
it_tiny_e5 || fail "convert-e5"
{ cat <<YAML
models:
  e5:  { gguf: $tmp/e5.gguf, threads: 1 }
  gen: { gguf: $PWD/tests/data/tiny-llama-spm-Q4_0.gguf, threads: 1 }
YAML
  cat tests/data/route_tiny_pipeline.yaml; } > "$tmp/rt.yaml"
tr() { "$SB" route train -c "$tmp/rt.yaml" --pipeline hotline --steps 4 --seed 3 --lr 0.01 --force "$@"; }

# The examples are dealt into 3 folds per label in turn: "the meter reading is off" is in fold 1, "the road
# is broken" in fold 2 (billing: 1 2 3 1, complaint: 1 2 3, tax: 1 2, out_of_scope: 1 2). 3 descriptions +
# 11 examples + 4 paraphrases = 18 texts; fold 1 holds 5 examples and 3 paraphrases, fold 2 4 and 1, fold 3 2.
printf '%s\n' "# LABEL<TAB>EXAMPLE<TAB>PARAPHRASE" \
    "billing	the meter reading is off	my meter shows the wrong number" \
    "billing	the meter reading is off	the reading on my meter is wrong" \
    "" \
    "billing	the meter reading is off	the numbers on the meter look off" \
    "complaint	the road is broken	there is a big hole in the road" \
    "tax	what is the weather like	not one of tax's examples: skipped" > "$tmp/p.tsv"

# --- read from a file: counted, used, held out with their example
tr -t 1 --paraphrases-file "$tmp/p.tsv" -o "$tmp/a1.gguf" > /dev/null 2> "$tmp/err" || fail "exit $?: $(tail -3 "$tmp/err")"
grep -q "^route train: 4 paraphrases of 11 examples read from $tmp/p.tsv (1 rows for examples not trained on skipped)$" \
    "$tmp/err" || fail "the count: $(grep paraphrases "$tmp/err")"
grep -q "^route train: 18 texts (3 labels + out_of_scope: 2)" "$tmp/err" || fail "header: $(grep texts "$tmp/err")"
for want in "fold 1/3: trains on 10 of 18 texts" "fold 2/3: trains on 13 of 18 texts" "fold 3/3: trains on 16 of 18 texts"; do
    grep -q "^route train: $want$" "$tmp/err" || fail "a held-out example's paraphrases trained in its fold? \
want '$want': $(grep 'trains on' "$tmp/err")"
done
grep -q "^route train: leave-some-out estimate (3 folds of the 11 examples)" "$tmp/err" \
    || fail "the paraphrases were scored: $(grep estimate "$tmp/err")"
tr -t 2 --paraphrases-file "$tmp/p.tsv" -o "$tmp/a2.gguf" > /dev/null 2>&1 || fail "-t 2"
cmp -s "$tmp/a1.gguf" "$tmp/a2.gguf" || fail "-t 1 and -t 2 wrote different adapters"
tr -t 2 -o "$tmp/a0.gguf" > /dev/null 2>&1 || fail "without paraphrases"
cmp -s "$tmp/a1.gguf" "$tmp/a0.gguf" && fail "the paraphrases changed nothing"
# --shots 1: "the road is broken" is not trained on, its row is skipped
tr --shots 1 --folds 0 --paraphrases-file "$tmp/p.tsv" -o "$tmp/s1.gguf" > /dev/null 2> "$tmp/err" || fail "--shots 1"
grep -q "^route train: 3 paraphrases of 5 examples read from $tmp/p.tsv (2 rows for" "$tmp/err" \
    || fail "--shots 1: $(grep paraphrases "$tmp/err")"

# --- the writer: the default is the first local model that is not an encoder; the same adapter from the
# paraphrases as written and as read back
tr --folds 0 --paraphrases 2 --save-paraphrases "$tmp/gen.tsv" -o "$tmp/g1.gguf" > /dev/null 2> "$tmp/err" \
    || fail "--paraphrases 2: $(tail -3 "$tmp/err")"
grep -q "^route train: 11 examples; 2 paraphrases each by gen " "$tmp/err" || fail "writer header: $(head -2 "$tmp/err")"
[[ $(grep -c "^route train: \[[0-9]*/11\] [a-z_]* \"[^\"]*\": [0-2] paraphrase.*  ETA [0-9ms]*$" "$tmp/err") == 11 ]] \
    || fail "writer progress: $(grep '\[' "$tmp/err")"
head -1 "$tmp/gen.tsv" | grep -q "^# route train's paraphrases: LABEL<TAB>EXAMPLE<TAB>PARAPHRASE$" || fail "saved file"
n=$(grep -vc '^#' "$tmp/gen.tsv")
grep -q "^route train: $n paraphrases of 11 examples written$" "$tmp/err" || fail "written count ($n): $(grep written "$tmp/err")"
tr --folds 0 --paraphrases-file "$tmp/gen.tsv" -o "$tmp/g2.gguf" > /dev/null 2> "$tmp/err" || fail "read back"
grep -q "^route train: $n paraphrases of 11 examples read from .* (0 rows" "$tmp/err" || fail "read back: $(grep paraphrases "$tmp/err")"
cmp -s "$tmp/g1.gguf" "$tmp/g2.gguf" || fail "written and read-back paraphrases trained different adapters"

# --- bad input: exit 2 naming the file and line
printf 'billing\tthe meter reading is off\tfine\nbilling\tonly two fields\n' > "$tmp/bad1.tsv"
it_expect 2 "$tmp/bad1.tsv:2: expected LABEL<TAB>EXAMPLE<TAB>PARAPHRASE" tr --paraphrases-file "$tmp/bad1.tsv" -o "$tmp/x.gguf"
printf '# c\nnope\tthe meter reading is off\tx y z\n' > "$tmp/bad2.tsv"
it_expect 2 "$tmp/bad2.tsv:2: no label 'nope' in stage 'route'" tr --paraphrases-file "$tmp/bad2.tsv" -o "$tmp/x.gguf"
printf 'billing\tlate fee\t\xff\xfe\n' > "$tmp/bad3.tsv"
it_expect 2 "$tmp/bad3.tsv:1: not UTF-8 text" tr --paraphrases-file "$tmp/bad3.tsv" -o "$tmp/x.gguf"
it_expect 2 "$tmp/none.tsv: No such file" tr --paraphrases-file "$tmp/none.tsv" -o "$tmp/x.gguf"
it_expect 2 "--paraphrases-file reads them" tr --paraphrases-file "$tmp/p.tsv" --paraphrases 2 -o "$tmp/x.gguf"
it_expect 2 "--model e5: $tmp/e5.gguf is an encoder" tr --paraphrases 2 --model e5 -o "$tmp/x.gguf"
[ -e "$tmp/x.gguf" ] && fail "a refused run left $tmp/x.gguf"
"$SB" route train --help | grep -q -- "--paraphrases-file F" || fail "route train --help"
echo "it_route_paraphrase: ok"
