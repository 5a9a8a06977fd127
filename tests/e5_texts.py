#!/usr/bin/env python3
"""The 200 parity texts of tests/it_e5_real.sh, one per line on stdout.

Chinese and English hotline calls (tests/data/hotline_*.tsv), English prose
(tests/data/english-page.txt), code-switched mixes, texts longer than the
512-token window, and whitespace/Unicode edge cases (empty, spaces only,
runs of spaces, tabs, full-width forms, accents, emoji). Deterministic:
same texts on every run. Standard library only.
"""
import random
import re
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def utterances():
    out = []
    for name in ("hotline_utterances.tsv", "hotline_dev.tsv"):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#") and "\t" in line:
                out.append(line.split("\t", 1)[1].strip())
    return out


def main():
    rng = random.Random(17)
    calls = utterances()
    page = (DATA / "english-page.txt").read_text(encoding="utf-8")
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", page.replace("\n", " ")) if s.strip()]
    zh = [c for c in calls if re.search(r"[\u4e00-\u9fff]", c)]
    texts = list(calls)
    texts += sentences[:50]
    for _ in range(30):
        texts.append(rng.choice(zh) + " " + rng.choice(sentences)[:80] + " 谢谢")
    paras = " ".join(sentences)
    texts += [paras[: len(paras) // 2], ("社保 housing fund 公积金 " * 160).strip()]   # > 512 tokens: 2 and 3 windows
    texts += [
        "", " ", "   ", "hello   world", "  leading spaces", "trailing spaces   ", "tab\there",
        "ＡＢＣ１２３ full width", "café naïve résumé", "emoji 😀👍 call me", "ﬁ ligature ½ ⅓",
        "<s> not special </s>", "multiple!!! punctuation??? ...", "UPPER lower MiXeD", "电话：12345-67890",
        "一", "A", "‘quotes’ “double” «guillemets»", "\u3000全角空格\u3000", "ｶﾀｶﾅ half-width",
    ]
    while len(texts) < 200:
        texts.append(rng.choice(calls) + rng.choice(["", " ", "，", ", ", "  "]) + rng.choice(sentences)[:60])
    for t in texts[:200]:
        print(t.replace("\n", " "))


if __name__ == "__main__":
    main()
