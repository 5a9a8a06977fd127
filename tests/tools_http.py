#!/usr/bin/env python3
"""tools_http.py URL LIVE_DIR MARKER - tool stages and HTTP edges.

Driven by tests/it_tools_http.sh against `switchboard router` with the
tool-only pipelines of its config. Prints one line per check and
"N passed, N failed"; exit 1 on any failure.
"""
import hashlib, json, os, re, socket, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

URL, LIVE = sys.argv[1], sys.argv[2]
ORPHAN = "sleep " + sys.argv[3]          # not in our own argv, so pgrep -f cannot match us
KEY = os.environ["SB_TEST_API_KEY"]
HOST, PORT = itlib.host_port(URL)
check = itlib.Checks(detail_max=600)


def http(method, path, body=None, timeout=60):
    """(status, headers, body bytes); body may be a dict (JSON) or bytes."""
    return itlib.request(URL + path, method, body, {"Content-Type": "application/json", **itlib.bearer(KEY)}, timeout)


def pipeline(name, text):
    st, h, b = http("POST", "/v1/pipelines/" + name, {"input": text})
    try:
        return st, h, json.loads(b)
    except ValueError:
        return st, h, b


def raw(data, timeout=5):
    """Send bytes on a fresh connection; read until the server closes."""
    s = socket.create_connection((HOST, PORT))
    s.settimeout(timeout)
    s.sendall(data)
    return itlib.read_to_close(s)


# The router is starting: a sanitized one on a loaded box takes seconds.
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        socket.create_connection((HOST, PORT)).close()
        break
    except OSError:
        time.sleep(0.05)

# ---- the environment: an allowlist and the stage's env:, no secrets
st, _, r = pipeline("env", "hi")
out = r["stages"][0]["output"] if st == 200 else ""
check(st == 200 and "SB_TOOL_VAR=from the stage" in out.splitlines(), "a tool sees its stage's env: values", out)
check(KEY not in out and "SB_TEST_API_KEY" not in out, "a tool does not see the gateway's API key variable", out)
check("SB_TEST_OTHER_SECRET" not in out and re.search(r"^PATH=", out, re.M) is not None,
      "a tool gets PATH but not the router's other variables", out)
check("LANG=C" in out.splitlines() and out.count("LANG=") == 1, "the stage's env: overrides an allowlisted variable", out)

# ---- large input travels on stdin, intact
big = ("línea %06d: 路灯坏了 \"quoted\" \\ back\n" * 6000) % tuple(range(6000))
big = big[:200 * 1024]
st, _, r = pipeline("big", big)
want = hashlib.sha256(big.encode()).hexdigest()
got = r["stages"][0]["output"].split()[0] if st == 200 and r["stages"][0]["output"] else ""
check(st == 200 and got == want, "%d KB of input reaches a tool on stdin intact (sha256)" % (len(big.encode()) // 1024),
      (st, r if st != 200 else r["stages"][0]))
st, _, r = pipeline("bigarg", big)
stg = r["stages"][0] if st == 200 else {}
check(stg.get("status") == "error" and "stdin" in stg.get("error", ""),
      "200 KB put into argv fails the stage with an error that points at stdin", stg.get("error", r))

# ---- timeout: the tool's whole process group goes
t0 = time.time()
st, _, r = pipeline("orphan", "x")
stg = r["stages"][0] if st == 200 else {}
check(st == 200 and stg.get("status") == "error" and "timeout" in stg.get("error", ""),
      "a tool past its timeout_ms fails its stage (%.1f s)" % (time.time() - t0), r)


def leftovers():
    left = ""
    for _ in range(20):
        left = subprocess.run(["pgrep", "-f", ORPHAN], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.1)
    return left


left = leftovers()
check(not left, "no process of a timed-out tool is left (the grandchild `sleep` too)", left)
# A run cancelled under a running tool (here its pipeline's timeout; a client
# that hangs up takes the same path, rt_tool_cancel) kills the group too.
st, _, r = pipeline("cutoff", "x")
left = leftovers()
check(st == 504 and not left, "a run cancelled under its tool leaves no process (504, group killed)", (st, left))

# ---- 300 concurrent calls of a stage with max_concurrent 4, max_queue 8
N = 300
results = [None] * N
gate = threading.Barrier(N)


def call(i):
    gate.wait()
    try:
        st, h, b = http("POST", "/v1/pipelines/count", {"input": "n%d" % i}, timeout=60)
        results[i] = (st, h.get("Retry-After"), b)
    except Exception as e:                  # noqa: BLE001 - reported below
        results[i] = (0, None, str(e).encode())


threads = [threading.Thread(target=call, args=(i,)) for i in range(N)]
t0 = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
dt = time.time() - t0
codes = [r[0] for r in results]
ok200 = [r for r in results if r[0] == 200 and json.loads(r[2])["stages"][0]["status"] == "ok"]
busy = [r for r in results if r[0] == 503]
try:
    peak = max(int(x) for x in open(LIVE + ".log").read().split())
except (OSError, ValueError):
    peak = -1
check(0 < peak <= 4, "300 concurrent calls: at most max_concurrent (4) tool processes at once (peak %d)" % peak)
check(len(ok200) + len(busy) == N, "every call answered 200 or 503 in %.1f s (%d ok, %d busy)" % (dt, len(ok200), len(busy)),
      (sorted(set(codes)), sorted({r[2][:120] for r in results if r[0] not in (200, 503)})[:3]))
check(len(ok200) >= 12 and busy, "the running 4 and the queued 8 complete, the excess gets 503", (len(ok200), len(busy)))
check(busy and all(r[1] and json.loads(r[2])["error"]["code"] == "server_busy" for r in busy),
      "each 503 carries Retry-After and code server_busy", busy[:1])
st, _, r = pipeline("count", "after")
check(st == 200 and r["stages"][0]["status"] == "ok", "the stage serves again once the burst has drained", st)

# ---- HTTP: conflicting framing headers
body = b'{"input": "hi"}'
head = "POST /v1/pipelines/env HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n" % KEY


def framed(extra):
    return raw((head + extra + "Connection: close\r\n\r\n").encode() + body + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")


def json_error(out, status, code):
    """One response only, with this status and the JSON error of this code (its message, or None)."""
    head, _, rest = out.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 %d" % status) or out.count(b"HTTP/1.1") != 1 or \
            b"application/json" not in head:
        return None
    try:
        e = json.loads(rest)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return e["message"] if e.get("code") == code else None


out = framed("Content-Length: %d\r\nContent-Length: 5\r\n" % len(body))
check("Content-Length" in (json_error(out, 400, "bad_framing") or ""),
      "two different Content-Length headers: 400 bad_framing naming the header, nothing else served", out[:300])
# evhttp itself refuses these (its HTML page) before the request reaches a
# door: the connection's guard answers them first.
out = framed("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(body))
check(json_error(out, 400, "bad_framing"), "Content-Length with Transfer-Encoding: chunked: 400 bad_framing JSON", out[:300])
out = framed("Transfer-Encoding: chunked, identity\r\n")
check(json_error(out, 400, "bad_framing"), "Transfer-Encoding: chunked, identity: 400 bad_framing JSON", out[:300])
out = framed("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n Transfer-Encoding: identity\r\n" % len(body))
check(json_error(out, 400, "bad_framing"), "a folded Transfer-Encoding line: 400 bad_framing JSON", out[:300])
out = framed("Content-Length: +%d\r\n" % len(body))
check(json_error(out, 400, "bad_framing"), "Content-Length: +N: 400 bad_framing JSON", out[:300])
out = framed("Content-Length: 123456789012345678901234\r\n")
check(json_error(out, 413, "body_too_large"), "a 24-digit Content-Length: 413 body_too_large JSON", out[:300])
chunked = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
out = raw((head + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode() + chunked)
check(out.startswith(b"HTTP/1.1 200") and b'"stages"' in out, "one Transfer-Encoding: chunked alone is served", out[:300])

# ---- one Authorization header: with two, which key was meant is ambiguous
auth2 = "POST /v1/pipelines/env HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\n" \
        "Content-Length: %d\r\nConnection: close\r\n\r\n"
for first, second in [(KEY, "wrong"), ("wrong", KEY), (KEY, KEY)]:
    twice = "Authorization: Bearer %s\r\nAuthorization: Bearer %s\r\n" % (first, second)
    out = raw((auth2 % (twice, len(body))).encode() + body)
    check("Authorization" in (json_error(out, 400, "duplicate_header") or ""),
          "two Authorization headers (%s, %s): 400 duplicate_header naming it" %
          ("right" if first == KEY else "wrong", "right" if second == KEY else "wrong"), out[:300])
out = framed("Content-Length: %d\r\nContent-Length: %d\r\n" % (len(body), len(body)))
check(out.startswith(b"HTTP/1.1 200"), "a repeated identical Content-Length is accepted (RFC 9112 6.3)", out[:300])

# ---- NUL: refused in names and in text, with the field named
st, _, b = http("POST", "/v1/chat/completions", b'{"model": "tiny\\u0000xyz", "messages": [{"role": "user", "content": "hi"}]}')
check(st == 400 and b"'model'" in b, "\"model\": \"tiny\\u0000xyz\" is refused with 400 naming 'model'", (st, b[:300]))
st, _, b = http("POST", "/v1/pipelines/env", b'{"input": "a\\u0000b"}')
check(st == 400 and b"'input'" in b, "\"input\": \"a\\u0000b\" is refused with 400 naming 'input'", (st, b[:300]))
st, _, b = http("POST", "/v1/chat/completions",
                b'{"model": "tiny", "messages": [{"role": "user", "content": "x\\u0000y"}]}')
check(st == 400 and b"messages[0].content" in b, "NUL in a message's content: 400 naming messages[0].content", (st, b[:300]))

# ---- JSON nested at the writer's limit: the reply is valid JSON whatever the tool printed
st, _, b = http("POST", "/v1/pipelines/deep", {"input": "x"})
try:
    r = json.loads(b)
    good = st == 200 and r["stages"][0]["status"] == "ok" and \
        ("json" not in r["stages"][0] or r["stages"][0]["json"] == json.loads(r["stages"][0]["output"]))
except ValueError as e:
    good, r = False, "%s: %r" % (e, b[-200:])
check(good, "a tool's JSON nested 63 deep: the reply is valid JSON with the tool's text", r)

sys.exit(check.summary())
