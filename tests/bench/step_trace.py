#!/usr/bin/env python3
"""Sum up a worker's per-step trace (where a burst's time goes).

    SB_STEP_TRACE=/tmp/steps python3 tests/bench/hotline_burst.py --rounds 1
    python3 tests/bench/step_trace.py /tmp/steps.PID [--steps]

The trace (worker/engine/batch.c, sb_engine_step) has one line per batched
step: its start, tasks running, parts, tokens, one-token parts, rows sampled
and of them under a grammar mask, ms planning / in the forward pass / after
it (sampling, masks, emitting). The steps are cut into segments where the
worker idled > 2 s (warm-up, a mode, the next mode...), and per segment this
prints: the span, the time in passes and after them, the gaps, prompt and
decode tokens, decode-only steps and their mean batch, the median pass time
per batch size, and how many steps ran with how many tasks. --steps lists
every step too.
"""
import collections
import sys


def load(path):
    rows = []
    for line in open(path):
        f = line.split()
        d = {f[i]: float(f[i + 1]) for i in range(1, len(f) - 1, 2)}
        d["t"] = float(f[0])
        d["end"] = d["t"] + (d["plan"] + d["pass"] + d["post"]) / 1e3
        rows.append(d)
    return rows


def segments(rows, idle_s=2.0):
    segs = [[rows[0]]] if rows else []
    for a, b in zip(rows, rows[1:]):
        if b["t"] - a["end"] > idle_s:
            segs.append([])
        segs[-1].append(b)
    return segs


def median(xs):
    return sorted(xs)[len(xs) // 2]


def report(si, rows, steps):
    t0 = rows[0]["t"]
    tot = lambda k, rs=rows: sum(r[k] for r in rs)
    print(f"== segment {si}: {len(rows)} steps over {rows[-1]['end'] - t0:.2f} s")
    print(f"  forward passes {tot('pass') / 1e3:.2f} s, after them {tot('post') / 1e3:.2f} s "
          f"(in steps with masked rows {tot('post', [r for r in rows if r['mask'] > 0]) / 1e3:.2f} s, "
          f"{int(tot('mask'))} masked rows), planning {tot('plan') / 1e3:.2f} s, "
          f"gaps {sum(b['t'] - a['end'] for a, b in zip(rows, rows[1:])):.2f} s")
    dec = [r for r in rows if r["tok"] == r["dec"]]
    pre = [r for r in rows if r["tok"] > r["dec"]]
    print(f"  tokens {int(tot('tok'))}: one-token parts {int(tot('dec'))}, prompt {int(tot('tok') - tot('dec'))}")
    print(f"  decode-only steps {len(dec)}: {tot('pass', dec) / 1e3:.2f} s, {int(tot('tok', dec))} tokens, "
          f"mean batch {tot('tok', dec) / max(1, len(dec)):.2f}")
    print(f"  steps with prompt tokens {len(pre)}: {tot('pass', pre) / 1e3:.2f} s, {int(tot('tok', pre))} tokens "
          f"({int(tot('dec', pre))} of them one-token parts)")
    by = collections.defaultdict(list)
    for r in dec:
        by[int(r["dec"])].append(r["pass"])
    print("  decode pass ms by batch: " + " ".join(f"B{k}: {len(v)}x {median(v):.0f}" for k, v in sorted(by.items())))
    print("  steps by tasks running: " + str(sorted(collections.Counter(int(r["run"]) for r in rows).items())))
    if steps:
        for r in rows:
            print(f"   {r['t'] - t0:8.3f} run {int(r['run'])} tok {int(r['tok'])} dec {int(r['dec'])} "
                  f"mask {int(r['mask'])} pass {r['pass']:.0f} post {r['post']:.0f}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = load(sys.argv[1])
    for si, seg in enumerate(segments(rows)):
        report(si, seg, "--steps" in sys.argv)


if __name__ == "__main__":
    main()
