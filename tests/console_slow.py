#!/usr/bin/env python3
"""console_slow.py URL KEY PIPELINE - a console client that stops reading.

The router writes the live feed straight to the client's socket when
nothing is queued before it (router/console.c, send_direct); a client that
stops reading makes those writes come up short, and the rest must be
queued in order. Loopback TCP buffers take about 2 MB before a write comes
up short, so the runtime under test shows the caller's text
(console.show_caller_text) and the calls carry 64 KB each: 48 of them
overflow the buffers. When the client reads again the stream must be
intact - chunk framing, every event valid JSON, every call there, in order.
Exit 1 on any failure.
"""
import json, os, socket, sys, urllib.parse

URL, KEY, PIPE = sys.argv[1:4]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import itlib  # noqa: E402

check = itlib.Checks(detail_max=400)
u = urllib.parse.urlparse(URL)


H = {"Content-Type": "application/json", "Cache-Control": "no-cache", "Authorization": "Bearer " + KEY}


def calls(n, tag):
    ids = []
    for i in range(n):
        _, h, _ = itlib.request(URL + "/v1/pipelines/" + PIPE, "POST", {"input": "%s %d" % (tag, i)}, H)
        ids.append(h.get("X-Call-Id"))
    return ids


# A console that stops reading: the router's writes to it come up short, the
# rest is queued, and when the client reads again the stream is intact -
# chunk framing, every event valid JSON, every call there and in order.
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
s.connect((u.hostname, u.port))
s.sendall(("GET /v1/console/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" % KEY).encode())
slow_ids = calls(48, "a console that is not reading " + "x" * 65536)
s.settimeout(5)
raw = b""
while True:
    try:
        b = s.recv(1 << 16)
    except socket.timeout:
        break
    if not b:
        break
    raw += b
s.close()
head, _, body = raw.partition(b"\r\n\r\n")
data, ok_framing = b"", True
while body:
    line, sep, rest = body.partition(b"\r\n")
    try:
        size = int(line, 16)
    except ValueError:
        ok_framing = False
        break
    if len(rest) < size + 2 or rest[size:size + 2] != b"\r\n":
        ok_framing = len(rest) < size + 2      # a chunk cut by the end of our read is fine
        break
    data += rest[:size]
    body = rest[size + 2:]
events = [e[6:] for e in data.split(b"\n\n") if e.startswith(b"data: ")]
parsed, bad = [], 0
for e in events:
    try:
        parsed.append(json.loads(e))
    except ValueError:
        bad += 1
seen = [ev["id"] for ev in parsed if ev.get("type") == "call"]
check(b"chunked" in head.lower() and ok_framing and bad == 0,
      "a slow console client gets an intact chunked SSE stream (%d events, %d bytes)" % (len(events), len(data)),
      (head[:200], bad))
check([i for i in seen if i in slow_ids] == slow_ids,
      "it gets all %d calls made while it was not reading, in order" % len(slow_ids),
      "%d of them" % len([i for i in seen if i in slow_ids]))
check(itlib.request(URL + "/health", "GET")[0] == 200, "the router is healthy after it")

print("console slow-client check: %s" % ("FAILED" if check.failed else "passed"))
sys.exit(1 if check.failed else 0)
