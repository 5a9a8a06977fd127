#!/usr/bin/env bash
# Retrieve stages through real HTTP: a runtime serving the
# tiny random e5 encoder of tests/e5_tiny.py (no download), a base ingested
# here with `switchboard kb add`, and pipelines whose retrieve stage feeds
# later templates ({{stages.NAME.output}}, {{stages.NAME.json...}}) and
# branches with when: {found: ...} / {not_found: ...}. The encoder's weights
# are random, so hits are pinned down by BM25 (hybrid keeps BM25's first hit
# first when the vector list is noise) and min_score: 1.5 (above any cosine)
# forces "not found". The rerank stages ask the tiny random llama fixture:
# its yes/no judgements are noise, so they check the machinery (every
# passage judged, P(yes) in [0, 1], top_k kept, min_score on P(yes)), not
# the quality. Set SB_BIN to test another binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init retrieve
fail() { echo "it_retrieve: FAIL: $*" >&2; tail -20 "$tmp/run.log" >&2 2>/dev/null; exit 1; }
port=$(it_ports 1)
python3 tests/e5_tiny.py --model-only "$SB" "$tmp" > /dev/null
tool() {    # a tool stage that shows what the templates rendered
    printf '      - { name: %s, kind: tool, when: { %s: docs }, command: ["printf", "%%s", "%s"] }\n' "$1" "$2" "$3"
}
cat > "$tmp/c.yaml" <<EOF
runtime: { dir: $tmp/run, http: 127.0.0.1:$port, drain_ms: 1000 }
models:
  e5: { gguf: $tmp/tiny-q8_0.gguf, threads: 1 }
  judge: { gguf: $PWD/tests/data/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 1024 }
knowledge:
  pol: { path: $tmp/pol.sqlite, embed_model: e5, chunk_tokens: 64, overlap: 8 }
  absent: { path: $tmp/absent.sqlite, embed_model: e5 }
cache: { path: $tmp/run/cache.sqlite }
pipelines:
  ask:
    cache: false
    stages:
      - { name: docs, kind: retrieve, kb: pol, query: "{{input}} lease", top_k: 2 }
$(tool answer found 'FOUND {{stages.docs.json.found}} FIRST {{stages.docs.output}}')
$(tool handoff not_found 'HANDOFF')
  strict:
    cache: false
    stages:
      - { name: docs, kind: retrieve, kb: pol, min_score: 1.5 }
$(tool answer found 'FOUND')
$(tool handoff not_found 'HANDOFF {{stages.docs.json}}')
  keywords:
    cache: false
    stages:
      - { name: docs, kind: retrieve, kb: pol, mode: bm25, top_k: 1, min_score: 0.000001 }
$(tool answer found 'FOUND {{stages.docs.json.passages}}')
$(tool handoff not_found 'HANDOFF')
  rerank:
    cache: false
    stages:
      - { name: docs, kind: retrieve, kb: pol, top_k: 1, min_score: 0, rerank: { model: judge, top_n: 3, fuse: true } }
$(tool answer found 'FOUND')
$(tool handoff not_found 'HANDOFF')
  rrstrict:
    cache: false
    stages:
      - name: docs
        kind: retrieve
        kb: pol
        min_score: 1.01
        rerank: { model: judge, chat: true, prompt: "Q: {{query}} P: {{passage}} Relevant?" }
$(tool answer found 'FOUND')
$(tool handoff not_found 'HANDOFF')
  rrenc:
    cache: false
    stages:
      - { name: docs, kind: retrieve, kb: pol, rerank: { model: e5 } }
$(tool handoff not_found 'HANDOFF')
  cached:
    stages:
      - { name: docs, kind: retrieve, kb: pol, mode: bm25, top_k: 1 }
$(tool answer found '{{stages.docs.output}}')
  nobase:
    cache: false
    stages:
      - { name: docs, kind: retrieve, kb: absent }
$(tool handoff not_found 'HANDOFF')
EOF
cat > "$tmp/rent.md" <<'EOF'
# Housing fund

## Rent

Bring the lease and your identity card. Money arrives within five days.
EOF
printf '# Tax\n\nThe annual settlement runs from March to June.\n' > "$tmp/tax.md"
"$SB" kb add -c "$tmp/c.yaml" --kb pol --quiet "$tmp/rent.md" "$tmp/tax.md" || fail "kb add"
"$SB" run -c "$tmp/c.yaml" > "$tmp/run.log" 2>&1 &
it_pids+=($!)
it_wait_http "http://127.0.0.1:$port/health" 200 0.05 || fail "the runtime did not come up"
call() { curl -s -m 30 "http://127.0.0.1:$port/v1/pipelines/$1" -d "{\"input\": \"$2\"}"; }

call ask "identity card for rent" > "$tmp/ask.json"
python3 - "$tmp/ask.json" <<'EOF' || fail "ask: $(cat "$tmp/ask.json")"
import json, sys
r = json.load(open(sys.argv[1]))
docs = r["stages"][0]
assert docs["kind"] == "retrieve" and docs["status"] == "ok", docs
j = docs["json"]
assert j["found"] is True and len(j["passages"]) == 2, j
p = j["passages"][0]
assert p["source"] == "rent.md" and p["section"] == "Housing fund > Rent" and "lease" in p["text"], p
assert set(p) == {"source", "section", "score", "text"}, p
assert j["source"] == "rent.md" and j["section"] == "Housing fund > Rent", j
assert j["cite"] == "rent.md, Housing fund > Rent; rent.md, Housing fund > Rent", j
assert docs["output"].startswith("[1] rent.md > Housing fund > Rent\nBring the lease"), docs["output"]
assert "\n\n[2] " in docs["output"], docs["output"]
assert r["output"].startswith("FOUND true FIRST [1] rent.md > Housing fund > Rent"), r["output"]
assert r["stages"][2]["status"] == "skipped", r["stages"][2]
EOF

call strict "identity card for rent" > "$tmp/strict.json"
python3 - "$tmp/strict.json" <<'EOF' || fail "strict: $(cat "$tmp/strict.json")"
import json, sys
r = json.load(open(sys.argv[1]))
docs = r["stages"][0]
assert docs["status"] == "ok" and docs["json"] == {"found": False, "passages": []} and docs["output"] == "", docs
assert r["stages"][1]["status"] == "skipped", r
assert r["output"] == 'HANDOFF {"found":false,"passages":[]}', r["output"]
EOF

call keywords "settlement March" > "$tmp/kw.json"
python3 - "$tmp/kw.json" <<'EOF' || fail "keywords: $(cat "$tmp/kw.json")"
import json, sys
r = json.load(open(sys.argv[1]))
out = r["output"]
assert out.startswith("FOUND [") and json.loads(out[6:])[0]["source"] == "tax.md", out
EOF
call keywords "zebra" > "$tmp/kw2.json"
grep -q '"output":"HANDOFF"' "$tmp/kw2.json" || fail "bm25 without a match: $(cat "$tmp/kw2.json")"

# Rerank: the judge scores both passages (top_n 3 > the 2 chunks), the
# best P(yes) is kept (top_k 1), and min_score applies to P(yes).
call rerank "identity card for rent" > "$tmp/rr.json"
python3 - "$tmp/rr.json" <<'EOF' || fail "rerank: $(cat "$tmp/rr.json")"
import json, sys
r = json.load(open(sys.argv[1]))
docs = r["stages"][0]
assert docs["status"] == "ok", docs
ps = docs["json"]["passages"]
assert docs["json"]["found"] is True and len(ps) == 1, docs
assert 0 <= ps[0]["score"] <= 1, ps
assert r["output"] == "FOUND", r
EOF
call rrstrict "identity card for rent" > "$tmp/rrs.json"
python3 - "$tmp/rrs.json" <<'EOF' || fail "rerank min_score: $(cat "$tmp/rrs.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["stages"][0]["status"] == "ok" and r["stages"][0]["json"]["found"] is False, r
assert r["output"] == "HANDOFF", r
EOF
# stage_fails PIPELINE INPUT MESSAGE: the retrieve stage fails with MESSAGE,
# the run goes on and hands off.
stage_fails() {
    call "$1" "$2" > "$tmp/$1.json"
    python3 - "$tmp/$1.json" "$3" <<'EOF' || fail "$1: $(cat "$tmp/$1.json")"
import json, sys
r = json.load(open(sys.argv[1]))
docs = r["stages"][0]
assert docs["status"] == "error" and sys.argv[2] in docs["error"], docs
assert r["output"] == "HANDOFF", r
EOF
}
# The judge is really asked: an encoder cannot judge, so the stage fails
# instead of keeping the search's order.
stage_fails rrenc "identity card for rent" "rerank model 'e5'"
# A base nobody has added to yet.
stage_fails nobase "rent" "does not exist yet: run switchboard kb add"

# The base changes under the running router: the next call sees it.
printf '# Pets\n\nA dog licence costs twenty yuan.\n' > "$tmp/pets.md"
"$SB" kb add -c "$tmp/c.yaml" --kb pol --quiet "$tmp/pets.md" || fail "kb add pets"
call keywords "dog licence" | grep -q 'pets.md' || fail "a document added after start is not found"

# A cached answer does not outlive the passages it was made from: the
# base's content version is part of the pipeline's cache key.
cached() {
    curl -s -m 30 -D "$tmp/$2.h" -o "$tmp/$2.json" "http://127.0.0.1:$port/v1/pipelines/cached" \
         -d "{\"input\": \"$1\"}"
    tr -d '\r' < "$tmp/$2.h" | awk -F': ' 'tolower($1) == "x-cache" { print $2 }'
}
[ "$(cached 'dog licence cost' c1)" = miss ] || fail "cached: first call not a miss: $(cat "$tmp/c1.h")"
[ "$(cached 'dog licence cost' c2)" = hit ] || fail "cached: second call not a hit: $(cat "$tmp/c2.h")"
grep -q 'twenty yuan' "$tmp/c2.json" || fail "cached: $(cat "$tmp/c2.json")"
printf '# Pets\n\nA dog licence costs thirty yuan since May.\n' > "$tmp/pets.md"
"$SB" kb add -c "$tmp/c.yaml" --kb pol --quiet "$tmp/pets.md" || fail "kb add pets (changed)"
[ "$(cached 'dog licence cost' c3)" = miss ] || fail "cached: a hit after the base changed: $(cat "$tmp/c3.json")"
grep -q 'thirty yuan' "$tmp/c3.json" || fail "cached: not the new passage: $(cat "$tmp/c3.json")"
[ "$(cached 'dog licence cost' c4)" = hit ] || fail "cached: the new answer is not cached"
echo "it_retrieve: ok"
