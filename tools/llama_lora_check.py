#!/usr/bin/env python3
"""Does llama.cpp load our encoder LoRA adapter, and do its vectors match ours?

    tools/llama_lora_check.py MODEL.gguf ADAPTER.gguf [TEXT...]

Embeds each TEXT (default: four hotline calls, Chinese and English) with
`switchboard embed` (e5's "query: " prefix) and with llama-cpp-python
(`Llama(..., embedding=True, lora_path=ADAPTER)`, mean pooling from the
model's bert.pooling_type, normalised), without and with the adapter, and
prints the cosine between the two implementations and how far the adapter
moves each vector in each. Exit 1 if any cosine between the two is below
0.999. Needs llama-cpp-python (tools/llamacpp.sh installs the reference
build); not part of `make check`.
"""
import json
import math
import os
import subprocess
import sys

TEXTS = ["loud music at 2 am from the restaurant downstairs", "公积金怎么提取出来付房租",
         "How do I file my annual income tax return?", "电表是不是坏了怎么走得这么快"]


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def ours(sb, model, adapter, texts):
    args = [sb, "embed", "-m", model] + (["--adapter", adapter] if adapter else []) + texts
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def theirs(model, adapter, texts):
    import llama_cpp
    kw = dict(model_path=model, embedding=True, n_threads=1, n_ctx=512, verbose=False)
    if adapter:
        kw["lora_path"] = adapter
    m = llama_cpp.Llama(**kw)
    return [m.embed("query: " + t, normalize=True) for t in texts]


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) > 1 else 2
    model, adapter, texts = sys.argv[1], sys.argv[2], sys.argv[3:] or TEXTS
    sb = os.environ.get("SB_BIN", "bin/switchboard")
    of, oa = ours(sb, model, None, texts), ours(sb, model, adapter, texts)
    tf, ta = theirs(model, None, texts), theirs(model, adapter, texts)
    worst = 1.0
    print("cos(ours, llama.cpp) frozen / adapted | cos(frozen, adapted) ours / llama.cpp | text")
    for i, t in enumerate(texts):
        c0, c1 = cos(of[i], tf[i]), cos(oa[i], ta[i])
        worst = min(worst, c0, c1)
        print("%.6f / %.6f | %.4f / %.4f | %s" % (c0, c1, cos(of[i], oa[i]), cos(tf[i], ta[i]), t))
    print("worst cosine between the implementations: %.6f" % worst)
    return 0 if worst >= 0.999 else 1


if __name__ == "__main__":
    sys.exit(main())
