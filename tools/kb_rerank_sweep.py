#!/usr/bin/env python3
"""kb_rerank_sweep.py DUMP [--top-n 3,5,10,20] - what a rerank would give at
each candidate depth, from one `switchboard kb eval --dump DUMP` run.

A reranked run judges the top N passages of each list; the top n < N of the
same list are the same passages in the same order, so one run at N also
tells what n would give: the first n judged passages reordered by P(yes)
(rr) or by reciprocal rank fusion of the search's rank and P(yes)'s (rrf,
as sb_kb_rerank_fuse, k = 60), the rest in the search's order; latency =
the search + the judging of those n passages (each timed when judged).
For the plain modes (bm25, vector, hybrid) it prints recall@n: the ceiling
a rerank of their top n can reach. Prints recall@1/3/5 and MRR@10 per
language, as `kb eval` does. --judge: how well the judge separates the
expected source from the other judged passages, per mode and language.
Standard library only.
"""
import argparse, json, statistics

RRF_K = 60
DEPTH = 10  # MRR@10, as kb eval


def fuse(hits):
    """hits in the search's order, each with "p": sb_kb_rerank_fuse's order."""
    n = len(hits)
    f = []
    for i, h in enumerate(hits):
        rr = 1 + sum(1 for j, o in enumerate(hits) if o["p"] > h["p"] or (o["p"] == h["p"] and j < i))
        f.append(1 / (RRF_K + i + 1) + 1 / (RRF_K + rr))
    return [hits[i] for i in sorted(range(n), key=lambda i: (-f[i], i))]


def ranked(rec, n, how):
    hits = rec["hits"]
    head = hits[:n]
    if how == "rr":
        head = sorted(head, key=lambda h: -h["p"])  # stable: ties keep the search's order
    elif how == "rrf":
        head = fuse(head)
    return head + hits[n:]


def rank_of(hits, expected):
    for i, h in enumerate(hits):
        if h["source"] == expected:
            return i + 1
    return 0


def pct(v, p):
    v = sorted(v)
    return v[int(p * (len(v) - 1) + 0.5)] if v else 0


def row(name, lang, ranks, ms):
    n = len(ranks)
    if not n:  # a partial dump: no question of this language yet
        return
    r = lambda k: sum(1 for x in ranks if x and x <= k) / n
    mrr = sum(1 / x for x in ranks if x and x <= DEPTH) / n
    lat = "%8.0f %8.0f" % (pct(ms, .5), pct(ms, .95)) if ms else ""
    print("%-16s %-3s %4d  %5.3f  %5.3f  %5.3f  %5.3f %s" % (name, lang, n, r(1), r(3), r(5), mrr, lat))


def judge_report(recs):
    """Where the expected source is among the judged passages: how often the
    judge puts it first, its median P(yes) against the others', and the share
    of (expected, other) pairs it scores higher."""
    for mode in sorted({r["mode"] for r in recs if r["mode"].endswith("+rr")}):
        for lang in ("zh", "en"):
            rs = [r for r in recs if r["mode"] == mode and r["lang"] == lang]
            inside = first = wins = pairs = 0
            pe, po = [], []
            for r in rs:
                judged = [h for h in r["hits"] if "p" in h]
                exp = [h["p"] for h in judged if h["source"] == r["expected"]]
                oth = [h["p"] for h in judged if h["source"] != r["expected"]]
                if not exp:
                    continue
                inside += 1
                best = max(exp)
                first += best >= max(oth or [0])
                pe.append(best)
                po += oth
                wins += sum(1 for p in oth if best > p)
                pairs += len(oth)
            if inside:
                print("%-9s %s: expected among the judged for %d/%d, judged first %d; median P(yes) %.2f vs "
                      "others %.2f; pairs won %.0f %%" % (mode, lang, inside, len(rs), first, statistics.median(pe),
                                                          statistics.median(po or [0]), 100 * wins / max(pairs, 1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--top-n", default="3,5,10,20,30,50")
    ap.add_argument("--depths", default="10,20,30,50", help="recall@n of the plain lists")
    ap.add_argument("--judge", action="store_true", help="the judge's separation only")
    a = ap.parse_args()
    recs = [json.loads(l) for l in open(a.dump, encoding="utf-8") if l.endswith("\n")]  # a partial dump too
    if a.judge:
        return judge_report(recs)
    modes = []
    for r in recs:
        if r["mode"] not in modes:
            modes.append(r["mode"])
    print("%-16s %-3s %4s  %5s  %5s  %5s  %5s %8s %8s" % ("mode", "lng", "n", "R@1", "R@3", "R@5", "MRR", "p50 ms",
                                                           "p95 ms"))
    for mode in modes:
        rs = [r for r in recs if r["mode"] == mode]
        judged = min(sum(1 for h in r["hits"] if "p" in h) for r in rs)
        for lang in ("zh", "en"):
            lr = [r for r in rs if r["lang"] == lang]
            if not lr:  # a dump of one language's questions
                continue
            if not judged:
                row(mode, lang, [rank_of(r["hits"], r["expected"]) for r in lr], [r["search_ms"] for r in lr])
                for d in [int(x) for x in a.depths.split(",")]:
                    got = sum(1 for r in lr if 0 < rank_of(r["hits"], r["expected"]) <= d)
                    if len(lr[0]["hits"]) >= d:
                        print("%-16s %-3s  recall@%d %.3f" % (mode, lang, d, got / len(lr)))
                continue
            for n in [int(x) for x in a.top_n.split(",") if int(x) <= judged]:
                ms = [r["search_ms"] + sum(h["judge_ms"] for h in r["hits"][:n]) for r in lr]
                for how in ("rr", "rrf"):
                    row("%s n=%d %s" % (mode.split("+")[0][:3], n, how), lang,
                        [rank_of(ranked(r, n, how), r["expected"]) for r in lr], ms)
    js = [h["judge_ms"] for r in recs for h in r["hits"] if "judge_ms" in h]
    if js:
        print("judging one passage: p50 %.0f ms, p95 %.0f ms, mean %.0f ms (%d passages)" %
              (pct(js, .5), pct(js, .95), statistics.mean(js), len(js)))


main()
