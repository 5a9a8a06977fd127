"""Drives tests/it_batch.sh: two real workers on one fixture, --parallel 1
(the reference: one request at a time) and --parallel 4 (batched), over
their Unix sockets.

  - 8 generate requests sharing a system prompt, sent at once to the batched
    worker: every one answered, each text equal to the reference's;
  - health answers during the burst, quickly, and shows requests running
    together; afterwards its prefix-cache counters show hits;
  - 3 concurrent json_schema requests with one schema and a score request
    equal the reference's;
  - 12 long requests at once: parallel 4 + max_queue 4 take 8, the rest get
    'busy'; the accepted ones all finish;
  - 'priority' must be an integer.

  - on a worker whose pool holds one long generation: a second one waits
    (queued, in order), and a score request behind it is answered at once,
    while the first still runs.

usage: batch_client.py SOCK_REF SOCK_BATCH SOCK_TIGHT
"""
import sys
import threading
import time

import itlib

ref_sock, batch_sock, tight_sock = sys.argv[1], sys.argv[2], sys.argv[3]
check = itlib.Checks(detail_max=600)

SYSTEM = ("You are the front desk of a city hotline. Answer in one short sentence, "
          "politely, and never invent phone numbers. ")
QUESTIONS = ["Where do I pay my water bill?", "My street light is broken.", "How do I renew a permit?",
             "Is the library open on Sunday?", "Can I get a new bin?", "Who fixes potholes?",
             "Where is the tax office?", "How do I report noise?"]


def gen(sock, q, max_tokens=24, **kw):
    p = {"prompt": SYSTEM + q, "max_tokens": max_tokens, "temperature": 0}
    p.update(kw)
    return itlib.ipc_call(sock, "generate", p, timeout=120)


def wait_ready(sock):
    for _ in range(200):
        try:
            if itlib.ipc_call(sock, "health", {}, timeout=2).get("ok"):
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


check(wait_ready(ref_sock) and wait_ready(batch_sock) and wait_ready(tight_sock), "the workers answer health")
h = itlib.ipc_call(batch_sock, "health", {})["result"]
keys = ["parallel", "running", "kv_blocks_total", "kv_blocks_free", "prefix_hits", "prefix_misses",
        "prefix_tokens_reused"]
check(all(k in h for k in keys) and h["parallel"] == 4 and h["kv_blocks_free"] == h["kv_blocks_total"] > 0,
      "health has the batching figures", str(h))
info = itlib.ipc_call(batch_sock, "info", {})["result"]
check(all(k in info for k in keys), "info has the batching figures")

# ---- reference: one at a time on the --parallel 1 worker
ref = [gen(ref_sock, q) for q in QUESTIONS]
check(all(r.get("ok") for r in ref), "reference answers", str([r for r in ref if not r.get("ok")][:1]))

# ---- the burst
out = [None] * len(QUESTIONS)


def one(i):
    out[i] = gen(batch_sock, QUESTIONS[i])


threads = [threading.Thread(target=one, args=(i,)) for i in range(len(QUESTIONS))]
t0 = time.monotonic()
for t in threads:
    t.start()
health_ms, running_max = [], 0
while any(t.is_alive() for t in threads):
    t1 = time.monotonic()
    r = itlib.ipc_call(batch_sock, "health", {}, timeout=5)
    health_ms.append((time.monotonic() - t1) * 1e3)
    running_max = max(running_max, r["result"]["running"])
    time.sleep(0.01)
for t in threads:
    t.join()
wall = time.monotonic() - t0
check(all(o and o.get("ok") for o in out), "8 concurrent requests all answered",
      str([o for o in out if not (o and o.get("ok"))][:1]))
same = sum(1 for o, r in zip(out, ref) if o and o.get("ok") and o["result"]["text"] == r["result"]["text"])
check(same == len(QUESTIONS), "each concurrent answer == its answer alone (%d/%d)" % (same, len(QUESTIONS)),
      str([(o["result"]["text"], r["result"]["text"]) for o, r in zip(out, ref)
           if o and o.get("ok") and o["result"]["text"] != r["result"]["text"]][:2]))
# Timing is the subject: the worker's loop answers health while the pool
# computes (a fraction of a ms here); 1 s leaves a sanitized worker on a
# loaded box room, and a health that waited for the burst's compute would
# take the burst's seconds.
check(len(health_ms) > 0 and max(health_ms) < 1000,
      "health answered %d times during the burst, slowest %.1f ms" % (len(health_ms), max(health_ms or [0])))
check(running_max >= 2, "requests ran together (health saw %d running at once), burst %.2f s" % (running_max, wall))
h = itlib.ipc_call(batch_sock, "health", {})["result"]
check(h["prefix_hits"] >= 1 and h["prefix_tokens_reused"] >= 16 and h["running"] == 0,
      "prefix cache: %d hits, %d misses, %d tokens reused" % (h["prefix_hits"], h["prefix_misses"],
                                                              h["prefix_tokens_reused"]))
check(h["kv_blocks_free"] <= h["kv_blocks_total"], "blocks accounted", str(h))

# ---- json_schema: 3 concurrent requests with one schema (the cached grammar
# is lent to one, the others get matchers of their own) == the reference
schema = '{"type": "object", "properties": {"topic": {"type": "string", "maxLength": 12}}, "required": ["topic"]}'
sref = [gen(ref_sock, q, max_tokens=40, json_schema=schema) for q in QUESTIONS[:3]]
sout = [None] * 3


def one_schema(i):
    sout[i] = gen(batch_sock, QUESTIONS[i], max_tokens=40, json_schema=schema)


threads = [threading.Thread(target=one_schema, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(all(o and o.get("ok") for o in sout + sref) and
      [o["result"]["text"] for o in sout] == [r["result"]["text"] for r in sref],
      "3 concurrent json_schema requests == the reference", str(sout[:1]) + str(sref[:1]))

# ---- score
sc = {"prompt": SYSTEM + "Which office handles water?", "candidates": ["water", "the tax office", "noise"]}
a, b = itlib.ipc_call(ref_sock, "score", sc), itlib.ipc_call(batch_sock, "score", sc)
check(a.get("ok") and b.get("ok") and a["result"]["logprobs"] == b["result"]["logprobs"],
      "score on the batched worker == the reference", "%s %s" % (a, b))

# ---- bad priority
r = gen(batch_sock, "x", priority="high")
check(not r.get("ok") and r["error"]["code"] == "invalid_request", "'priority' must be an integer", str(r))

# ---- queue full: 12 long requests at once; up to 4 run + 4 wait, the rest are refused
long_out = [None] * 12


def one_long(i):
    long_out[i] = gen(batch_sock, QUESTIONS[i % 8], max_tokens=300, priority=i % 3)


threads = [threading.Thread(target=one_long, args=(i,)) for i in range(12)]
for t in threads:
    t.start()
for t in threads:
    t.join()
busy = sum(1 for o in long_out if o and not o.get("ok") and o["error"]["code"] == "busy")
done = sum(1 for o in long_out if o and o.get("ok"))
# The bound is parallel + max_queue = 8 taken, the rest refused; how many of
# the 4 sequences are running when the 12 land depends on where the compute
# thread is in its step (under load it may have moved only a few from the
# queue), so at least max_queue + 1 are taken, never more than 8.
check(busy >= 4 and busy + done == 12 and 5 <= done <= 8,
      "12 at once with parallel 4 + max_queue 4: %d answered, %d busy" % (done, busy),
      str([o for o in long_out if o and not o.get("ok") and o["error"]["code"] != "busy"][:1]))
h = itlib.ipc_call(batch_sock, "health", {})["result"]
check(h["running"] == 0 and h["queued"] == 0, "idle again afterwards", str(h))

# ---- a score request is not stuck behind a generation the pool cannot take
tight = {}


def long_gen(key):
    tight[key] = gen(tight_sock, "Tell me everything.", max_tokens=3000)


def wait_health(pred):
    for _ in range(500):
        h = itlib.ipc_call(tight_sock, "health", {})["result"]
        if pred(h):
            return h
        time.sleep(0.002)
    return None


ta = threading.Thread(target=long_gen, args=("a",))
ta.start()
h1 = wait_health(lambda h: h["running"] == 1)
tb = threading.Thread(target=long_gen, args=("b",))
tb.start()
h2 = wait_health(lambda h: h["queued"] == 1)
sc = itlib.ipc_call(tight_sock, "score", {"prompt": "Which one?", "candidates": ["this", "that"]})
a_running = ta.is_alive()
ta.join()
tb.join()
check(h1 is not None and h2 is not None and sc.get("ok") and a_running,
      "pool full: the second generation waits, a score behind it is answered while the first runs",
      "health %s / %s, score %s, first still running %s" % (h1, h2, sc, a_running))
check(tight.get("a", {}).get("ok") and tight.get("b", {}).get("ok"), "both long generations finish",
      str(tight)[:300])

sys.exit(check.summary())
