#!/usr/bin/env bash
# Knowledge bases on the tiny random e5 encoder of tests/e5_tiny.py
# (no download): `switchboard kb` add/list/stats/search/remove on Markdown,
# HTML and text, the file modes, the command's errors, and a real kill -9 of
# `kb add` while it holds the write transaction: the previous version must
# stay whole. The real-model evaluation is tests/it_kb_real.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/itlib.sh          # it_expect
SB="$(realpath "${SB_BIN:-bin/switchboard}")"
tmp="$(mktemp -d /tmp/sb-kb-XXXXXX)"
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
python3 tests/e5_tiny.py --model-only "$SB" "$tmp"

fail() { echo "it_kb: FAIL: $*" >&2; exit 1; }
cat > "$tmp/c.yaml" <<EOF
models:
  tiny: { gguf: $tmp/tiny-q8_0.gguf }
  llama: { gguf: $PWD/tests/data/tiny-llama-spm-Q4_0.gguf }
knowledge:
  kb: { path: $tmp/kb.sqlite, embed_model: tiny, chunk_tokens: 64, overlap: 8 }
  wrong: { path: $tmp/wrong.sqlite, embed_model: llama }
EOF
cat > "$tmp/rent.md" <<'EOF'
# Housing fund

## Rent

Bring the lease and your identity card. Money arrives within five days.
EOF
cat > "$tmp/tax.html" <<'EOF'
<html><body><h1>Tax</h1><p>The annual settlement runs from March to June.</p><script>zebra()</script></body></html>
EOF
printf '办理营业执照需要身份证。网上登记一个工作日内核准。\n' > "$tmp/licence.txt"

# ---- errors
it_expect 2 "usage: switchboard kb" "$SB" kb
"$SB" kb --help | grep -q "search QUERY" || fail "kb --help"
it_expect 2 "-c CONFIG is required" "$SB" kb add "$tmp/rent.md"
it_expect 2 "unknown command 'frob'" "$SB" kb frob -c "$tmp/c.yaml"
it_expect 2 "give --kb NAME" "$SB" kb list -c "$tmp/c.yaml"
it_expect 2 "no such knowledge base (knowledge bases: kb wrong): nope" "$SB" kb list -c "$tmp/c.yaml" --kb nope
it_expect 2 "no such knowledge base" "$SB" kb search -c "$tmp/c.yaml" --kb kb --mode bm25 hello
it_expect 2 "not an encoder" "$SB" kb add -c "$tmp/c.yaml" --kb wrong "$tmp/rent.md"
it_expect 2 "unknown --mode 'fuzzy'" "$SB" kb search -c "$tmp/c.yaml" --kb kb --mode fuzzy hello
it_expect 2 "unknown --fts 'ngram'" "$SB" kb add -c "$tmp/c.yaml" --kb kb --fts ngram "$tmp/rent.md"
it_expect 2 "--top-k expects an integer" "$SB" kb search -c "$tmp/c.yaml" --kb kb -k 0 hello
[[ ! -e "$tmp/kb.sqlite" && ! -e "$tmp/wrong.sqlite" ]] || fail "a failed command created a base"
sed 's/embed_model: tiny, chunk_tokens: 64, overlap: 8/embed_model: tiny, chunk_tokens: 64, overlap: 64/' "$tmp/c.yaml" > "$tmp/bad.yaml"
it_expect 2 "knowledge.kb.overlap: 64 must be less than chunk_tokens (64)" "$SB" kb list -c "$tmp/bad.yaml" --kb kb
sed 's/embed_model: tiny,/embed_model: nope,/' "$tmp/c.yaml" > "$tmp/bad.yaml"
it_expect 2 "knowledge.kb.embed_model: 'nope' is not a local (gguf) model of models:" "$SB" kb list -c "$tmp/bad.yaml"
touch "$tmp/a.docx"
it_expect 1 "unsupported file type" "$SB" kb add -c "$tmp/c.yaml" --kb kb "$tmp/a.docx"
it_expect 1 "missing.md: No such file" "$SB" kb add -c "$tmp/c.yaml" --kb kb "$tmp/missing.md"
printf 'ok \xff bad\n' > "$tmp/bin.txt"
it_expect 1 "not UTF-8 text (invalid byte 0xFF at offset 3)" "$SB" kb add -c "$tmp/c.yaml" --kb kb "$tmp/bin.txt"
if ! command -v pdftotext >/dev/null; then
    printf '%%PDF-1.4\n' > "$tmp/a.pdf"
    it_expect 1 "poppler-utils" "$SB" kb add -c "$tmp/c.yaml" --kb kb "$tmp/a.pdf"
fi

# ---- add, list, stats, search, remove
umask 022
"$SB" kb add -c "$tmp/c.yaml" --kb kb "$tmp/rent.md" "$tmp/tax.html" "$tmp/licence.txt" 2>"$tmp/err" ||
    fail "kb add: $(cat "$tmp/err")"
grep -q '\[  3/  3\] .*licence.txt: 1 chunks' "$tmp/err" || fail "no progress line: $(cat "$tmp/err")"
for f in "$tmp"/kb.sqlite*; do
    [[ "$(stat -c %a "$f")" == 600 ]] || fail "$f has mode $(stat -c %a "$f"), want 600 (agency text)"
done
[[ "$("$SB" kb list -c "$tmp/c.yaml" --kb kb | tail -n +2 | awk '{print $1}' | tr '\n' ' ')" == "licence.txt rent.md tax.html " ]] ||
    fail "kb list: $("$SB" kb list -c "$tmp/c.yaml" --kb kb)"
"$SB" kb stats -c "$tmp/c.yaml" --kb kb | grep -q "^documents  3" || fail "kb stats"
"$SB" kb search -c "$tmp/c.yaml" --kb kb --mode bm25 --json "lease identity" > "$tmp/out" 2>/dev/null
python3 - "$tmp/out" <<'EOF' || fail "bm25 search: $(cat "$tmp/out")"
import json, sys
hits = [json.loads(l) for l in open(sys.argv[1])]
assert hits[0]["source"] == "rent.md" and hits[0]["section"] == "Housing fund > Rent", hits
assert hits[0]["bm25_rank"] == 1 and "zebra" not in open(sys.argv[1]).read(), hits
EOF
"$SB" kb search -c "$tmp/c.yaml" --kb kb --mode bm25 "执照要带什么" > "$tmp/out" 2>/dev/null
head -1 "$tmp/out" | grep -q "licence.txt" || fail "Chinese bm25 search (bigrams): $(cat "$tmp/out")"
"$SB" kb search -c "$tmp/c.yaml" --kb kb -k 3 "anything" > "$tmp/out" 2>/dev/null
[[ "$(grep -c '^[0-9]\.' "$tmp/out")" == 3 ]] || fail "hybrid search did not return top 3: $(cat "$tmp/out")"
"$SB" kb add -c "$tmp/c.yaml" --kb kb "$tmp/rent.md" 2>"$tmp/err"
grep -q "rent.md: unchanged" "$tmp/err" || fail "unchanged re-add: $(cat "$tmp/err")"

# ---- kb eval with a reranker (the tiny decoder judges): judged beyond rank
# 10 when --rerank-top-n asks for it, vectors + rerank, a passage both lists
# hold judged once, and the dump agrees with the table
python3 - "$tmp/sections.md" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write("# Counters\n")
    for i in range(14):
        f.write("\n## Counter %d\n\nWindow %d handles request type %d on weekdays.\n" % (i, i, i))
EOF
"$SB" kb add -c "$tmp/c.yaml" --kb kb --quiet "$tmp/sections.md"
printf 'Which window handles request type 7?\tsections.md\n营业执照要带什么\tlicence.txt\nlease\trent.md\n' > "$tmp/q.tsv"
rr=(-c "$tmp/c.yaml" --kb kb --rerank-model tests/data/tiny-llama-spm-Q4_0.gguf)
"$SB" kb eval "${rr[@]}" --rerank-top-n 12 --rerank-vectors --dump "$tmp/dump" "$tmp/q.tsv" > "$tmp/out" 2>"$tmp/err" ||
    fail "kb eval --rerank-vectors: $(cat "$tmp/err")"
for m in bm25 vector hybrid hyb+rr hyb+rrf vec+rr vec+rrf; do
    grep -q "^$m  *all " "$tmp/out" || fail "kb eval printed no $m row: $(cat "$tmp/out")"
done
python3 - "$tmp/dump" <<'EOF' || fail "kb eval --dump: $(head -c 3000 "$tmp/dump")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert sorted({r["mode"] for r in recs}) == ["bm25", "hybrid", "hybrid+rr", "vector", "vector+rr"], recs
for r in recs:
    judged = [h for h in r["hits"] if "p" in h]
    if r["mode"].endswith("+rr"):
        assert len(r["hits"]) == 12 and len(judged) == 12, (r["mode"], len(r["hits"]), len(judged))  # of 17 chunks
        assert all(0 <= h["p"] <= 1 for h in judged), r
    else:
        assert not judged and (len(r["hits"]) == 12 or r["mode"] == "bm25"), r
seen = {}
for r in recs:                      # the same chunk, the same question: one judgement
    for h in r["hits"]:
        if "p" in h:
            k = (r["query"], h["id"])
            assert seen.setdefault(k, (h["p"], h["judge_ms"])) == (h["p"], h["judge_ms"]), (k, h)
EOF
"$SB" kb eval "${rr[@]}" --rerank-top-n 5 "$tmp/q.tsv" > "$tmp/out5" 2>"$tmp/err" || fail "kb eval: $(cat "$tmp/err")"
python3 tools/kb_rerank_sweep.py "$tmp/dump" --top-n 5 > "$tmp/sweep" || fail "kb_rerank_sweep.py"
python3 tools/kb_rerank_sweep.py --judge "$tmp/dump" > "$tmp/judge" && grep -q "^hybrid+rr" "$tmp/judge" || fail "kb_rerank_sweep.py --judge"
python3 - "$tmp/out5" "$tmp/sweep" <<'EOF' || fail "sweep at n=5 differs from kb eval --rerank-top-n 5"
import sys
K = {"hyb+rr": "rr", "hyb+rrf": "rrf"}
ev = {(key, f[1]): f[3:7] for l in open(sys.argv[1]) for f in [l.split()] for key in [K.get(f[0] if f else "")] if key and f[1] != "all"}
sw = {(f[2], f[3]): f[5:9] for l in open(sys.argv[2]) for f in [l.split()] if len(f) > 4 and f[0] == "hyb" and f[1] == "n=5"}
assert ev and ev == sw, (ev, sw)
EOF
it_expect 1 "--dump $tmp/nodir/d: No such file" "$SB" kb eval "${rr[@]}" --dump "$tmp/nodir/d" "$tmp/q.tsv"
"$SB" kb remove -c "$tmp/c.yaml" --kb kb sections.md 2>/dev/null
it_expect 1 "no source 'nope.md'" "$SB" kb remove -c "$tmp/c.yaml" --kb kb nope.md
"$SB" kb remove -c "$tmp/c.yaml" --kb kb tax.html 2>/dev/null
"$SB" kb stats -c "$tmp/c.yaml" --kb kb | grep -q "^documents  2" || fail "kb remove"

# ---- kill -9 inside the write transaction leaves the previous version whole
python3 - "$tmp" <<'EOF'
import sys
for v in ("alpha", "bravo"):
    with open("%s/%s.txt" % (sys.argv[1], v), "w") as f:
        for i in range(1500):
            f.write("Version %s line %d. " % (v, i) + ("\n\n" if i % 2 else ""))
EOF
cp "$tmp/alpha.txt" "$tmp/doc.txt"
"$SB" kb add -c "$tmp/c.yaml" --kb kb "$tmp/doc.txt" 2>"$tmp/err" || fail "adding version alpha"
store_s=$(sed -n 's/.*store \([0-9.]*\) s).*/\1/p' "$tmp/err")
killed=0
for round in 1 2 3 4 5 6 7 8 9 10; do
    cp "$tmp/bravo.txt" "$tmp/doc.txt"
    "$SB" kb add -c "$tmp/c.yaml" --kb kb --quiet "$tmp/doc.txt" 2>/dev/null &
    pid=$!
    # Once the writer holds the write lock (BEGIN IMMEDIATE fails for us),
    # kill it after a random part of the time its writing took for alpha:
    # anywhere from the transaction's start to (sometimes) after its commit.
    out=$(python3 - "$tmp/kb.sqlite" "$pid" "$store_s" <<'EOF'
import os, random, signal, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
pid, t0 = int(sys.argv[2]), time.time()
while time.time() - t0 < 30:
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
    except sqlite3.OperationalError:
        time.sleep(random.uniform(0, 1.5 * float(sys.argv[3])))
        try:
            os.kill(pid, signal.SIGKILL)
            print("killed")
        except ProcessLookupError:
            print("finished")
        break
    try:                                  # not our child: exited = gone or a zombie
        done = open("/proc/%d/stat" % pid).read().split(")")[-1].split()[0] == "Z"
    except OSError:
        done = True
    if done:
        print("finished")
        break
EOF
)
    wait "$pid" 2>/dev/null || true
    pid=
    python3 - "$tmp/kb.sqlite" "$out" <<'EOF' > "$tmp/state" || fail "after the kill: $(cat "$tmp/state")"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
texts = [r[0] for r in db.execute("SELECT c.text FROM chunks c JOIN docs d ON d.id = c.doc_id WHERE d.source = 'doc.txt'")]
assert texts, "the source lost its chunks"                # neither version
alpha = sum("alpha" in t for t in texts)
bravo = sum("bravo" in t for t in texts)
assert alpha == 0 or bravo == 0, (alpha, bravo)          # never a mix
fts = db.execute("SELECT count(*) FROM fts WHERE fts MATCH 'bravo'").fetchone()[0]
assert fts == bravo, (fts, bravo)                         # the index agrees with the chunks
print("alpha" if alpha else "bravo", len(texts))
EOF
    read -r version n < "$tmp/state"
    if [[ "$out" == killed && "$version" == alpha ]]; then killed=$((killed + 1)); fi
    if [[ "$version" == bravo ]]; then   # the commit won the race: back to alpha for the next round
        cp "$tmp/alpha.txt" "$tmp/doc.txt"
        "$SB" kb add -c "$tmp/c.yaml" --kb kb --quiet "$tmp/doc.txt"
    fi
    [[ "$killed" -ge 3 ]] && break
done
[[ "$killed" -ge 1 ]] || fail "no kill landed inside the write transaction in 10 rounds"
"$SB" kb search -c "$tmp/c.yaml" --kb kb --mode bm25 "bravo" 2>/dev/null | grep -q . && fail "bravo text visible after the kill"
echo "it_kb: ok ($killed kills inside the write transaction, previous version intact each time)"
