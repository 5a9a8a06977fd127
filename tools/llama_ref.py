#!/usr/bin/env python3
"""llama.cpp reference outputs, for comparing Switchboard against llama.cpp.

Runs the real llama.cpp (through the llama_cpp Python bindings that
tools/llamacpp.sh installs) on the CPU with 2 threads and an F16 KV cache,
the same setup as ../shared/fixtures/golden/*.json.

  llama_ref.py -m M --ids 1,2,3 [-n 24] [--top 10]     golden-schema JSON
  llama_ref.py -m M --prompt TEXT [-n 24]               (BOS if the model asks, specials parsed)
  llama_ref.py -m M --tokenize TEXT [--no-bos] [--no-special]
  llama_ref.py -m M --perplexity FILE [-c 512] [--chunks N] [--json]
  llama_ref.py --compare REF.json OTHER.json [--tol T]  diffs + match verdict (exit 1 if not)

JSON schema (the same as `switchboard logits`): tokens; positions[i] = {lse,
top: [[id, logit] x K]} for every input position, all from ONE batched
forward pass; greedy = N argmax tokens, each decoded one at a time after the
prompt; greedy_gap[i] = best minus second-best logit at greedy step i.
"""
import argparse
import contextlib
import json
import math
import os
import sys

import numpy as np

try:
    import llama_cpp
except ImportError:
    sys.exit("llama_ref: llama_cpp is not installed; run tools/llamacpp.sh")


@contextlib.contextmanager
def quiet_stderr(enabled=True):
    """llama.cpp logs loader chatter to fd 2; hide it unless --verbose."""
    if not enabled:
        yield
        return
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def load(path, n_ctx, threads, verbose, n_batch=512, flash_attn=False):
    if not os.path.isfile(path):
        sys.exit(f"llama_ref: {path}: no such file")
    with quiet_stderr(not verbose):
        return llama_cpp.Llama(
            model_path=path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
            n_threads=threads, n_threads_batch=threads,
            logits_all=True,                       # logits for every position
            type_k=llama_cpp.GGML_TYPE_F16,        # F16 KV, as the goldens
            type_v=llama_cpp.GGML_TYPE_F16,
            flash_attn=flash_attn,                 # off: the goldens use the plain KQ path
            seed=0, verbose=verbose)


def tokenize(llm, text, add_bos=True, special=True):
    # add_bos here means llama.cpp's add_special: BOS only if the model's
    # tokenizer.ggml.add_bos_token asks for it (Qwen2 does not).
    return llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)


def top_k(row, k):
    order = np.argsort(-row, kind="stable")[:k]
    return [[int(i), round(float(row[i]), 6)] for i in order]


def log_sum_exp(row):
    row = row.astype(np.float64)
    m = row.max()
    return float(m + math.log(np.exp(row - m).sum()))


def logits_report(llm, model_path, tokens, n_greedy, k):
    n_vocab = llm.n_vocab()
    llm.reset()
    llm.eval(tokens)                                    # one batched pass
    scores = np.array(llm.scores[:len(tokens)], copy=True)
    positions = [{"lse": round(log_sum_exp(r), 6), "top": top_k(r, k)} for r in scores]

    greedy, gaps = [], []
    row = scores[-1]
    for step in range(n_greedy):
        best2 = np.argsort(-row, kind="stable")[:2]
        tok = int(best2[0])
        greedy.append(tok)
        gaps.append(round(float(row[best2[0]] - row[best2[1]]), 4))
        if step + 1 < n_greedy:
            llm.eval([tok])                             # one token at a time
            row = np.array(llm.scores[llm.n_tokens - 1], copy=True)
    return {"model": os.path.basename(model_path), "n_vocab": n_vocab,
            "tokens": [int(t) for t in tokens], "positions": positions,
            "greedy": greedy, "greedy_gap": gaps}


def dump_golden(report):
    """Same layout as the published goldens: one position per line."""
    compact = lambda v: json.dumps(v, separators=(",", ":"))
    head = (f'{{"model":{compact(report["model"])},"n_vocab":{report["n_vocab"]},'
            f'"tokens":{compact(report["tokens"])},\n"positions":[\n')
    body = ",\n".join(compact(p) for p in report["positions"])
    tail = (f'\n],\n"greedy":{compact(report["greedy"])},'
            f'\n"greedy_gap":{compact(report["greedy_gap"])}}}\n')
    return head + body + tail


def perplexity(llm, text, n_ctx, max_chunks, as_json):
    """llama-perplexity's method: split the tokenized text into n_ctx chunks,
    put BOS first if the model uses one, and score only the second half of each
    chunk (tokens first+1 .. n_ctx-1 with first = n_ctx/2), so every scored
    token has at least n_ctx/2 tokens of context."""
    tokens = tokenize(llm, text, add_bos=True, special=False)
    bos = llm.token_bos()
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model)))
    n_chunks = len(tokens) // n_ctx
    if max_chunks > 0:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks < 1:
        sys.exit(f"llama_ref: need at least {n_ctx} tokens, the text has {len(tokens)}")
    first = n_ctx // 2
    nll_sum, count, per_chunk = 0.0, 0, []
    for c in range(n_chunks):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if add_bos:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[:n_ctx], dtype=np.float64)
        for j in range(first, n_ctx - 1):
            row = logits[j]
            m = row.max()
            lse = m + math.log(np.exp(row - m).sum())
            nll_sum += lse - row[chunk[j + 1]]
            count += 1
        per_chunk.append(math.exp(nll_sum / count))
        if not as_json:
            print(f"[{c + 1}]{per_chunk[-1]:.4f}", end=",", flush=True)
    ppl = math.exp(nll_sum / count)
    if as_json:
        print(json.dumps({"n_ctx": n_ctx, "n_chunks": n_chunks, "n_tokens": len(tokens),
                          "scored": count, "nll": nll_sum / count, "ppl": ppl,
                          "per_chunk": per_chunk}))
    else:
        print(f"\nFinal estimate: PPL = {ppl:.4f} ({n_chunks} chunks of {n_ctx}, {count} tokens scored)")


def compare(path_ref, path_other, tol=None):
    """Max |difference| of lse and top logits (matched by token id), and the
    verdict of ../shared/README.md's rule with REF as the reference: top-K
    logits within tol (0.25; 0.02 for F16 models), argmax equal wherever the
    reference's top two differ by > 0.25, greedy equal up to the first step
    whose greedy_gap < 0.1. Exit status 1 when it does not match."""
    a, b = (json.load(open(p)) for p in (path_ref, path_other))
    if tol is None:
        tol = 0.02 if "f16" in a.get("model", "").lower() else 0.25
    worst_lse = worst_logit = 0.0
    missing, argmax_bad = 0, []
    for pos, (pa, pb) in enumerate(zip(a["positions"], b["positions"])):
        worst_lse = max(worst_lse, abs(pa["lse"] - pb["lse"]))
        logits_b = dict((int(i), v) for i, v in pb["top"])
        for i, v in pa["top"]:
            if int(i) in logits_b:
                worst_logit = max(worst_logit, abs(v - logits_b[int(i)]))
            else:
                missing += 1
        if pa["top"][0][1] - pa["top"][1][1] > 0.25 and pa["top"][0][0] != pb["top"][0][0]:
            argmax_bad.append(pos)
    n_same = 0
    for x, y in zip(a["greedy"], b["greedy"]):
        if x != y:
            break
        n_same += 1
    gaps = a.get("greedy_gap", [])
    must_match = next((i for i, g in enumerate(gaps) if g < 0.1), len(a["greedy"]))
    ok = (a["tokens"] == b["tokens"] and len(a["positions"]) == len(b["positions"])
          and worst_logit <= tol and not argmax_bad and n_same >= min(must_match, len(a["greedy"])))
    print(json.dumps({"tokens_equal": a["tokens"] == b["tokens"],
                      "positions": [len(a["positions"]), len(b["positions"])],
                      "max_lse_diff": round(worst_lse, 7), "max_top_logit_diff": round(worst_logit, 7),
                      "top_ids_not_in_other": missing, "argmax_mismatch_at": argmax_bad,
                      "greedy_equal_prefix": n_same, "greedy_must_match": must_match,
                      "tol": tol, "matches": ok}))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--ids", help="comma-separated token ids (used as given, no BOS added)")
    mode.add_argument("-p", "--prompt", help="text; BOS if the model asks, special tokens parsed")
    mode.add_argument("--tokenize", metavar="TEXT")
    mode.add_argument("--perplexity", metavar="FILE")
    mode.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"))
    ap.add_argument("-n", type=int, default=24, help="greedy tokens (default 24)")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx", type=int, default=0,
                    help="context (default: prompt+n rounded up; 512 for --perplexity)")
    ap.add_argument("--chunks", type=int, default=0, help="--perplexity: at most N chunks")
    ap.add_argument("--no-bos", action="store_true")
    ap.add_argument("--no-special", action="store_true")
    ap.add_argument("--tol", type=float, help="--compare: logit tolerance (default 0.25, F16 0.02)")
    ap.add_argument("--json", action="store_true", help="--perplexity: print one JSON object")
    ap.add_argument("-o", "--output", help="write the JSON here instead of stdout")
    ap.add_argument("--flash-attn", action="store_true",
                    help="use flash attention (llama-perplexity/llama-cli default on CPU; "
                         "the goldens are without it)")
    ap.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    args = ap.parse_args()

    if args.compare:
        sys.exit(0 if compare(*args.compare, tol=args.tol) else 1)
    if not args.model:
        ap.error("-m MODEL is required")

    if args.tokenize is not None:
        llm = load(args.model, 512, args.threads, args.verbose)
        ids = tokenize(llm, args.tokenize, not args.no_bos, not args.no_special)
        print(" ".join(map(str, ids)))
        return
    if args.perplexity:
        n_ctx = args.ctx or 512
        with open(args.perplexity, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        llm = load(args.model, n_ctx, args.threads, args.verbose, n_batch=n_ctx,
                   flash_attn=args.flash_attn)
        perplexity(llm, text, n_ctx, args.chunks, args.json)
        return

    llm = load(args.model, max(args.ctx, 512), args.threads, args.verbose,
               flash_attn=args.flash_attn)
    if args.ids is not None:
        tokens = [int(x) for x in args.ids.replace(" ", "").split(",") if x]
    else:
        tokens = tokenize(llm, args.prompt, True, True)
    need = len(tokens) + args.n
    if need > llm.n_ctx():                   # reload with room for the greedy tail
        llm = load(args.model, (need + 511) // 512 * 512, args.threads, args.verbose,
                   flash_attn=args.flash_attn)
    if not tokens:
        sys.exit("llama_ref: no tokens to evaluate")
    out = dump_golden(logits_report(llm, args.model, tokens, args.n, args.top))
    if args.output:
        with open(args.output, "w") as f:
            f.write(out)
    else:
        sys.stdout.write(out)


if __name__ == "__main__":
    main()
