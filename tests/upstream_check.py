#!/usr/bin/env python3
"""upstream_check.py EDGE_URL UP_URL UP_PID SLOW_PORT CLOSED_PORT - upstream models.

Driven by tests/it_upstream.sh: EDGE is a `switchboard run` whose `composer`
is an `upstream:` entry pointing at UP (another `switchboard run`, with an
API key); `slow` points at a listener that never answers, `closed` at a
port nobody listens on, `badkey` at UP with the wrong key. Prints one line
per check and exits 1 if any failed.
"""
import json, os, signal, sys, time, urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

EDGE, UP, UP_PID, SLOW_PORT, CLOSED_PORT = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
UP_KEY = os.environ["SB_UP_KEY"]
check = itlib.Checks(detail_max=600)


def http(base, method, path, body=None, key=None, timeout=60, raw=False):
    """(status, headers, body: parsed JSON unless raw or not JSON, seconds)."""
    h = {"Content-Type": "application/json", "Cache-Control": "no-cache", **itlib.bearer(key)}
    t = time.time()
    st, hd, b = itlib.request(base + path, method, body, h, timeout)
    dt = time.time() - t
    if not raw:
        try:
            b = json.loads(b)
        except ValueError:
            pass
    return st, hd, b, dt


def wait_ready(base, key=None, what=""):
    for _ in range(300):
        try:
            st, _, _, _ = http(base, "GET", "/health", key=key, timeout=2)
            if st == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return check(False, what + " ready")


def error_message(b):
    return b.get("error", {}).get("message", "") if isinstance(b, dict) else str(b)


sse_text = itlib.sse_text


def up_requests():
    """How many requests UP's model has served (its /metrics)."""
    _, _, b, _ = http(UP, "GET", "/metrics", raw=True)
    for line in b.decode().splitlines():
        if line.startswith('switchboard_model_requests_total{model="tiny"}'):
            return float(line.split()[-1])
    return -1.0


wait_ready(UP, UP_KEY, "upstream")
wait_ready(EDGE, None, "edge")

# -- health: remote models do not make the edge look degraded
st, _, b, _ = http(EDGE, "GET", "/health")
check(st == 200 and b["models"]["composer"]["status"] == "remote", "edge /health 200, composer reported as remote", b)

# -- a pipeline whose composer is the upstream
msgs = None
n0 = up_requests()
st, hd, b, dt = http(EDGE, "POST", "/v1/pipelines/p_composer", {"input": "my water meter reading is wrong"})
ok = check(st == 200 and [s["status"] for s in b["stages"]] == ["ok", "ok"] and b["output"],
           "pipeline with an upstream composer: both stages ok (%.2f s)" % dt, b)
check(up_requests() == n0 + 1, "the answer stage ran on the upstream (its request counter moved by 1)",
      (n0, up_requests()))
if ok:
    # The same messages asked of the upstream directly give the same text.
    prompt = "Intent %s. Caller: my water meter reading is wrong" % b["intent"]
    st2, _, b2, _ = http(UP, "POST", "/v1/chat/completions",
                         {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8,
                          "temperature": 0}, key=UP_KEY)
    check(st2 == 200 and b2["choices"][0]["message"]["content"].strip() == b["output"],
          "pipeline answer == the upstream's own answer to the same prompt", (b["output"], b2))

# -- plain completions through the edge: whole, streamed, raw prompt
chat = {"model": "composer", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 10,
        "temperature": 0}
st, _, whole, _ = http(EDGE, "POST", "/v1/chat/completions", chat)
st_up, _, direct, _ = http(UP, "POST", "/v1/chat/completions", dict(chat, model="tiny"), key=UP_KEY)
check(st == 200 and st_up == 200 and whole["choices"][0]["message"]["content"] ==
      direct["choices"][0]["message"]["content"] and whole["model"] == "composer",
      "chat completion via the edge == asking the upstream directly", (whole, direct))
check(st == 200 and whole["usage"]["completion_tokens"] == direct["usage"]["completion_tokens"],
      "usage passed through", whole.get("usage") if isinstance(whole, dict) else whole)
st, hd, raw, _ = http(EDGE, "POST", "/v1/chat/completions", dict(chat, stream=True), raw=True)
text, done = sse_text(raw) if st == 200 else ("", False)
check(st == 200 and "text/event-stream" in hd.get("Content-Type", "") and done and
      text == whole["choices"][0]["message"]["content"],
      "streamed via the edge (upstream SSE relayed token by token) == the whole answer", (st, text, raw[:300]))
n_chunks = raw.decode().count('"delta": {"content"') + raw.decode().count('"delta":{"content"')
check(n_chunks >= 2, "the stream arrived in several chunks (%d)" % n_chunks, raw[:300])
st, _, comp, _ = http(EDGE, "POST", "/v1/completions",
                      {"model": "composer", "prompt": "The capital of", "max_tokens": 6, "temperature": 0})
st_up, _, comp_up, _ = http(UP, "POST", "/v1/completions",
                            {"model": "tiny", "prompt": "The capital of", "max_tokens": 6, "temperature": 0},
                            key=UP_KEY)
check(st == 200 and comp["choices"][0]["text"] == comp_up["choices"][0]["text"],
      "text completion (a raw prompt) via the edge == the upstream's", (comp, comp_up))

# -- concurrent callers: all answered, each identical to the single answer
import threading
results = []
def one():
    results.append(http(EDGE, "POST", "/v1/chat/completions", chat))
threads = [threading.Thread(target=one) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(len(results) == 8 and all(r[0] == 200 and r[2]["choices"][0]["message"]["content"] ==
                                whole["choices"][0]["message"]["content"] for r in results),
      "8 concurrent calls through the upstream all answered, identically", [r[:1] for r in results])

# -- the upstream rejects our key
st, _, b, _ = http(EDGE, "POST", "/v1/chat/completions", dict(chat, model="badkey"))
m = error_message(b)
check(st == 502 and "401" in m and "http://127.0.0.1:" in m and "/v1/chat/completions" in m,
      "wrong upstream key: 502 naming the URL and the upstream's 401", (st, b))

# -- intent stages need a local model (score is not an OpenAI call)
st, _, b, _ = http(EDGE, "POST", "/v1/pipelines/p_score_remote", {"input": "x"})
check(st >= 500 and "score" in error_message(b) and "local model" in error_message(b),
      "an intent stage on an upstream model fails with a clear reason", (st, b))

# -- an upstream that accepts and never answers: fails within timeout_ms (1500)
st, _, b, dt = http(EDGE, "POST", "/v1/pipelines/p_slow", {"input": "my water meter reading is wrong"})
m = error_message(b)
check(st == 504 and "stage 'answer'" in m and ("http://127.0.0.1:%s/v1/chat/completions" % SLOW_PORT) in m
      and "1500 ms" in m, "hung upstream: 504, names the stage, the URL and the timeout", (st, b))
check(1.4 <= dt <= 4.0, "hung upstream: failed after %.2f s (timeout_ms 1500)" % dt)
st, _, b, _ = http(EDGE, "POST", "/v1/pipelines/p_slow", {"input": "my water meter reading is wrong",
                                                          "until": "route"})
check(st == 200 and b["stages"][0]["status"] == "ok", "the same pipeline's local stage still works (until: route)",
      (st, b))

# -- a client that gives up on a streaming call to a hung upstream: cancelled, the edge goes on
try:
    req = urllib.request.Request(EDGE + "/v1/chat/completions", json.dumps(
        {"model": "slower", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode(),
        {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=0.5).read()
except OSError:
    pass
time.sleep(0.3)
st, _, b, _ = http(EDGE, "GET", "/health")
check(st == 200, "a client that left a hung upstream call: the edge still serves", (st, b))

# -- nobody listening: fails at once
st, _, b, dt = http(EDGE, "POST", "/v1/pipelines/p_closed", {"input": "operator"})
m = error_message(b)
check(st == 503 and "stage 'answer'" in m and ("http://127.0.0.1:%s/v1/chat/completions" % CLOSED_PORT) in m,
      "refused upstream: 503, names the stage and the URL (%.2f s)" % dt, (st, b))
# Timing is the subject: a refused connect fails in ms; waiting for the
# model's timeout_ms would take 5 s. 2 s tells them apart on a loaded box.
check(dt < 2.0, "refused upstream: failed within %.2f s, no waiting for the timeout" % dt)

# -- the real upstream goes down: the composer stage fails, local serving goes on
os.kill(UP_PID, signal.SIGTERM)
for _ in range(100):
    try:
        os.kill(UP_PID, 0)
        time.sleep(0.05)
    except ProcessLookupError:
        break
st, _, b, dt = http(EDGE, "POST", "/v1/pipelines/p_composer", {"input": "my water meter reading is wrong"})
m = error_message(b)
check(st in (503, 504) and "stage 'answer'" in m and "upstream http://127.0.0.1:" in m and dt < 5,
      "upstream stopped: the pipeline fails in %.2f s with a clear stage error" % dt, (st, b))
print("     message: " + m)
st, _, b, _ = http(EDGE, "POST", "/v1/chat/completions",
                   {"model": "intent", "messages": [{"role": "user", "content": "still there?"}], "max_tokens": 3})
check(st == 200 and b["object"] == "chat.completion", "the edge's local model still serves", (st, b))
st, _, b, _ = http(EDGE, "GET", "/health")
check(st == 200 and b["models"]["intent"]["status"] == "up", "edge /health still 200", b)
st, _, b, _ = http(EDGE, "POST", "/v1/chat/completions", chat)
check(st in (503, 504) and "upstream" in error_message(b), "chat to the stopped upstream: %d with a reason" % st, b)

sys.exit(check.summary())
