"""N concurrent generate requests through one worker socket (docs/BATCHING.md).

usage: batch_burst.py SOCK [N] [GEN]

Each request: a shared system prompt plus its own question (~64 prompt
tokens), GEN tokens out at temperature 0, sent at the same moment from N
threads. Prints the total wall time, per-request latency (min / p50 / max),
the prompt sizes and the worker's prefix-cache counters, and the texts' hash
so runs at different --parallel can be compared for identical output.
"""
import hashlib
import statistics
import sys
import threading
import time

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import itlib  # noqa: E402

sock = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
gen = int(sys.argv[3]) if len(sys.argv) > 3 else 32

SYSTEM = ("You are the assistant of a city services hotline. Answer the caller in one or two short "
          "sentences, politely, in the caller's language. Never invent phone numbers or opening hours; "
          "if you do not know, say that an operator will call back within one working day. ")
QUESTIONS = ["Where can I pay my water bill this month?", "The street light outside my house has been broken for a week.",
             "How do I renew my parking permit online?", "Is the central library open on Sunday afternoons?",
             "Can I get a new recycling bin delivered?", "Who is responsible for fixing potholes on my road?",
             "Where is the local tax office and when does it open?", "How do I report a noisy neighbour at night?",
             "My rubbish was not collected today.", "How can I apply for a housing fund withdrawal?",
             "What documents do I need for a residence card?", "Can I book an appointment at the town hall?",
             "The bus stop sign is missing.", "How do I register a newborn child?",
             "Where do I complain about a restaurant?", "When is the next bulky waste collection?"]

out = [None] * n
lat = [0.0] * n


def one(i):
    t0 = time.monotonic()
    out[i] = itlib.ipc_call(sock, "generate", {"prompt": SYSTEM + QUESTIONS[i % len(QUESTIONS)],
                                               "max_tokens": gen, "temperature": 0}, timeout=600)
    lat[i] = time.monotonic() - t0


threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
t0 = time.monotonic()
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.monotonic() - t0
bad = [o for o in out if not o.get("ok")]
if bad:
    print("errors:", bad[:2])
    sys.exit(1)
h = itlib.ipc_call(sock, "health", {})["result"]
ptoks = [o["result"]["prompt_tokens"] for o in out]
gtoks = sum(o["result"]["completion_tokens"] for o in out)
digest = hashlib.sha256("\x00".join(o["result"]["text"] for o in out).encode()).hexdigest()[:12]
print("parallel %d: %d requests, prompts %d-%d tokens, %d tokens out; wall %.2f s; latency min %.2f p50 %.2f max %.2f s; "
      "%.1f tok/s out; prefix hits %d misses %d reused %d; texts %s"
      % (h["parallel"], n, min(ptoks), max(ptoks), gtoks, wall, min(lat), statistics.median(lat), max(lat),
         gtoks / wall, h["prefix_hits"], h["prefix_misses"], h["prefix_tokens_reused"], digest))
