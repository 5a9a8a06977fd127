#!/usr/bin/env python3
"""An encoder's token caps and hang-ups inside one text (tests/it_embed_limits.sh).

    embed_limits.py URL

The encoder is a random model of multilingual-e5-small's shape with a
512-token window and the tiny vocabulary of tests/e5_tiny.py, on one
thread. In that vocabulary "hello" and " hello" are one piece each, so
hello(k) with input_type raw is k + 2 tokens (<s>, pieces, </s>): the caps of
docs/EMBEDDINGS.md (8,192 a text, 65,536 a request) can be aimed at exactly.
"""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

url = sys.argv[1]
E = url + "/v1/embeddings"
H = {"Authorization": "Bearer " + os.environ["SB_TEST_API_KEY"], "Content-Type": "application/json"}
check = itlib.Checks(detail_max=300)


def hello(k):
    return " ".join(["hello"] * k)


def post(u, doc, timeout):
    """(status, body, seconds); status 0 when no answer came in time."""
    t0 = time.time()
    try:
        st, _, body = itlib.request(u, "POST", doc, H, timeout=timeout)
    except OSError as e:                              # timeouts included
        st, body = 0, repr(e).encode()
    return st, body, time.time() - t0


def embed(inp, timeout=30):
    return post(E, {"model": "e5", "input": inp, "input_type": "raw"}, timeout)


def code_of(body):
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


# The box may be loaded (2 cores shared with other jobs): every bound below
# adds what a short call costs here and now, measured first.
base = max(embed("hello world")[2] for _ in range(3))
print("note: a short call takes %.3f s here" % base)
_, _, window = embed(hello(510))                      # one full 512-token window
print("note: one 512-token window takes %.3f s; a text at the cap is 16 windows (~%.1f s)" % (window, 16 * window))

# -------------------------------------------- a hang-up inside one long text
# A text of exactly 8,192 tokens, the cap (16 windows, several seconds of
# work: it is accepted, so no answer comes back); its caller hangs up after
# 0.5 s. The encoder checks for cancellation three times in each of its 12
# layers (~1/36 of a window: tens of ms here, ~0.1 s with the box
# saturated), so it is free again well within 1 s of the hang-up; before
# those checks existed it went on to the end of the text, and the short
# calls below waited seconds.
# Bound per short call, sent one after the other from the hang-up on:
# 1 s (the encoder freed) + what a short call costs on this box (base).
doc = json.dumps({"model": "e5", "input": hello(8190), "input_type": "raw"}).encode()
s = socket.create_connection(itlib.host_port(url))
s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: "
          + H["Authorization"].encode() + b"\r\nContent-Length: " + str(len(doc)).encode() + b"\r\n\r\n" + doc)
s.settimeout(0.5)
try:
    early = s.recv(4096)
except socket.timeout:
    early = b""
s.close()
hung_up = time.time()
lat = []
for _ in range(3):
    st, body, dt = embed("hello world", timeout=60)
    lat.append((st, round(dt, 3), round(time.time() - hung_up, 3)))
check(not early, "a text of exactly 8,192 tokens is accepted (no answer within 0.5 s)", early[:200])
check(all(st == 200 for st, _, _ in lat) and all(dt <= 1.0 + base for _, dt, _ in lat),
      "a caller who hangs up after 0.5 s inside a text of 8,192 tokens: each short call after it answered within "
      "1 s + %.3f s (status, seconds, seconds since the hang-up: %s)" % (base, lat), lat)

# ------------------------------------------------------- over the caps: 400
# Refused before any encoding: tokenizing 1 MB takes ~0.1 s on an idle box
# (~1 s with it saturated), encoding it would take minutes (780 windows).
# Bound: 5 s plus a short call - far from either.
AT_ONCE = 5
MB = "word " * 200000
st, body, dt = embed(MB, timeout=20)
check(st == 400 and code_of(body) == "input_too_long" and dt < AT_ONCE + base,
      "/v1/embeddings: a 1 MB text -> 400 input_too_long at once (%.2f s)" % dt, (st, body[:200]))
check(b"8192" in body, "the message names the cap", body[:200])
st, body, dt = post(url + "/v1/pipelines/route", {"input": MB}, 20)
check(st == 400 and code_of(body) == "input_too_long" and dt < AT_ONCE + base,
      "pipeline: a 1 MB input to an intent stage on the encoder -> 400 input_too_long at once (%.2f s)" % dt,
      (st, body[:200]))
nine = [hello(7500)] * 9                              # 9 x 7,502 tokens: each under 8,192, together over 65,536
st, body, dt = embed(nine, timeout=20)
check(st == 400 and code_of(body) == "input_too_long" and b"65536" in body and dt < AT_ONCE + base,
      "nine texts just under the text cap, over the request cap -> 400 input_too_long at once (%.2f s)" % dt,
      (st, body[:200]))
st, body, dt = embed(hello(8191), timeout=20)          # 8,193 tokens: one over
check(st == 400 and code_of(body) == "input_too_long" and b"8193 tokens" in body,
      "a text of 8,193 tokens -> 400 input_too_long", (st, body[:200]))

sys.exit(check.summary())
