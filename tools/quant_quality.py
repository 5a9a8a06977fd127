#!/usr/bin/env python3
"""Quality and speed of `switchboard quantize` next to llama-quantize.

  tools/quant_quality.py fixtures     every TYPE x tiny fixture: llama.cpp loads
                                      our file; mean |logit - F16 logit| of ours
                                      and of llama-quantize's (our engine)
  tools/quant_quality.py real         models/ dequantized to F16, then Q4_K_M by
                                      both tools: perplexity (switchboard
                                      perplexity -c 256 on english-page.txt)
  tools/quant_quality.py speed        quantize throughput, 2 threads, both tools
                                      (median of 3, alternating)

Needs bin/switchboard (or $SB_BIN), build/quant_logits (or $QUANT_LOGITS; build
line in tools/quant_logits.c) and tools/llamacpp.sh's llama.cpp. Prints
markdown tables (docs/QUANTIZE.md and docs/PERFORMANCE.md quote them).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SB = os.environ.get("SB_BIN", os.path.join(ROOT, "bin/switchboard"))
TYPES = ["Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_0", "Q4_1", "Q4_K_S", "Q4_K_M", "Q5_0", "Q5_1",
         "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0"]
FIXTURES = ["tiny-llama-spm", "tiny-phi3", "tiny-llama3"]


def llamacpp_bin():
    out = subprocess.run([os.path.join(ROOT, "tools/llamacpp.sh"), "--env"], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("export LLAMACPP_BIN="):
            return line.split("=", 1)[1].strip("'\"")
    sys.exit("quant_quality: no LLAMACPP_BIN")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit(f"quant_quality: {' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return r.stdout


QL = os.environ.get("QUANT_LOGITS", os.path.join(ROOT, "build/quant_logits"))


def dlogits(f16, ids, models):
    """mean |logit - F16 logit| of each model, over every position and vocab
    entry, from our engine (tools/quant_logits.c)."""
    out = run([QL, f16, ",".join(map(str, ids))] + models)
    return [float(x) for x in out.split()]


def bpw(path):
    """Bits per weight over all tensors, from our inspect output."""
    out = run([SB, "inspect", path])
    for line in out.splitlines():
        if line.startswith("bits per weight:"):
            return float(line.split(":")[1])
    return float("nan")


def fixtures(lbin):
    print("| model | TYPE | bpw | mean abs dlogit, ours | llama-quantize's | ratio | same bytes | llama.cpp loads ours |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for fx in FIXTURES:
            f16 = f"tests/data/{fx}-f16.gguf"
            gold = json.load(open(f"tests/data/golden/{fx}-f16.forced.json"))
            ids = gold["tokens"]
            for t in TYPES:
                ours, ref = f"{tmp}/ours.gguf", f"{tmp}/ref.gguf"
                run([SB, "quantize", "--quiet", f16, ours, t])
                run([os.path.join(lbin, "llama-quantize"), f16, ref, t, "2"])
                loads = subprocess.run([sys.executable, "tools/llama_ref.py", "-m", ours, "--ids",
                                        ",".join(map(str, ids)), "-n", "1"], capture_output=True).returncode == 0
                d_ours, d_ref = dlogits(f16, ids, [ours, ref])
                same = open(ours, "rb").read() == open(ref, "rb").read()
                ratio = d_ours / d_ref if d_ref else 1.0
                worst = max(worst, ratio)
                print(f"| {fx} | {t} | {bpw(ours):.2f} | {d_ours:.4f} | {d_ref:.4f} | {ratio:.3f} | "
                      f"{'yes' if same else 'no'} | {'yes' if loads else 'NO'} |", flush=True)
            # a shared fixture made by an older llama-quantize, where it differs
            for t in TYPES:
                fixture = f"tests/data/{fx}-{t}.gguf"
                if not os.path.exists(fixture):
                    continue
                run([SB, "quantize", "--quiet", f16, f"{tmp}/ours.gguf", t])
                if open(fixture, "rb").read() == open(f"{tmp}/ours.gguf", "rb").read():
                    continue
                d_ours, d_fix = dlogits(f16, ids, [f"{tmp}/ours.gguf", fixture])
                print(f"| {fx} | {t} (vs shared fixture) | {bpw(fixture):.2f} | {d_ours:.4f} | {d_fix:.4f} | "
                      f"{d_ours / d_fix:.3f} | no | - |", flush=True)
    print(f"\nworst ratio ours / llama-quantize: {worst:.3f}")


def perplexity(model, text, ctx):
    d = json.loads(run([SB, "perplexity", "-m", model, "-f", text, "-c", str(ctx), "-t", "2", "--json"]))
    return d["ppl"]


def real(lbin):
    models = [m for m in ["smollm2-135m-instruct.Q4_1", "qwen2.5-coder-0.5b-instruct.Q4_K_M"]
              if os.path.exists(f"models/{m}.gguf")]
    if not models:
        sys.exit("quant_quality: no models/ (make models)")
    print("| model (dequantized to F16) | F16 ppl | ours Q4_K_M ppl | llama-quantize Q4_K_M ppl | diff | same bytes |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "build")) as tmp:
        for m in models:
            f16, ours, ref = f"{tmp}/f16.gguf", f"{tmp}/ours.gguf", f"{tmp}/ref.gguf"
            run([SB, "quantize", "--quiet", "--allow-requantize", f"models/{m}.gguf", f16, "F16"])
            run([SB, "quantize", "--quiet", f16, ours, "Q4_K_M"])
            run([os.path.join(lbin, "llama-quantize"), f16, ref, "Q4_K_M", "2"])
            p = {k: perplexity(v, "tests/data/english-page.txt", 256) for k, v in
                 (("f16", f16), ("ours", ours), ("ref", ref))}
            same = open(ours, "rb").read() == open(ref, "rb").read()
            print(f"| {m} | {p['f16']:.4f} | {p['ours']:.4f} | {p['ref']:.4f} | "
                  f"{100 * (p['ours'] / p['ref'] - 1):+.3f}% | {'yes' if same else 'no'} |", flush=True)


def speed(lbin):
    """Both tools on the same F16 input (a real model dequantized by us), 2
    threads, alternating, median of 3; also checks the outputs are equal."""
    inputs = [("smollm2-135m-instruct.Q4_1", ["Q4_K_M", "Q8_0", "Q2_K", "Q6_K", "Q4_0"]),
              ("qwen2.5-coder-0.5b-instruct.Q4_K_M", ["Q4_K_M", "Q8_0", "Q2_K", "Q6_K", "Q4_0"]),
              ("bench/tinyllama-1.1b-shape.Q2_K", ["Q4_K_M", "Q8_0"])]
    print("| input (F16) | TYPE | switchboard quantize -t 2 | llama-quantize, 2 threads | ratio | same bytes |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "build")) as tmp:
        for m, types in inputs:
            if not os.path.exists(f"models/{m}.gguf"):
                continue
            f16 = f"{tmp}/f16.gguf"
            run([SB, "quantize", "--quiet", "--allow-requantize", f"models/{m}.gguf", f16, "F16"])
            mb = os.path.getsize(f16) / 1e6
            for t in types:
                ours, ref = [], []
                for _ in range(3):
                    t0 = time.time()
                    run([SB, "quantize", "--quiet", "-t", "2", f16, f"{tmp}/o.gguf", t])
                    ours.append(time.time() - t0)
                    t0 = time.time()
                    run([os.path.join(lbin, "llama-quantize"), f16, f"{tmp}/r.gguf", t, "2"])
                    ref.append(time.time() - t0)
                same = subprocess.run(["cmp", "-s", f"{tmp}/o.gguf", f"{tmp}/r.gguf"]).returncode == 0
                o, r = statistics.median(ours), statistics.median(ref)
                name = m.split("/")[-1].rsplit(".", 1)[0]
                print(f"| {name} ({mb:.0f} MB) | {t} | {o:.2f} s ({mb / o:.0f} MB/s) | "
                      f"{r:.2f} s ({mb / r:.0f} MB/s) | {r / o:.2f}x | {'yes' if same else 'no'} |", flush=True)
            os.unlink(f16)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (2 cores)")


def main():
    os.chdir(ROOT)
    what = sys.argv[1] if len(sys.argv) > 1 else "fixtures"
    lbin = llamacpp_bin()
    {"fixtures": fixtures, "real": real, "speed": speed}[what](lbin)


if __name__ == "__main__":
    main()
