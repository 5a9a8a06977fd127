#!/usr/bin/env python3
"""Encoder models served like any other (tests/it_embed_http.sh drives it).

    embed_http.py URL RUNDIR SWITCHBOARD_BIN ENCODER_GGUF RUN_LOG SUPERVISOR_PID

The worker's socket protocol (health/info kind, `embed`, clear errors for
the other kind's methods), then POST /v1/embeddings with the real `openai`
client and raw HTTP: shape, vectors equal to `switchboard embed`'s, the
API key, body limit, queue bound and a caller who hangs up; then intent
stages that classify by embeddings (examples, examples_file, out_of_scope,
the on-disk vector cache across a reload, hybrid).
"""
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

url, run, sb, gguf, router_log, sup = sys.argv[1:7]
KEY = os.environ["SB_TEST_API_KEY"]
check = itlib.Checks(detail_max=300)


call = itlib.ipc_call


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def cli_vectors(texts, kind="--query"):
    out = subprocess.run([sb, "embed", "-m", gguf, kind] + texts, capture_output=True, text=True, check=True).stdout
    return [json.loads(l) for l in out.splitlines()]


# ---------------------------------------------------------- the worker socket
e5, llm = run + "/e5.sock", run + "/tiny.sock"
h = call(e5, "health", {})
check(h.get("ok") and h["result"].get("kind") == "encoder", "worker health says encoder", h)
h = call(llm, "health", {})
check(h.get("ok") and h["result"].get("kind") == "decoder", "decoder worker health says decoder", h)
i = call(e5, "info", {})
r = i.get("result", {})
check(i.get("ok") and r.get("kind") == "encoder" and r.get("n_embd") == 64 and r.get("architecture") == "bert"
      and r.get("n_layer") == 2, "worker info describes the encoder", i)
g = call(e5, "generate", {"prompt": "hello"})
check(not g["ok"] and g["error"]["code"] == "invalid_request" and "encoder" in g["error"]["message"],
      "generate on an encoder: a clear error", g)
g = call(e5, "score", {"prompt": "hello", "candidates": ["a"]})
check(not g["ok"] and "encoder" in g["error"]["message"], "score on an encoder: a clear error", g)
g = call(llm, "embed", {"text": "hello"})
check(not g["ok"] and g["error"]["code"] == "invalid_request" and "encoder" in g["error"]["message"],
      "embed on a decoder: a clear error", g)
g = call(e5, "embed", {"texts": ["hello world", "社保卡办理"], "kind": "query"})
want = cli_vectors(["hello world", "社保卡办理"])
ok = g.get("ok") and len(g["result"]["embeddings"]) == 2
check(ok and all(cosine(a, b) > 0.9999 for a, b in zip(g["result"]["embeddings"], want))
      and g["result"]["n_tokens"] == sum(g["result"]["tokens"]) and g["result"]["dim"] == 64,
      "embed: the vectors of `switchboard embed`, token counts", g if not ok else "")
for bad, what in [({"text": "a", "texts": ["b"]}, "exactly one"), ({"texts": []}, "1..256"),
                  ({"text": "a", "kind": "doc"}, "'kind'"), ({"text": 3}, "'text'"), ({"text": "a", "x": 1}, "'x'")]:
    g = call(e5, "embed", bad)
    check(not g["ok"] and what in g["error"]["message"], "embed refuses %s" % json.dumps(bad), g)

# ----------------------------------------------------- /v1/embeddings, openai
try:
    import openai
except ImportError:
    openai = None
check(openai is not None, "the openai package is installed (tools/deps.sh)")
if openai:
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    texts = ["hello world", "公积金 hello", "the query: is a test"]
    res = client.embeddings.create(model="e5", input="hello world")
    v = res.data[0].embedding
    check(len(res.data) == 1 and len(v) == 64 and abs(sum(x * x for x in v) - 1) < 1e-4
          and cosine(v, want[0]) > 0.9999, "openai: one string -> one unit vector, as the CLI's")
    res = client.embeddings.create(model="e5", input=texts)
    want3 = cli_vectors(texts)
    check([d.index for d in res.data] == [0, 1, 2] and all(cosine(d.embedding, w) > 0.9999
                                                             for d, w in zip(res.data, want3)),
          "openai: a list -> vectors in order")
    check(res.usage.prompt_tokens > 0 and res.usage.total_tokens == res.usage.prompt_tokens and res.model == "e5",
          "openai: usage and model", res.usage)
    try:
        client.embeddings.create(model="tiny", input="hello")
        check(False, "openai: a decoder model is refused")
    except openai.BadRequestError as e:
        check("encoder" in str(e), "openai: a decoder model is refused with 400 and why", e)
    try:
        openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).embeddings.create(model="e5", input="x")
        check(False, "openai: a wrong key is refused")
    except openai.AuthenticationError:
        check(True, "openai: a wrong key is refused (401)")

# ------------------------------------------------------ /v1/embeddings, raw
E = url + "/v1/embeddings"
H = itlib.bearer(KEY)
st, _, body = itlib.request(E, "POST", {"model": "e5", "input": ["hello world"], "encoding_format": "float"}, H)
j = json.loads(body)
check(st == 200 and j["object"] == "list" and j["data"][0]["object"] == "embedding" and j["data"][0]["index"] == 0
      and j["model"] == "e5" and set(j["usage"]) == {"prompt_tokens", "total_tokens"},
      "raw: OpenAI's shape", body[:200])
st, _, body = itlib.request(E, "POST", {"model": "e5", "input": "hello world", "input_type": "passage"}, H)
check(st == 200 and cosine(json.loads(body)["data"][0]["embedding"], cli_vectors(["hello world"], "--passage")[0])
      > 0.9999, "raw: input_type passage uses the passage: prefix", body[:200])
for req, status, what in [({"model": "e5", "input": [[1, 2, 3]]}, 400, "token arrays"),
                          ({"model": "e5", "input": []}, 400, "1 to 256"),
                          ({"model": "e5"}, 400, "'input'"),
                          ({"model": "e5", "input": "a", "encoding_format": "hex"}, 400, "encoding_format"),
                          ({"model": "e5", "input": "a", "dimensions": 8}, 400, "dimensions"),
                          ({"model": "nope", "input": "a"}, 404, "does not exist"),
                          ({"model": "tiny", "input": "a"}, 400, "generative")]:
    st, _, body = itlib.request(E, "POST", req, H)
    check(st == status and what in body.decode(), "raw: %s -> %d" % (json.dumps(req)[:60], status), body[:200])
st, _, body = itlib.request(E, "POST", {"model": "e5", "input": "x"})
check(st == 401, "raw: no key -> 401", body[:200])
st, _, body = itlib.request(E, "POST", {"model": "e5", "input": "x" * (2 << 20)}, H)
check(st == 413, "raw: a body over --max-body -> 413", body[:200])

# ------------------------------------------- queue bound (e5: max_queue 2)
LONG = ["hello world the query " * 180] * 60          # ~0.6 s of work each
results = []


def one():
    try:
        results.append(itlib.request(E, "POST", {"model": "e5", "input": LONG}, H, timeout=60))
    except OSError as e:
        results.append((0, {}, repr(e).encode()))


ts = [threading.Thread(target=one) for _ in range(8)]
for t in ts:
    t.start()
for t in ts:
    t.join()
codes = sorted(r[0] for r in results)
busy = [r for r in results if r[0] == 503]
check(codes.count(200) >= 1 and busy and all(b"queue_full" in r[2] and "Retry-After" in r[1] for r in busy)
      and codes.count(200) <= 4, "8 at once on max_queue 2: at most 4 admitted, the rest 503 queue_full",
      [(r[0], r[2][-60:] if r[0] != 503 else "") for r in results])


# ----------------------------------------------------------- hang-up
def raw_post(obj):
    b = json.dumps(obj).encode()
    s = socket.create_connection(itlib.host_port(url))
    s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer "
              + KEY.encode() + b"\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)
    return s


t0 = time.time()                                     # a quarter of LONG: LONG is ~54k of the 65,536 tokens
st, _, _ = itlib.request(E, "POST", {"model": "e5", "input": LONG[:15]}, H, timeout=60)
full = time.time() - t0
BIG = LONG                                           # ~4x as long
s = raw_post({"model": "e5", "input": BIG})
# Hang up while BIG still runs: after at most a quarter of its work (on an
# idle machine with a release build BIG takes ~0.3 s, and a fixed 0.3 s
# wait let it finish with a 200 before the close).
time.sleep(min(0.3, full))
s.close()
t0 = time.time()
st, _, _ = itlib.request(E, "POST", {"model": "e5", "input": "after"}, H, timeout=60)
after = time.time() - t0
check(st == 200 and after < 2 * full, "a caller who hangs up: the worker stops (next call %.2f s, the dropped one "
      "would take ~%.2f s)" % (after, 4 * full), st)
time.sleep(0.2)
log = open(router_log, errors="replace").read()
check("499" in log and "/v1/embeddings" in log, "the router logs the hang-up as 499")

# ------------------------------------------------ intent stages by embedding
P = url + "/v1/pipelines/"


def route(pipe, text):
    st, _, body = itlib.request(P + pipe, "POST", {"input": text}, H, timeout=60)
    return st, (json.loads(body) if body[:1] == b"{" else {})


cases = [("the meter reading is off", "billing"), ("I want to complain", "complaint"), ("operator", "human_agent"),
         ("my income tax return", "tax"), ("个税怎么申报", "tax"),           # examples_file only
         ("tell me a joke", "human_agent"), ("sing me a song", "human_agent")]  # out of scope -> fallback
for text, want in cases:
    st, j = route("route", text)
    probs = j.get("probabilities") or {}
    check(st == 200 and j.get("intent") == want and set(probs) == {"billing", "complaint", "human_agent", "tax"}
          and abs(sum(probs.values()) - 1) < 1e-6 and 0 < j.get("confidence", 0) <= 1
          and j["stages"][0]["kind"] == "intent" and j["stages"][0]["output"] == want,
          "embedding route: %r -> %s" % (text, want), j)
cache = run + "/embed-cache.bin"
check(os.path.exists(cache) and (os.stat(cache).st_mode & 0o777) == 0o600, "the example vectors are cached, 0600")
log = open(router_log, errors="replace").read()
check("intent stage 'route': 12 texts embedded (0 from embed-cache.bin)" in log, "first build embeds all 12 texts",
      [l for l in log.splitlines() if "texts embedded" in l or "index" in l])
size = os.path.getsize(cache)
os.kill(int(sup), signal.SIGHUP)                       # a reload builds the indexes again: from the file
time.sleep(1.0)
st, j = route("route", "my income tax return")
log = open(router_log, errors="replace").read()
check(st == 200 and j.get("intent") == "tax" and "12 texts embedded (12 from embed-cache.bin)" in log
      and os.path.getsize(cache) == size, "after a reload: routed from the cached vectors, nothing re-embedded",
      [l for l in log.splitlines() if "texts embedded" in l])


def scored(model):
    _, _, m = itlib.request(url + "/metrics", "GET")
    for line in m.decode().splitlines():
        if line.startswith('switchboard_model_requests_total{model="%s"}' % model):
            return int(float(line.split()[-1]))
    return 0


before = scored("tiny")
st, j = route("hybrid", "the meter reading is off")
check(st == 200 and j.get("intent") in ("billing", "complaint") and scored("tiny") == before + 1,
      "hybrid: a close call (margin below hybrid_margin) asks the score model", (st, j, before, scored("tiny")))
st, j = route("wrongkind", "hello")
check(st == 500 and "needs an encoder" in json.dumps(j), "method: embed on a decoder model: 500 saying why", (st, j))
sys.exit(check.summary())
