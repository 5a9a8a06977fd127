"""itlib.py - what the Python drivers of the tests/it_*.sh scripts share.

Standard library only. A driver imports it with
    sys.path.insert(0, os.path.dirname(__file__))
    import itlib
and keeps its own special clients (raw sockets, the openai SDK) to itself.
"""
import json
import re
import sys
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
