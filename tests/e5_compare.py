#!/usr/bin/env python3
"""Compare two runs of embed-style output (tests/it_e5_real.sh, it_embed.sh).

  e5_compare.py tokens A B          lines of ids: how many agree
  e5_compare.py vectors A B MIN     JSON vectors: cosine min/mean; fail below MIN
Prints one summary line; exit status 1 when a bound is missed.
"""
import json
import math
import sys


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def main():
    mode, a, b = sys.argv[1], lines(sys.argv[2]), lines(sys.argv[3])
    if len(a) != len(b) or not a:
        print(f"FAIL: {len(a)} vs {len(b)} lines")
        return 1
    if mode == "tokens":
        bad = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        print(f"token ids identical on {len(a) - len(bad)}/{len(a)} texts" + (f"; first differing line {bad[0] + 1}" if bad else ""))
        for i in bad[:3]:
            print(f"  line {i + 1}:\n    ref  {a[i][:200]}\n    ours {b[i][:200]}")
        return 1 if bad else 0
    bound = float(sys.argv[4])
    cos = []
    for x, y in zip(a, b):
        u, v = json.loads(x), json.loads(y)
        nu, nv = math.sqrt(sum(t * t for t in u)), math.sqrt(sum(t * t for t in v))
        cos.append(sum(p * q for p, q in zip(u, v)) / (nu * nv))
    worst = min(range(len(cos)), key=cos.__getitem__)
    print(f"cosine over {len(cos)} texts: min {min(cos):.6f} (line {worst + 1}), mean {sum(cos) / len(cos):.6f}, bound {bound}")
    return 0 if min(cos) >= bound else 1


if __name__ == "__main__":
    sys.exit(main())
