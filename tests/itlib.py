"""itlib.py - what the Python drivers of the tests/it_*.sh scripts share.

Standard library only. A driver imports it with
    sys.path.insert(0, os.path.dirname(__file__))
    import itlib
and keeps its own special clients (raw sockets, the openai SDK) to itself.
"""
import json
import os
import re
import socket
import struct
import sys
import time
import urllib.error
import urllib.request


class Checks:
    """The check counter: check(cond, what, detail) prints "ok   WHAT" or
    "FAIL WHAT: DETAIL" (DETAIL cut to detail_max characters if given) and
    returns cond; summary() prints "N passed, N failed" and is the exit status."""

    def __init__(self, detail_max=None):
        self.passed = self.failed = 0
        self.detail_max = detail_max

    def __call__(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("ok   " + what)
        else:
            self.failed += 1
            d = str(detail)[:self.detail_max] if self.detail_max else str(detail)
            print("FAIL " + what + (": " + d if detail else ""))
        sys.stdout.flush()
        return cond

    def summary(self, blank_line=False):
        print(("\n" if blank_line else "") + "%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed else 0


def router_pid(run_dir):
    """The router's pid, from the supervisor's RUNDIR/state.json."""
    with open(os.path.join(run_dir, "state.json")) as f:
        return json.load(f)["router"]["pid"]


def wait_router(run_dir, old_pid, serves, secs=60):
    """After a kill of router old_pid: the supervisor's new router's pid
    once serves() says it answers (exceptions count as not yet), or None."""
    end = time.time() + secs
    while time.time() < end:
        try:
            pid = router_pid(run_dir)
            if pid and pid != old_pid and serves():
                return pid
        except Exception:  # noqa: BLE001 - a router half up: ask again
            pass
        time.sleep(0.1)
    return None


def files_holding(root_dir, needle):
    """Files under root_dir that hold needle, as UTF-8 or as JSON \\u
    escapes (how a JSON store writes non-ASCII), relative to root_dir."""
    forms = {needle.encode(), json.dumps(needle)[1:-1].encode()}
    hits = []
    for root, _, files in os.walk(root_dir):
        for f in files:
            p = os.path.join(root, f)
            try:
                data = open(p, "rb").read()
            except OSError:
                continue
            if any(x in data for x in forms):
                hits.append(os.path.relpath(p, root_dir))
    return hits


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def host_port(url):
    """("127.0.0.1", 8080) from "http://127.0.0.1:8080..."."""
    host, port = re.match(r"http://([^:]+):(\d+)", url).groups()
    return host, int(port)


def request(url, method, body=None, headers=None, timeout=30):
    """(status, headers dict, body bytes) of one HTTP request; an HTTP error
    status is returned, not raised. body: a dict or list (sent as JSON),
    bytes (as they are) or None (no body)."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def sse_text(raw):
    """Concatenated delta contents (or texts) of an OpenAI SSE body, and
    whether it ended in [DONE]."""
    text, done = "", False
    for line in raw.decode().split("\n"):
        if not line.startswith("data: "):
            continue
        data = line[6:].strip()
        if data == "[DONE]":
            done = True
            continue
        ch = json.loads(data).get("choices") or [{}]
        text += (ch[0].get("delta") or {}).get("content") or ch[0].get("text") or ""
    return text, done


def bearer(key):
    """The Authorization header for KEY ({} for no key)."""
    return {"Authorization": "Bearer " + key} if key else {}


def read_to_close(s):
    """Everything socket S receives until the peer closes (or an error or
    S's timeout ends it); S is closed."""
    out = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            out += c
    except OSError:
        pass
    s.close()
    return out


# ------------------------------------------- msgpack and the worker socket
def mp_enc(v):
    """msgpack for the types the worker protocol uses."""
    if v is None:
        return b"\xc0"
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        return bytes([v]) if 0 <= v < 128 else struct.pack(">Bq", 0xD3, v)
    if isinstance(v, float):
        return struct.pack(">Bd", 0xCB, v)
    if isinstance(v, str):
        b = v.encode()
        return struct.pack(">BI", 0xDB, len(b)) + b
    if isinstance(v, list):
        return struct.pack(">BI", 0xDD, len(v)) + b"".join(mp_enc(x) for x in v)
    if isinstance(v, dict):
        return struct.pack(">BI", 0xDF, len(v)) + b"".join(mp_enc(k) + mp_enc(x) for k, x in v.items())
    raise TypeError(v)


def mp_dec(b, i=0):
    """(object, next index) for every msgpack type but ext; strings are
    decoded with errors="replace" (a token piece may be part of a character),
    bin comes as bytes."""
    t = b[i]
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if t in fixed:
        return fixed[t], i + 1
    if t <= 0x7F:
        return t, i + 1
    if t >= 0xE0:
        return t - 256, i + 1
    if 0xA0 <= t <= 0xBF or t in (0xD9, 0xDA, 0xDB):
        n, i = (t & 0x1F, i + 1) if t <= 0xBF else (int.from_bytes(b[i + 1:i + 1 + (1 << (t - 0xD9))], "big"),
                                                     i + 1 + (1 << (t - 0xD9)))
        return b[i:i + n].decode(errors="replace"), i + n
    if t in (0xC4, 0xC5, 0xC6):
        w = 1 << (t - 0xC4)
        n = int.from_bytes(b[i + 1:i + 1 + w], "big")
        return bytes(b[i + 1 + w:i + 1 + w + n]), i + 1 + w + n
    nums = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
            0xCA: ">f", 0xCB: ">d"}
    if t in nums:
        n = struct.calcsize(nums[t])
        return struct.unpack(nums[t], b[i + 1:i + 1 + n])[0], i + 1 + n
    if 0x80 <= t <= 0x9F or t in (0xDC, 0xDD, 0xDE, 0xDF):
        is_map = 0x80 <= t <= 0x8F or t in (0xDE, 0xDF)
        if t in (0xDC, 0xDE):
            n, i = struct.unpack(">H", b[i + 1:i + 3])[0], i + 3
        elif t in (0xDD, 0xDF):
            n, i = struct.unpack(">I", b[i + 1:i + 5])[0], i + 5
        else:
            n, i = t & 0x0F, i + 1
        out = {} if is_map else []
        for _ in range(n):
            if is_map:
                k, i = mp_dec(b, i)
                out[k], i = mp_dec(b, i)
            else:
                x, i = mp_dec(b, i)
                out.append(x)
        return out, i
    raise ValueError("msgpack type 0x%02x" % t)


def ipc_call(sock_path, method, params, timeout=30):
    """One request on a worker's socket (docs/ipc.md); the whole reply map."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    body = mp_enc({"id": 1, "method": method, "params": params})
    s.sendall(struct.pack(">I", len(body)) + body)
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
        c = s.recv(1 << 20)
        if not c:
            break
        buf += c
    s.close()
    return mp_dec(buf, 4)[0]
