#!/usr/bin/env python3
"""Replay hybrid fusion rules offline on `kb eval --rerank-top-n 50 --dump FILE` lists.

Each question's BM25 and vector lists (50 deep, with scores) are fused again
by reciprocal rank fusion (k, depth, BM25's vote) and by the score fusion the
search uses (the vectors lead, BM25's share w), and R@1 / R@3 per language are
printed beside each list alone - the table of docs/KNOWLEDGE.md, "Hybrid fusion".

    switchboard kb eval -c KB.yaml --rerank-top-n 50 --dump d.jsonl QUESTIONS.tsv
    python3 tools/kb_fusion_replay.py d.jsonl
"""
import collections
import json
import sys


def load(path):
    qs = collections.OrderedDict()
    for line in open(path, encoding="utf-8"):
        d = json.loads(line)
        if d["mode"] not in ("bm25", "vector"):
            continue
        q = qs.setdefault(d["query"], {"lang": d["lang"], "expected": d["expected"]})
        q[d["mode"]] = [(h["id"], h["source"], h["score"]) for h in d["hits"]]
    return qs


def rrf(q, k=60, depth=50, w_bm25=1.0):
    score, src = {}, {}
    for mode, w in (("bm25", w_bm25), ("vector", 1.0)):
        for r, (i, s, _) in enumerate(q[mode][:depth]):
            score[i] = score.get(i, 0) + w / (k + r + 1)
            src[i] = s
    return [src[i] for i in sorted(score, key=lambda i: -score[i])]


def spread(lst):
    if not lst:
        return {}
    hi, lo = lst[0][2], lst[-1][2]
    return {i: (v - lo) / (hi - lo) if hi > lo else 1.0 for i, _, v in lst}


def vectors_lead(q, w):
    b, v = spread(q["bm25"]), spread(q["vector"])
    src = {i: s for i, s, _ in q["bm25"] + q["vector"]}
    if not b or not v:
        w = 1.0 if b else 0.0
    score = {i: (1 - w) * v.get(i, 0) + w * b.get(i, 0) for i in src}
    return [src[i] for i in sorted(score, key=lambda i: -score[i])]


def recall(qs, rank):
    out = []
    for lang in ("zh", "en"):
        sel = [q for q in qs.values() if q["lang"] == lang]
        if not sel:
            continue
        r1 = r3 = 0
        for q in sel:
            order = rank(q)
            r = order.index(q["expected"]) + 1 if q["expected"] in order else 0
            r1 += r == 1
            r3 += 0 < r <= 3
        out.append("%s %.3f / %.3f" % (lang, r1 / len(sel), r3 / len(sel)))
    return "   ".join(out)


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    qs = load(sys.argv[1])
    rows = [("bm25 alone", lambda q: [s for _, s, _ in q["bm25"]]),
            ("vectors alone", lambda q: [s for _, s, _ in q["vector"]])]
    rows += [("rrf k=60 depth %d" % d, lambda q, d=d: rrf(q, depth=d)) for d in (3, 5, 10, 20, 50)]
    rows += [("rrf k=%d" % k, lambda q, k=k: rrf(q, k=k)) for k in (1, 10, 30)]
    rows += [("rrf bm25 vote x%g" % w, lambda q, w=w: rrf(q, w_bm25=w)) for w in (0.5, 0.25)]
    rows += [("vectors lead w=%g" % w, lambda q, w=w: vectors_lead(q, w)) for w in (0.5, 0.3, 0.2, 0.1, 0.05, 0.02)]
    print("R@1 / R@3 per language, %d questions" % len(qs))
    for name, rank in rows:
        print("%-22s %s" % (name, recall(qs, rank)))


if __name__ == "__main__":
    main()
