#!/usr/bin/env python3
"""llama_server_check.py A_URL B_URL - an upstream: model on a real llama-server.

Driven by tests/it_llama_server.sh: A is `switchboard run` whose model
`box_b` is `upstream: B/v1` (parallel 4, max_queue 2); B is `llama-server
-np 4 --metrics` on the tiny fixture. Checks, over real HTTP:
  - a completion through A == the same request asked of B directly, whole
    and streamed (several SSE chunks, [DONE]); a pipeline whose answer stage
    runs on B, streamed as pipeline:hot;
  - a caller who hangs up (streamed, then not) stops the generation on B:
    B's requests_processing is back to 0 within a second and it predicted
    far fewer tokens than asked;
  - back-pressure: 4 long calls fill B's 4 slots, 2 wait in A, the next
    caller gets 503 + Retry-After at once; B never queues (requests_deferred 0).
Prints one line per check and "N passed, N failed".
"""
import json, os, re, socket, sys, time

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

A, B = sys.argv[1], sys.argv[2]
HOST, PORT = itlib.host_port(A)
LONG = 2000             # tokens: seconds of decoding on B (the fixture's context is 2048)
check = itlib.Checks(detail_max=500)


def http(base, method, path, body=None, timeout=60):
    return itlib.request(base + path, method, body, {"Content-Type": "application/json"}, timeout)


def b_metric(name):
    _, _, m = http(B, "GET", "/metrics", timeout=5)
    g = re.search(r"^llamacpp:%s (\S+)$" % name, m.decode(), re.M)
    return float(g.group(1)) if g else None


def chat(text, max_tokens, stream=False, model="box_b"):
    return {"model": model, "max_tokens": max_tokens, "temperature": 0, "stream": stream,
            "messages": [{"role": "user", "content": text}]}


def open_call(body):
    """A request to A on a raw socket, left open: close it to hang up."""
    s = socket.create_connection((HOST, PORT))
    b = json.dumps(body).encode()
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n" % len(b)).encode() + b)
    return s


def until(cond, seconds, step=0.05):
    end = time.time() + seconds
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return None


def a_ready():
    try:
        return http(A, "GET", "/health", timeout=2)[0] == 200
    except OSError:
        return False


check(until(a_ready, 30, 0.1), "box A (switchboard run) is up, box B (llama-server -np 4) answers")

# -------------------------------------------------- whole and streamed
st, _, b = http(A, "POST", "/v1/chat/completions", chat("What is the capital of France?", 24))
via_a = json.loads(b)["choices"][0]["message"]["content"] if st == 200 else None
st_b, _, bb = http(B, "POST", "/v1/chat/completions", chat("What is the capital of France?", 24, model="tiny"))
direct = json.loads(bb)["choices"][0]["message"]["content"] if st_b == 200 else None
check(st == 200 and via_a and via_a == direct, "a completion through A == asking llama-server directly",
      (st, via_a, direct))
st, hd, raw = http(A, "POST", "/v1/chat/completions", chat("What is the capital of France?", 24, True))
text, done = itlib.sse_text(raw) if st == 200 else ("", False)
n_chunks = raw.count(b"data: ")
check(st == 200 and "text/event-stream" in hd.get("Content-Type", "") and done and text == direct and n_chunks > 3,
      "streamed through A: %d SSE events relayed from llama-server, [DONE], the same text" % n_chunks,
      (st, text, raw[:300]))
st, _, raw = http(A, "POST", "/v1/chat/completions",
                  {"model": "pipeline:hot", "stream": True, "messages": [{"role": "user", "content": "my bill"}]})
text, done = itlib.sse_text(raw) if st == 200 else ("", False)
check(st == 200 and done and text, "pipeline:hot streamed: intent on A's worker, the answer from llama-server",
      (st, raw[:300]))

# -------------------------------------------------------- cancellation
for stream in (True, False):
    what = "streamed" if stream else "not streamed"
    until(lambda: b_metric("requests_processing") == 0, 10)
    before = b_metric("tokens_predicted_total")
    s = open_call(chat("tell me a long story", LONG, stream))
    busy = until(lambda: b_metric("requests_processing") == 1, 10)
    if stream:
        s.settimeout(10)
        got = b""
        while b"data: " not in got:
            c = s.recv(4096)
            if not c:
                break
            got += c
    else:
        time.sleep(0.3)
    s.close()
    # llama-server looks at a waiting request's connection when a second
    # passes with no result from its queue - any other request (our own
    # /metrics polls) restarts that wait - so look only once, after 1.5 s.
    time.sleep(1.5)
    idle = b_metric("requests_processing") == 0
    predicted = b_metric("tokens_predicted_total") - before
    check(busy and idle and predicted < LONG / 2,
          "caller hangs up (%s): llama-server stopped within 1.5 s, after %d of %d tokens" % (what, predicted, LONG),
          (busy, idle, predicted))

# ------------------------------------------------------- back-pressure
until(lambda: b_metric("requests_processing") == 0, 10)
held = [open_call(chat("long %d" % i, LONG)) for i in range(4 + 2)]
full = until(lambda: b_metric("requests_processing") == 4, 10)
time.sleep(0.3)     # the last two reach A's queue
t = time.time()
st, hd, b = http(A, "POST", "/v1/chat/completions", chat("one more", 8))
dt = time.time() - t
ra = {k.lower(): v for k, v in hd.items()}.get("retry-after", "")
try:
    err = json.loads(b)["error"]
except Exception:
    err = {}
check(full and st == 503 and re.fullmatch(r"\d+", ra) and err.get("code") == "queue_full" and dt < 0.5,
      "llama-server's 4 slots busy and 2 waiting in A: the next caller gets 503 queue_full, Retry-After %s, "
      "in %.3f s" % (ra, dt), (full, st, hd, b[:300]))
deferred = b_metric("requests_deferred")
check(deferred == 0 and b_metric("requests_processing") == 4,
      "llama-server queues nothing: A holds the waiting calls (requests_deferred %s)" % deferred)
for s in held:
    s.close()
time.sleep(1.5)         # (see the cancellation checks)
check(b_metric("requests_processing") == 0, "the callers hang up: llama-server stopped within 1.5 s")
st, _, _ = http(A, "POST", "/v1/chat/completions", chat("after", 4))
check(st == 200, "box_b serves again after the burst")
sys.exit(check.summary())
