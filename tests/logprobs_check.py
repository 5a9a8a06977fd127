#!/usr/bin/env python3
"""logprobs_check.py SB MODEL SOCK - a worker's logprobs against `switchboard logits`.

SOCK is a worker serving MODEL one request at a time (--parallel 1: the
single-sequence path). A greedy generate with logprobs and top_logprobs 5 must
give, at every position, the log-probability `switchboard logits --ids
PREFIX` computes for that same prefix (its top logit minus its log-sum-exp;
the greedy token is the top one) within 1e-4, and the same top tokens with
their log-probabilities. Then: with a grammar (json_schema) the values are
those of the masked distribution, so each position's top log-probabilities
sum to at most 1 and the chosen token is the top one; top_logprobs above 20
is refused. Run by tests/it_logprobs.sh.
"""
import json
import math
import subprocess
import sys

import itlib

sb, model, sock = sys.argv[1], sys.argv[2], sys.argv[3]
check = itlib.Checks(detail_max=400)
PROMPT = "The city hotline answers questions about"
N = 12

r = itlib.ipc_call(sock, "generate", {"prompt": PROMPT, "max_tokens": N, "temperature": 0, "logprobs": True,
                                      "top_logprobs": 5, "stop": []}, timeout=120)
res = r["result"]
lps = res["logprobs"]
prompt_ids = itlib.ipc_call(sock, "tokenize", {"text": PROMPT})["result"]["tokens"]
gen = [e["token"] for e in lps]
check(len(lps) == res["completion_tokens"] and all(len(e["top"]) == 5 for e in lps),
      f"one entry per generated token ({len(lps)}), 5 top each", repr(res)[:300])
check(b"".join(e["bytes"] for e in lps).decode("utf-8", "replace") == res["text"],
      "the entries' bytes spell the text", repr(res["text"]))
worst = 0.0
for i, e in enumerate(lps):
    # The row after prompt + gen[:i]: the same prefix the generation sampled from.
    ids = prompt_ids + gen[:i]
    out = subprocess.run([sb, "logits", "-m", model, "--ids", ",".join(map(str, ids)), "-n", "0", "--top", "5",
                          "-t", "1"], capture_output=True, text=True)
    doc = json.loads(out.stdout)
    row = doc["positions"][-1] if "positions" in doc else doc["logits"][-1]
    lse, top = row["lse"], row["top"]
    want_top = [(t, v - lse) for t, v in top]
    diffs = [abs(e["logprob"] - want_top[0][1])] + [abs(a["logprob"] - w[1]) for a, w in zip(e["top"], want_top)]
    worst = max(worst, *diffs)
    same = e["token"] == want_top[0][0] and [a["token"] for a in e["top"]] == [t for t, _ in want_top]
    if not check(same and max(diffs) <= 1e-4, f"position {i}: token {e['token']} logprob {e['logprob']:.6f}",
                 f"logits: {want_top}, ours: {[(a['token'], a['logprob']) for a in e['top']]}"):
        break
print(f"largest difference from switchboard logits: {worst:.2e}")

schema = '{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}'
r = itlib.ipc_call(sock, "generate", {"prompt": PROMPT, "max_tokens": 20, "temperature": 0, "logprobs": True,
                                      "top_logprobs": 20, "json_schema": schema}, timeout=120)
lps = r["result"]["logprobs"]
check(lps and all(sum(math.exp(a["logprob"]) for a in e["top"]) <= 1 + 1e-5 and e["top"][0]["token"] == e["token"]
                  for e in lps), "with a grammar: the masked distribution, the greedy token on top",
      repr(lps[:2])[:300])
first = lps[0]["top"]
check(first and all(a["bytes"].startswith(b"{") for a in first) and
      (len(first) == 20 or abs(sum(math.exp(a["logprob"]) for a in first) - 1) < 1e-5),
      f"the first position ranks only tokens that open the object ({len(first)} of them)",
      [(a["bytes"], a["logprob"]) for a in first])
r = itlib.ipc_call(sock, "generate", {"prompt": PROMPT, "max_tokens": 2, "logprobs": True, "top_logprobs": 21})
check(not r["ok"] and "top_logprobs" in r["error"]["message"], "top_logprobs 21 refused", repr(r))
sys.exit(check.summary())
