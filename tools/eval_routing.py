#!/usr/bin/env python3
"""eval_routing.py URL [TSV] [--pipeline P] [--until STAGE] - routing accuracy.

Sends every utterance of the TSV (label<TAB>utterance, # comments; \\n \\r
\\t \\\\ in an utterance are escapes) to
POST URL/v1/pipelines/P with {"input": ..., "until": STAGE} (the intent stage
only, by default: the rest of the pipeline does not change the intent) and
prints each answer, the confusion list, and the accuracy overall and per
language. Cache-Control: no-cache, so the cache never answers for the model.
Exit 0 whatever the accuracy (it is a measurement, not a test).
"""
import argparse, json, re, sys, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("tsv", nargs="?", default="tests/data/hotline_utterances.tsv")
ap.add_argument("--pipeline", default="hotline")
ap.add_argument("--until", default="route")
ap.add_argument("--key", default=None)
a = ap.parse_args()

ESC = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}


def unescape(t):
    """\\n \\r \\t \\\\ -> the character: a TSV field cannot hold a line break,
    and a hostile caller's forged lines need one (hotline_injection.tsv)."""
    return re.sub(r"\\([nrt\\])", lambda m: ESC[m.group(1)], t)


rows = []
for line in open(a.tsv, encoding="utf-8"):
    line = line.rstrip("\n")
    if not line or line.startswith("#"):
        continue
    f = line.split("\t")   # label<TAB>utterance, or label<TAB>lang<TAB>utterance<TAB>style (routing_corpus.tsv)
    label, text = (f[0], "\t".join(f[1:])) if len(f) < 4 else (f[0], f[2])
    rows.append((label, unescape(text)))

ok = 0
by_lang = {"zh": [0, 0], "en": [0, 0]}
misses = []
lat = []
t0 = time.time()
for i, (label, text) in enumerate(rows):
    body = {"input": text}
    if a.until:
        body["until"] = a.until
    req = urllib.request.Request(a.url.rstrip("/") + "/v1/pipelines/" + a.pipeline,
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
    if a.key:
        req.add_header("Authorization", "Bearer " + a.key)
    t = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        res = json.load(r)
    lat.append(time.time() - t)
    got, conf = res["intent"], res["confidence"]
    lang = "zh" if re.search("[\u4e00-\u9fff]", text) else "en"
    hit = got == label
    ok += hit
    by_lang[lang][0] += hit
    by_lang[lang][1] += 1
    shown = text.replace("\r", "\\r").replace("\n", "\\n")
    if not hit:
        misses.append((label, got, conf, shown))
    print(f"{'ok ' if hit else 'BAD'} {time.time() - t:6.2f}s  {label:24s} -> {got:24s} p={conf:.2f}  {shown}")
    sys.stdout.flush()

n = len(rows)
print()
for label, got, conf, text in misses:
    print(f"miss: expected {label}, got {got} ({conf:.2f}): {text}")
print(f"\naccuracy: {ok}/{n} = {100.0 * ok / n:.1f}%  (zh {by_lang['zh'][0]}/{by_lang['zh'][1]}, "
      f"en {by_lang['en'][0]}/{by_lang['en'][1]})  in {time.time() - t0:.1f} s")
lat.sort()
print(f"route time per call through HTTP: p50 {1e3 * lat[len(lat) // 2]:.1f} ms, "
      f"p95 {1e3 * lat[min(len(lat) - 1, int(0.95 * len(lat)))]:.1f} ms, max {1e3 * lat[-1]:.1f} ms")
