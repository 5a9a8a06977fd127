#!/usr/bin/env python3
"""Compare `switchboard logits` output with a llama.cpp reference (golden JSON).

The rule (shared/README.md): at every position the reference's top-10 logits
agree within TOL (0.25; 0.02 for F16 models), the argmax agrees wherever the
reference's top two differ by more than 0.25, and the greedy tokens are
identical up to the first step whose reference greedy_gap is below 0.1.

usage: golden_check.py REF.json OURS.json [--tol T] [--quiet]
Exit 0 when it matches; 1 with a report of every violation otherwise.
"""
import json
import sys


def check(ref, ours, tol):
    errs = []
    if ref["tokens"] != ours["tokens"]:
        errs.append(f"tokens differ: ref {ref['tokens'][:12]}... ours {ours['tokens'][:12]}...")
        return errs, 0.0
    if len(ours["positions"]) != len(ref["positions"]):
        errs.append(f"{len(ours['positions'])} positions, reference has {len(ref['positions'])}")
        return errs, 0.0
    worst = 0.0
    for i, (rp, op) in enumerate(zip(ref["positions"], ref and ours["positions"])):
        # Our top list may rank near-ties differently, so look ids up in the
        # full map we printed (top K, K >= 10) and require every reference id.
        omap = {t: v for t, v in op["top"]}
        for tok, val in rp["top"]:
            if tok not in omap:
                # Outside our top-K: it must then be below our K-th value.
                kth = min(v for _, v in op["top"])
                if val - kth > tol:
                    errs.append(f"pos {i}: token {tok} ref {val:.4f} missing from our top-{len(op['top'])} (our min {kth:.4f})")
                continue
            d = abs(omap[tok] - val)
            worst = max(worst, d)
            if d > tol:
                errs.append(f"pos {i}: token {tok} logit {omap[tok]:.4f}, reference {val:.4f} (|d| {d:.4f} > {tol})")
        r0, r1 = rp["top"][0], rp["top"][1]
        if r0[1] - r1[1] > 0.25 and op["top"][0][0] != r0[0]:
            errs.append(f"pos {i}: argmax {op['top'][0][0]}, reference {r0[0]} (ref margin {r0[1]-r1[1]:.3f})")
        if abs(op["lse"] - rp["lse"]) > tol:
            errs.append(f"pos {i}: lse {op['lse']:.4f}, reference {rp['lse']:.4f}")
    rg, og, gaps = ref["greedy"], ours["greedy"], ref["greedy_gap"]
    for s, (a, b) in enumerate(zip(rg, og)):
        if gaps[s] < 0.1:
            break  # a near tie: from here on either choice is right
        if a != b:
            errs.append(f"greedy step {s}: token {b}, reference {a} (ref gap {gaps[s]:.3f})")
            break
    if len(og) < len(rg):
        errs.append(f"only {len(og)} greedy tokens, reference has {len(rg)}")
    return errs, worst


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    tol = 0.25
    if "--tol" in sys.argv:
        tol = float(sys.argv[sys.argv.index("--tol") + 1])
        args.remove(sys.argv[sys.argv.index("--tol") + 1])
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ref = json.load(open(args[0]))
    ours = json.load(open(args[1]))
    errs, worst = check(ref, ours, tol)
    name = ref.get("model", args[0])
    if errs:
        print(f"FAIL {name}: {len(errs)} violations (max |dlogit| {worst:.4f}, tol {tol})")
        for e in errs[:20]:
            print("   ", e)
        return 1
    if "--quiet" not in sys.argv:
        print(f"ok   {name}: max |dlogit| {worst:.4f} (tol {tol})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
