#!/usr/bin/env python3
"""kb_gen.py OUTDIR [FILES] [SECTIONS] - a large synthetic knowledge base for the
retrieval latency benchmark (docs/KNOWLEDGE.md): FILES Markdown files (default
250) of SECTIONS sections (default 20), so at least FILES x SECTIONS chunks
(`kb add` never lets a chunk span two sections). Each section is 5-8
sentences drawn from examples/kb (both languages), with the numbers changed
and a district name added: the same vocabulary as the real base, so BM25 and
the vector scan do as much work per chunk as they would on real notes.
Deterministic (seeded). Standard library only.
"""
import glob
import os
import random
import re
import sys

out = sys.argv[1]
n_files = int(sys.argv[2]) if len(sys.argv) > 2 else 250
n_sections = int(sys.argv[3]) if len(sys.argv) > 3 else 20
rng = random.Random(21)
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "kb")
en, zh = [], []
for path in sorted(glob.glob(os.path.join(here, "*.md"))):
    text = "\n".join(l for l in open(path, encoding="utf-8") if not l.startswith("#"))
    if path.endswith(".zh.md"):
        zh += [s for s in re.split(r"(?<=[。！？；])", text.replace("\n", "")) if len(s) > 4]
    else:
        en += [s for s in re.split(r"(?<=[.!?])\s+", text.replace("\n", " ")) if len(s) > 20]
districts = ["Riverside", "Hillview", "Old Town", "Harbour", "East Gate", "Lakeside", "North Park", "Westbridge"]
districts_zh = ["江滨区", "山景区", "老城区", "港湾区", "东门区", "湖畔区", "北园区", "西桥区"]
os.makedirs(out, exist_ok=True)
for f in range(n_files):
    lang_zh = f % 2 == 1
    lines = ["# %s %d" % ("服务说明" if lang_zh else "Service note", f)]
    for s in range(n_sections):
        d = rng.randrange(len(districts))
        lines.append("")
        lines.append("## %s %d" % (districts_zh[d] if lang_zh else districts[d], s))
        lines.append("")
        pool = zh if lang_zh else en
        sents = [re.sub(r"\d+", lambda m: str(rng.randint(1, 99)), rng.choice(pool)) for _ in range(rng.randint(5, 8))]
        lines.append(("" if lang_zh else " ").join(sents))
    with open(os.path.join(out, "note-%03d.%s.md" % (f, "zh" if lang_zh else "en")), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
