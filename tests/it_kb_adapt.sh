#!/usr/bin/env bash
# `switchboard kb adapt` on tiny fixtures (the random encoder of
# tests/e5_tiny.py, the tiny llama of tests/data as the question writer):
#  - with --questions, the adapter is trained against the base's stored
#    passages: progress names step, loss and ETA, the loss falls, the
#    held-out recall and MRR are printed frozen and adapted, and the file is
#    written only when the adapted MRR is not below the frozen one (exit 3
#    otherwise); the same bits on 1 and 2 threads, with --norms too;
#  - the writer path runs a generative model over every chunk with progress
#    (a random model writes few usable questions: then a clear error);
#  - knowledge.NAME.adapter names one of the embed model's adapters, and kb
#    search embeds the question through it (--adapter none: without);
#  - bad input is exit 2 naming what is wrong.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init kbadapt
fail() { echo "it_kb_adapt: FAIL: $*" >&2; exit 1; }
it_tiny_e5 || fail "convert-e5"
cat > "$tmp/kb.yaml" <<YAML
models:
  e5:  { gguf: $tmp/e5.gguf, threads: 1 }
  gen: { gguf: $PWD/tests/data/tiny-llama-spm-Q4_0.gguf, threads: 1 }
knowledge:
  docs: { path: $tmp/kb.sqlite, embed_model: e5, chunk_tokens: 64, overlap: 0 }
YAML
mkdir -p "$tmp/docs"
printf '# hello\n\nhello world, hello world.\n' > "$tmp/docs/a.md"
printf '# 社保\n\n社保卡办理，社保卡。\n' > "$tmp/docs/b.md"
printf '# 公积金\n\n公积金办理，公积金。\n' > "$tmp/docs/c.md"
printf '# the test\n\nthe query is a test.\n' > "$tmp/docs/d.md"
"$SB" kb add -c "$tmp/kb.yaml" --quiet "$tmp"/docs/*.md || fail "kb add"
{
  for q in "hello" "world hello" "hello, world" "wor ld" "hello hello"; do printf 'a.md\t0\t%s\n' "$q"; done
  for q in "社保" "社保卡" "办理社保" "卡 社保" "社保 办理"; do printf 'b.md\t0\t%s\n' "$q"; done
  for q in "公积金" "办理公积金" "公积金卡" "金 公积" "公积 金"; do printf 'c.md\t0\t%s\n' "$q"; done
  for q in "the query" "a test" "is the test" "query: test" "test the"; do printf 'd.md\t0\t%s\n' "$q"; done
} > "$tmp/q.tsv"
ad() { "$SB" kb adapt -c "$tmp/kb.yaml" --questions "$tmp/q.tsv" --epochs 6 --batch 8 --lr 0.01 --layers 2 "$@"; }

# --- training on given questions
ad -t 1 --seed 3 --force -o "$tmp/a1.gguf" > "$tmp/out" 2> "$tmp/err" || fail "kb adapt exited $?: $(tail -3 "$tmp/err")"
grep -q "^kb adapt: training on 16 questions against 4 passages: rank 8, alpha 16, top 2 layers, 12 steps of 8, seed 3" \
    "$tmp/err" || fail "header: $(cat "$tmp/err")"
grep -q "^kb adapt: step 12/12  loss [0-9.]*  lr .* ETA 0s$" "$tmp/err" || fail "progress: $(tail -3 "$tmp/err")"
grep -q "^kb adapt: held-out questions (4 of 20): recall@1 frozen [0-9.]*, adapted [0-9.]*; recall@3 frozen" "$tmp/err" \
    || fail "held-out line: $(tail -2 "$tmp/err")"
grep -q "wrote $tmp/a1.gguf" "$tmp/out" || fail "stdout: $(cat "$tmp/out")"
python3 - "$tmp/err" <<'EOF' || fail "the loss did not fall: $(grep step "$tmp/err")"
import re, sys
l = [float(m.group(1)) for m in re.finditer(r"^kb adapt: step \d+/\d+  loss ([0-9.]+)", open(sys.argv[1]).read(), re.M)]
assert len(l) == 12 and sum(l[-3:]) < sum(l[:3]) - 0.05, l
EOF
ad -t 2 --seed 3 --force -o "$tmp/a2.gguf" > /dev/null 2>&1 || fail "kb adapt -t 2"
cmp -s "$tmp/a1.gguf" "$tmp/a2.gguf" || fail "1 and 2 threads wrote different adapters"
# --norms: the adapted layers' LayerNorms train too (the same loop as route train's), as deterministically
ad -t 1 --seed 3 --force --norms -o "$tmp/n1.gguf" > /dev/null 2> "$tmp/err" || fail "--norms: $(tail -1 "$tmp/err")"
grep -q "top 2 layers, their LayerNorms, 12 steps of 8" "$tmp/err" || fail "--norms header: $(grep training "$tmp/err")"
ad -t 2 --seed 3 --force --norms -o "$tmp/n2.gguf" > /dev/null 2>&1 || fail "--norms -t 2"
cmp -s "$tmp/n1.gguf" "$tmp/n2.gguf" || fail "--norms: 1 and 2 threads wrote different adapters"
cmp -s "$tmp/a1.gguf" "$tmp/n1.gguf" && fail "--norms wrote the adapter without them"
python3 - "$tmp/a1.gguf" <<'EOF' || fail "not a llama.cpp LoRA adapter"
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:4] == b"GGUF"
for key in (b"general.type", b"adapter", b"adapter.type", b"lora", b"adapter.lora.alpha", b"blk.1.attn_q.weight.lora_a"):
    assert key in b, key
EOF

# --- the guard: without --force the file is written exactly when the adapted held-out MRR is not below the frozen one
seen=""
for seed in 1 2 3 4; do
  rm -f "$tmp/g.gguf"
  ad --seed $seed -o "$tmp/g.gguf" > /dev/null 2> "$tmp/gerr"; rc=$?
  seen="$seen $rc"
  read -r fz adp < <(sed -n 's/.*MRR@10 frozen \([0-9.]*\), adapted \([0-9.]*\)$/\1 \2/p' "$tmp/gerr")
  [[ -n "${fz:-}" ]] || fail "guard: no held-out line: $(tail -2 "$tmp/gerr")"
  if python3 -c "import sys; sys.exit(0 if float('$adp') < float('$fz') else 1)"; then
    [[ $rc == 3 && ! -e "$tmp/g.gguf" ]] || fail "guard: adapted $adp < frozen $fz but exit $rc / file written"
    grep -q "not writing $tmp/g.gguf" "$tmp/gerr" || fail "guard message: $(tail -1 "$tmp/gerr")"
  else
    [[ $rc == 0 && -s "$tmp/g.gguf" ]] || fail "guard: adapted $adp >= frozen $fz but exit $rc"
  fi
done
[[ "$seen" == *0* && "$seen" == *3* ]] || fail "the seeds did not show both outcomes of the guard (exits:$seen)"

# --- the question writer: one line of progress per chunk; a random model writes few usable questions
"$SB" kb adapt -c "$tmp/kb.yaml" --model gen --save-questions "$tmp/gen.tsv" --epochs 1 --layers 2 --force -o "$tmp/w.gguf" \
    > "$tmp/wout" 2> "$tmp/werr"; rc=$?
grep -q "^kb adapt: docs: 4 chunks; 3 questions each by gen" "$tmp/werr" || fail "writer header: $(head -2 "$tmp/werr")"
[[ $(grep -c "^kb adapt: \[[1-4]/4\] [a-d].md #0: [0-9]* question.*ETA" "$tmp/werr") == 4 ]] || fail "writer progress: $(cat "$tmp/werr")"
[[ -e "$tmp/gen.tsv" ]] || fail "--save-questions wrote nothing"
if [[ $rc != 0 ]]; then
  [[ $rc == 1 ]] && grep -q "usable question.*too few to train on" "$tmp/werr" || fail "writer exit $rc: $(tail -2 "$tmp/werr")"
fi
# the default writer is the first local model that is not an encoder
"$SB" kb adapt -c "$tmp/kb.yaml" --per-chunk 1 --epochs 1 --layers 2 --force -o "$tmp/w2.gguf" > /dev/null 2> "$tmp/werr2"
grep -q "by gen " "$tmp/werr2" || fail "default writer: $(head -2 "$tmp/werr2")"

# --- the base names its adapter: kb search embeds the question through it
sed -e "s|e5:  { gguf: $tmp/e5.gguf, threads: 1 }|e5:  { gguf: $tmp/e5.gguf, threads: 1, adapters: { docs_q: $tmp/a1.gguf } }|" \
    -e "s|overlap: 0 }|overlap: 0, adapter: docs_q }|" "$tmp/kb.yaml" > "$tmp/kba.yaml"
grep -q "adapter: docs_q" "$tmp/kba.yaml" || fail "sed"
"$SB" run -c "$tmp/kba.yaml" --check > /dev/null 2>&1 || fail "the config with the base's adapter does not check"
s() { "$SB" kb search -c "$tmp/kba.yaml" --mode vector --json "$@" "hello" 2> /dev/null; }
with=$(s) && without=$(s --adapter none) && file=$(s --adapter "$tmp/a1.gguf") || fail "kb search"
[[ "$with" != "$without" ]] || fail "kb search gave the frozen scores with the base's adapter"
[[ "$with" == "$file" ]] || fail "the base's adapter and --adapter FILE differ"
"$SB" kb eval -c "$tmp/kba.yaml" <(printf 'hello\ta.md\n社保卡\tb.md\n') > /dev/null || fail "kb eval with the base's adapter"

# ... and so does a retrieve stage: the router asks the encoder's worker for the question's vector through it
port=$(it_ports 1)
{ printf 'runtime: { dir: %s/run, http: 127.0.0.1:%s, drain_ms: 1000 }\n' "$tmp" "$port"
  cat "$tmp/kba.yaml"
  printf 'pipelines:\n  ask:\n    cache: false\n    stages:\n      - { name: docs, kind: retrieve, kb: docs, mode: vector, top_k: 4 }\n'
} > "$tmp/rt.yaml"
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
it_pids+=($!)
it_wait_http "http://127.0.0.1:$port/health" 200 0.05 || fail "the runtime did not come up: $(tail -5 "$tmp/run.log")"
curl -s -m 30 "http://127.0.0.1:$port/v1/pipelines/ask" -d '{"input": "hello"}' > "$tmp/ask.json"
python3 - "$tmp/ask.json" "$with" "$without" <<'EOF' || fail "the retrieve stage did not use the base's adapter: $(cat "$tmp/ask.json")"
import json, sys
got = {p["source"]: p["score"] for p in json.load(open(sys.argv[1]))["stages"][0]["json"]["passages"]}
want = {h["source"]: h["score"] for h in map(json.loads, sys.argv[2].splitlines())}
frozen = {h["source"]: h["score"] for h in map(json.loads, sys.argv[3].splitlines())}
assert set(got) == set(want), (got, want)
assert all(abs(got[k] - want[k]) < 1e-4 for k in got), (got, want)
assert any(abs(got[k] - frozen[k]) > 1e-4 for k in got), (got, frozen)
EOF

# --- bad input
expect() {
  local want=$1 msg=$2; shift 2
  "$@" > /dev/null 2> "$tmp/e"; local rc=$?
  [[ $rc == "$want" ]] || fail "$* exited $rc, not $want: $(cat "$tmp/e")"
  grep -qF -- "$msg" "$tmp/e" || fail "$*: no '$msg' in: $(cat "$tmp/e")"
}
"$SB" kb adapt --help | grep -q "^usage: switchboard kb adapt -c CONFIG" || fail "kb adapt --help"
"$SB" kb --help | grep -q "^  adapt " || fail "kb --help does not list adapt"
expect 2 "give -c CONFIG and -o ADAPTER.gguf" "$SB" kb adapt -c "$tmp/kb.yaml"
expect 2 "no knowledge base 'nope'" "$SB" kb adapt -c "$tmp/kb.yaml" --kb nope -o "$tmp/x.gguf"
expect 2 "--model e5: $tmp/e5.gguf is an encoder" "$SB" kb adapt -c "$tmp/kb.yaml" --model e5 -o "$tmp/x.gguf"
expect 2 "--epochs expects" "$SB" kb adapt -c "$tmp/kb.yaml" --epochs 0 -o "$tmp/x.gguf"
printf 'a.md\t7\thello\n' > "$tmp/badq.tsv"
expect 2 "badq.tsv:1: no chunk 7 of 'a.md'" "$SB" kb adapt -c "$tmp/kb.yaml" --questions "$tmp/badq.tsv" -o "$tmp/x.gguf"
printf 'a.md hello\n' > "$tmp/badq.tsv"
expect 2 "badq.tsv:1: expected SOURCE<TAB>POSITION<TAB>QUESTION" "$SB" kb adapt -c "$tmp/kb.yaml" --questions "$tmp/badq.tsv" -o "$tmp/x.gguf"
sed -e "s|overlap: 0, adapter: docs_q }|overlap: 0, adapter: other }|" "$tmp/kba.yaml" > "$tmp/kbb.yaml"
expect 2 "knowledge.docs.adapter: 'other' is not one of model 'e5''s adapters" "$SB" run -c "$tmp/kbb.yaml" --check
[[ ! -e "$tmp/x.gguf" ]] || fail "a failed run wrote its output"
echo "it_kb_adapt: ok"
