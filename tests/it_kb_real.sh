#!/usr/bin/env bash
# Retrieval quality on the real multilingual-e5-small: the demo
# policy notes of examples/kb are ingested and `switchboard kb eval` runs the
# 126 labelled, paraphrased questions of tests/data/kb_questions.tsv. Floors
# a little under the figures of docs/KNOWLEDGE.md: hybrid recall@3 >= 0.9 in
# each language, and hybrid's MRR at least BM25's. Skipped when the model is
# not installed (tools/models.sh e5).
set -euo pipefail
cd "$(dirname "$0")/.."
SB="$(realpath "${SB_BIN:-bin/switchboard}")"
model="$PWD/models/multilingual-e5-small.Q4_0.gguf"
if [[ ! -f "$model" ]]; then
    echo "it_kb_real: skipped (run tools/models.sh e5 to install the model)"
    exit 0
fi
tmp="$(mktemp -d /tmp/sb-kbreal-XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/c.yaml" <<YAML
models:
  e5: { gguf: $model, threads: 2 }
knowledge:
  policy: { path: $tmp/policy.sqlite, embed_model: e5 }
YAML
"$SB" kb add -c "$tmp/c.yaml" --quiet examples/kb/*.md
"$SB" kb eval -c "$tmp/c.yaml" tests/data/kb_questions.tsv | tee "$tmp/eval"
python3 - "$tmp/eval" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 9 and f[0] in ("bm25", "vector", "hybrid"):
        rows[(f[0], f[1])] = dict(r1=float(f[3]), r3=float(f[4]), r5=float(f[5]), mrr=float(f[6]))
bad = []
for lang in ("zh", "en"):
    if rows[("hybrid", lang)]["r3"] < 0.9:
        bad.append("hybrid recall@3 %s = %.3f < 0.9" % (lang, rows[("hybrid", lang)]["r3"]))
if rows[("hybrid", "all")]["mrr"] < rows[("bm25", "all")]["mrr"]:
    bad.append("hybrid MRR below BM25's")
if bad:
    sys.exit("it_kb_real: FAIL: " + "; ".join(bad))
print("it_kb_real: ok")
PY
