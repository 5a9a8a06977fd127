"""Speculation through real workers (docs/SPECULATIVE.md, "In the runtime").

usage: spec_worker.py SOCK_PLAIN SOCK_SPEC PROMPT_FILE [ROUNDS] [GEN]

Sends the prompt file's text (special tokens parsed: the hotline files carry
the Qwen chat template) as one generate request at a time, alternately to a
worker without speculation and one with it (same --parallel), ROUNDS times
after one warm-up each, GEN tokens at temperature 0. Prints each worker's
decode speed (completion tokens over the reply's gen_ms, median of the
rounds), the speed-up, the drafted/accepted counts, and whether the texts
are identical.
"""
import statistics
import sys

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import itlib  # noqa: E402

plain, spec, path = sys.argv[1], sys.argv[2], sys.argv[3]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
gen = int(sys.argv[5]) if len(sys.argv) > 5 else 160
prompt = open(path).read()
params = {"prompt": prompt, "max_tokens": gen, "temperature": 0}
tps = {plain: [], spec: []}
texts, drafted, accepted = {}, 0, 0
for r in range(rounds + 1):
    for sock in (plain, spec):
        reply = itlib.ipc_call(sock, "generate", params, timeout=1800)
        if "result" not in reply:
            sys.exit("FAIL %s: %s" % (sock, reply))
        res = reply["result"]
        texts.setdefault(sock, res["text"])
        if res["text"] != texts[sock]:
            sys.exit("FAIL %s gave two texts for one greedy request" % sock)
        if r == 0:
            continue                # warm-up
        tps[sock].append(res["completion_tokens"] / (res["gen_ms"] / 1e3))
        if sock == spec:
            drafted += res["drafted_tokens"]
            accepted += res["accepted_tokens"]
p, s = statistics.median(tps[plain]), statistics.median(tps[spec])
print('{"prompt": "%s", "rounds": %d, "plain_tps": %.3f, "spec_tps": %.3f, "speedup": %.3f, '
      '"drafted": %d, "accepted": %d, "identical": %s}'
      % (path, rounds, p, s, s / p, drafted, accepted, "true" if texts[plain] == texts[spec] else "false"))
