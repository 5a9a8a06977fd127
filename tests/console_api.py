#!/usr/bin/env python3
"""console_api.py URL KEY PIPELINE - histograms, call ids, traces, feedback.

  * /metrics histograms against timings the client measures: every call's
    pipeline/stage/model time is inside the client's request time, so each
    server bucket holds at least as many calls as the client saw under that
    bound, the server's sum is below the client's and not far below it;
    time to first token the same against a streamed call's first chunk;
  * X-Call-Id: ours when the caller sends none, the caller's echoed, a bad
    one refused (400);
  * GET /v1/calls/ID: the whole trace, caller text masked, 404 for an
    unknown id, 401 without the key (the page /console needs none);
  * feedback: an unknown label refused, a valid one stored;
  * the console's own CPU counter (switchboard_console_cpu_seconds_total):
    still without a console client while calls complete (only
    GET /v1/console/state adds, to its own path); growing on the feed's path
    with a client on /v1/console/events, which gets the calls, and the bytes
    counted are at least the bytes the client read.
Prints one line per check; exit 1 on any failure.
"""
import http.client as hc, json, os, re, sys, threading, time, urllib.error, urllib.parse, urllib.request

URL, KEY, PIPE = sys.argv[1:4]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import itlib  # noqa: E402

check = itlib.Checks(detail_max=400)


def http(path, body=None, headers=None, key=True):
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + KEY
    h.update(headers or {})
    data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def metrics():
    """{(name, frozenset(labels)): value}"""
    _, _, body = http("/metrics", key=False)
    out = {}
    for line in body.decode().splitlines():
        m = re.match(r'^([a-z_]+)\{(.*)\} (\S+)$', line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def hist(m, name, **labels):
    """(buckets {le: count}, sum, count) of one series."""
    want = set(labels.items())
    b, s, n = {}, 0.0, 0
    for (k, ls), v in m.items():
        d = dict(ls)
        if not want <= set(ls) - {("le", d.get("le"))}:
            continue
        if k == name + "_bucket":
            b[float("inf") if d["le"] == "+Inf" else float(d["le"])] = v
        elif k == name + "_sum":
            s = v
        elif k == name + "_count":
            n = v
    return b, s, n


# ------------------------------------------------------- histograms vs client
m0 = metrics()
N = 12
client = []
for i in range(N):
    t = time.time()
    st, _, _ = http("/v1/pipelines/" + PIPE, {"input": "check number %d for the histogram" % i},
                    {"Cache-Control": "no-cache"})
    client.append(time.time() - t)
    check(st == 200, "call %d answered" % i) if st != 200 else None
m1 = metrics()
for name, labels in [("switchboard_pipeline_duration_seconds", {"pipeline": PIPE}),
                     ("switchboard_stage_duration_seconds", {"pipeline": PIPE, "stage": "route"})]:
    b0, s0, n0 = hist(m0, name, **labels)
    b1, s1, n1 = hist(m1, name, **labels)
    check(n1 - n0 == N, "%s%s counted every call" % (name, labels), (n0, n1))
    ds = s1 - s0
    if name.startswith("switchboard_pipeline"):
        check(ds <= sum(client) and ds >= sum(client) - N * 0.015,
              "%s: server sum %.4f s within the client's %.4f s (less <= 15 ms/call of HTTP)" % (name, ds, sum(client)))
        for le in sorted(b1):
            got = b1[le] - b0.get(le, 0)
            seen = sum(1 for c in client if c <= le)
            if not check(got >= seen, "%s le=%g: %d >= the %d calls the client saw under it" % (name, le, got, seen)):
                break
    else:
        check(0 < ds <= sum(client), "%s: stage sum %.4f s inside the client's %.4f s" % (name, ds, sum(client)))
b0, s0, n0 = hist(m0, "switchboard_model_queue_wait_seconds", model="tiny")
b1, s1, n1 = hist(m1, "switchboard_model_queue_wait_seconds", model="tiny")
check(n1 - n0 >= N, "queue wait counted every model call (%d)" % (n1 - n0))
b0, s0, n0 = hist(m0, "switchboard_model_call_seconds", model="tiny", method="score")
b1, s1, n1 = hist(m1, "switchboard_model_call_seconds", model="tiny", method="score")
check(n1 - n0 == N and s1 - s0 <= sum(client), "model call (score) counted, inside the client's time")

# TTFT: a streamed pipeline call through the chat endpoint.
m0 = metrics()
req = urllib.request.Request(URL + "/v1/chat/completions", data=json.dumps(
    {"model": "pipeline:" + PIPE, "stream": True, "messages": [{"role": "user", "content": "stream me an answer"}]}).encode(),
    headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json", "Cache-Control": "no-cache"})
t = time.time()
first = None
with urllib.request.urlopen(req, timeout=30) as r:
    for line in r:
        if first is None and line.startswith(b"data: {") and b'"content"' in line:
            first = time.time() - t
total = time.time() - t
m1 = metrics()
_, s0, n0 = hist(m0, "switchboard_pipeline_ttft_seconds", pipeline=PIPE)
_, s1, n1 = hist(m1, "switchboard_pipeline_ttft_seconds", pipeline=PIPE)
check(n1 - n0 == 1 and first is not None and 0 < s1 - s0 <= first,
      "pipeline TTFT %.4f s <= the client's first chunk %s s" % (s1 - s0, first))
_, s0, n0 = hist(m0, "switchboard_model_ttft_seconds", model="tiny")
_, s1, n1 = hist(m1, "switchboard_model_ttft_seconds", model="tiny")
check(n1 - n0 == 1 and 0 < s1 - s0 <= total, "model TTFT counted once, inside the call")

# ------------------------------------------------------------ call ids
st, h, _ = http("/v1/pipelines/" + PIPE, {"input": "who am I"}, {"Cache-Control": "no-cache"})
auto = h.get("X-Call-Id", "")
check(st == 200 and re.fullmatch(r"[A-Za-z0-9._:-]{1,64}", auto), "a call without X-Call-Id gets one", auto)
st, h, _ = http("/v1/pipelines/" + PIPE, {"input": "my secret words 4711"}, {"X-Call-Id": "desk-4711"})
check(st == 200 and h.get("X-Call-Id") == "desk-4711", "the caller's X-Call-Id is echoed", h.get("X-Call-Id"))
# ".." and "." would be path segments a browser resolves away: the console
# could not open /v1/calls/.. nor mark it.
for bad in ["has space", "x" * 65, "semi;colon", "ü", "..", ".", "-leading"]:
    st, _, body = http("/v1/pipelines/" + PIPE, {"input": "x"}, {"X-Call-Id": bad})
    check(st == 400 and b"invalid_call_id" in body and b"X-Call-Id" in body, "X-Call-Id %r is refused naming the header"
          % bad[:20], (st, body[:200]))
st, h, body = http("/v1/pipelines/" + PIPE, {"input": "my secret words 4711"}, {"X-Call-Id": "desk-4712"})
check(h.get("X-Cache") == "hit" and h.get("X-Call-Id") == "desk-4712", "a cache hit has its call id too")

# ------------------------------------------------------------- traces
st, _, body = http("/v1/calls/desk-4711")
tr = json.loads(body) if st == 200 else {}
stages = tr.get("result", {}).get("stages", [])
check(st == 200 and tr.get("id") == "desk-4711" and tr.get("cache") == "miss" and len(stages) >= 2 and
      all("input" in s and "ms" in s and "status" in s for s in stages) and tr["result"].get("intent"),
      "GET /v1/calls/ID: the whole trace (stages with input, output, status, time; intent)", body[:300])
check(b"secret words" not in body and tr.get("caller_masked") is True, "the caller's words are masked in the trace",
      body[:300])
st, _, body = http("/v1/calls/desk-4712")
check(st == 200 and json.loads(body).get("cache") == "hit", "the hit's trace says hit")
st, _, _ = http("/v1/calls/no-such-call")
check(st == 404, "an unknown call is 404", st)
for path in ["/v1/calls/desk-4711", "/v1/calls", "/v1/console/state", "/v1/console/events", "/v1/feedback.tsv"]:
    st, _, _ = http(path, key=False)
    check(st == 401, "%s needs the key" % path, st)
st, h, body = http("/console", key=False)
check(st == 200 and b"<title>Switchboard console" in body and "default-src 'none'" in h.get("Content-Security-Policy", ""),
      "GET /console is the page (no key: it holds no data), with a strict CSP")

# ----------------------------------------------------------- feedback
st, _, body = http("/v1/calls/desk-4711/feedback", {"intent": "no_such_label"})
check(st == 400, "feedback with an unknown label is refused", (st, body[:200]))
st, _, body = http("/v1/calls/desk-4711/feedback", {"intent": "billing"})
check(st == 200 and json.loads(body).get("intent") == "billing", "feedback stored", body[:200])
st, _, body = http("/v1/calls/desk-4711/feedback", b"")
check(st == 400, "feedback without a body is refused", st)
st, _, body = http("/v1/calls/desk-4711")
check(json.loads(body).get("feedback") == "billing", "the trace shows the mark")
st, _, body = http("/v1/console/state")
conf = json.loads(body)["routing"]["confusion"]
check(any(p["corrected"] == "billing" for p in conf), "the routing view shows the correction", conf)

# ------------------------------------------- the console's own CPU counter
CPU = "switchboard_console_cpu_seconds_total"
SENT = "switchboard_console_sent_bytes_total"


def console_cpu():
    m = metrics()
    paths = {dict(ls)["path"]: v for (k, ls), v in m.items() if k == CPU}
    _, _, body = http("/metrics", key=False)
    sent = re.search(r"^%s (\S+)$" % SENT, body.decode(), re.M)
    return paths, float(sent.group(1)) if sent else None


def calls(n, tag):
    ids = []
    for i in range(n):
        st, h, _ = http("/v1/pipelines/" + PIPE, {"input": "%s %d" % (tag, i)}, {"Cache-Control": "no-cache"})
        ids.append(h.get("X-Call-Id"))
    return ids


c0, b0 = console_cpu()
check(set(c0) == {"feed", "snapshot", "connect", "state", "cache_stats"} and b0 is not None,
      "/metrics has %s per path and %s" % (CPU, SENT), (c0, b0))
calls(8, "no console watching")
c1, b1 = console_cpu()
check(c1 == c0 and b1 == b0, "without a console client the counter stays still while calls complete", (c0, c1))
http("/v1/console/state")
c2, _ = console_cpu()
own = ("state", "cache_stats")              # the snapshot may refresh the cache's figures
check(c2["state"] > c1["state"] and {k: v for k, v in c2.items() if k not in own} ==
      {k: v for k, v in c1.items() if k not in own}, "GET /v1/console/state counts on its own paths only", (c1, c2))

u = urllib.parse.urlparse(URL)
conn = hc.HTTPConnection(u.hostname, u.port, timeout=10)
conn.request("GET", "/v1/console/events", headers={"Authorization": "Bearer " + KEY})
feed = conn.getresponse()
got, nbytes = [], [0]


def read_feed():
    while True:
        try:
            line = feed.fp.readline()
        except (OSError, ValueError, AttributeError):     # closed under us at the end
            return
        if not line:
            return
        if line.startswith(b"data: "):
            nbytes[0] += len(line) + 1         # the blank line after each event
            got.append(line)


threading.Thread(target=read_feed, daemon=True).start()
ids = calls(8, "a console watching")
deadline = time.time() + 5
while time.time() < deadline and not all(any(('"id":"%s"' % i).encode() in l for l in got) for i in ids):
    time.sleep(0.05)
c3, b3 = console_cpu()
check(all(any(('"id":"%s"' % i).encode() in l for l in got) for i in ids), "the feed delivered the %d calls" % len(ids))
check(c3["connect"] > c2["connect"] and c3["feed"] > c2["feed"],
      "with a console client the connect and feed paths grow (%.6f s, %.6f s)" %
      (c3["connect"] - c2["connect"], c3["feed"] - c2["feed"]), (c2, c3))
check(b3 - b1 >= nbytes[0] > 0, "%s counts the %d bytes the client read (%d)" % (SENT, nbytes[0], b3 - b1))
conn.close()

print("console api check: %s" % ("FAILED" if check.failed else "passed"))
sys.exit(1 if check.failed else 0)
