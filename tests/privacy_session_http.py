#!/usr/bin/env python3
"""privacy_session_http.py URL RUNDIR SB CONFIG REVEALED STATE RPORT CERT KEY - a
conversation under a privacy policy against a real runtime
(tests/it_privacy_session.sh starts it and says what the pipeline does).

The random-weight fixture extracts nothing, so the mobile and the e-mail
are asked for, one turn each; the last turn's reply says both back. Writes
{"kept": SESSION} to STATE: a session the script leaves mid-call, for the
wrong-key check that follows. The hand-off receiver listens here, on
https://127.0.0.1:RPORT with CERT and KEY, and takes every package (200)
unless told to hold them (503).
Standard library only.
"""
import http.server
import json
import os
import signal
import ssl
import subprocess
import sqlite3
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

URL, RUN, SB, CONFIG, REVEALED, STATE, RPORT, CERT, KEY = sys.argv[1:10]
KEYS = {"app": "app-key-0123456789", "dpo": "dpo-key-0123456789"}
check = itlib.Checks(detail_max=400)

# Each value, and the renderings a file might hold it in.
VALUES = {
    "13800138000": ["13800138000", "138 0013 8000", "幺三八零零幺三八零零零", "幺三八 零零幺三 八零零零"],
    "zhang.san@example.com": ["zhang.san"],
    "13912345678": ["13912345678", "139 1234 5678"],
    "li.si@example.com": ["li.si"],
    "13700001111": ["13700001111"],
    "wang.wu@example.com": ["wang.wu"],
    "8000123456789018": ["8000123456789018", "8000 1234 5678 9018"],
    "13500135000": ["13500135000"],
}


def req(method, path, body=None, key="app", timeout=60):
    h = {"Authorization": "Bearer " + KEYS[key], "Content-Type": "application/json"}
    st, _, raw = itlib.request(URL + path, method, body, h, timeout)
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, None


def turn(text, session=None, pipe="private"):
    body = {"input": text}
    if session:
        body["session"] = session
    return req("POST", "/v1/pipelines/" + pipe, body)


def leaks(values):
    """Each rendering of values that a file under the runtime dir holds, with those files."""
    found = {r: itlib.files_holding(RUN, r) for v in values for r in VALUES[v]}
    return {r: f for r, f in found.items() if f}


def revealed():
    try:
        return open(REVEALED).read().splitlines()
    except OSError:
        return []


def erase(flag, arg):
    env = dict(os.environ, SB_TEST_ADMIN=KEYS["dpo"])
    p = subprocess.run([SB, "privacy", "erase", flag, arg, "-c", CONFIG, "--api-key-env", "SB_TEST_ADMIN"],
                       capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


received = {}      # Idempotency-Key -> the package
holding = threading.Event()     # set: the receiver refuses (503), so a package stays queued


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not holding.is_set():
            received[self.headers.get("Idempotency-Key")] = json.loads(body)
        self.send_response(503 if holding.is_set() else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(RPORT)), Receiver)
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(CERT, KEY)
srv.socket = tls.wrap_socket(srv.socket, server_side=True)
threading.Thread(target=srv.serve_forever, daemon=True).start()

PH = "\u27e8PHONE_1\u27e9"
EM = "\u27e8EMAIL_1\u27e9"

# ------------------------------------------------------------ a call, run resumed in memory
st, j = turn("I need to update my contact details, member 8000 1234 5678 9018")
sid = (j or {}).get("session")
check(st == 200 and j["awaiting"] == {"kind": "slot", "slot": "phone"}, "turn 1 asks for the mobile", (st, j))
st, j = turn("幺三八 零零幺三 八零零零", sid)
check(st == 200 and j["state"]["slots"].get("phone") == "13800138000" and j["awaiting"] == {"kind": "slot", "slot": "email"},
      "turn 2: the mobile said in numerals fills the slot (its checks on the value; the answer shows it restored)",
      (st, j))
check(not leaks(["13800138000"]), "after turn 2: no file under the runtime dir holds the mobile in any rendering "
      "(session store and WAL included)", leaks(["13800138000"]))
st, j = turn("zhang.san@example.com", sid)
check(st == 200 and j["reply"] == "we will call 13800138000 and write to zhang.san@example.com",
      "turn 3's reply restores the mobile said in turn 2", (st, j))
check("13800138000|zhang.san@example.com" in revealed(),
      "the privacy: reveal tool got turn 2's mobile on turn 3", revealed())
st, g = req("GET", "/v1/sessions/" + str(sid))
callers = [t["caller"] for t in (g or {}).get("transcript", [])]
replies = " ".join(t["reply"] for t in (g or {}).get("transcript", []))
check(st == 200 and callers[1:] == [PH, EM] and "13800138000" not in json.dumps(g, ensure_ascii=False)
      and callers[0].endswith("member \u27e8MEMBER_1\u27e9")
      and PH in replies and g["state"]["slots"] == {"phone": PH, "email": EM},
      "the stored transcript and slots hold placeholders only (an operator's pattern from the config too)", g)

# ------------------------------------------------------------ across a kill -9 of the router
st, j = turn("please update my details")
kid = (j or {}).get("session")
st, j = turn("139 1234 5678", kid)
check(st == 200 and j["awaiting"] == {"kind": "slot", "slot": "email"}, "another call: the mobile given", (st, j))
pid = itlib.router_pid(RUN)
os.kill(pid, signal.SIGKILL)
new = itlib.wait_router(RUN, pid, lambda: req("GET", "/v1/models", timeout=2)[0] == 200, 90)
check(new is not None, "the router came back after kill -9")
st, j = turn("li.si@example.com", kid)
check(st == 200 and j["reply"] == "we will call 13912345678 and write to li.si@example.com",
      "after the restart the sealed values open: the reply restores the earlier turn's mobile", (st, j))
check("13912345678|li.si@example.com" in revealed(), "and the revealing tool gets it", revealed())
# Left mid-call (asking for the e-mail) for the wrong-key check.
st, j = turn("and a second request")
keep = (j or {}).get("session")
st, j = turn("13912345678", keep)
check(st == 200 and j["awaiting"] == {"kind": "slot", "slot": "email"}, "a session left mid-call", (st, j))
with open(STATE, "w") as f:
    json.dump({"kept": keep}, f)

# ------------------------------------------------------------ a hand-off carries the real values, sealed
holding.set()
st, j = turn("I want to complain")
hid = (j or {}).get("session")
turn("13700001111", hid)
st, j = turn("I'd rather not say", hid)
h = (j or {}).get("handoff") or {}
check(st == 200 and j["done"] is True and h.get("reason") == "refused" and h.get("slots", {}).get("phone") == "13700001111",
      "a refusal hands the call off; the package names the real mobile", (st, j))
db = sqlite3.connect("file:%s?mode=ro" % os.path.join(RUN, "sessions.sqlite"), uri=True)
row = db.execute("SELECT sealed, typeof(body), delivered FROM handoff_outbox WHERE session = ?", (hid,)).fetchone()
db.close()
check(row == (1, "blob", None) and not leaks(["13700001111"]),
      "the queued package waits sealed: no file holds its values", (row, leaks(["13700001111"])))
holding.clear()
for _ in range(150):
    if hid in received:
        break
    time.sleep(0.1)
pkg = received.get(hid, {})
callers = [t["caller"] for t in pkg.get("transcript", [])]
check(pkg.get("slots", {}).get("phone") == "13700001111" and "13700001111" in callers and "\u27e8" not in json.dumps(pkg)
      and pkg.get("reason") == "refused" and "phone=13700001111" in pkg.get("summary", ""),
      "the https receiver got the package with the real values (slots, summary, transcript), no placeholder", pkg)
time.sleep(0.5)     # the delivery thread marks it after the 200
st, c = req("GET", "/v1/console/handoffs", key="dpo")
row = next((x for x in (c or {}).get("handoffs", []) if x["session"] == hid), {})
check(st == 200 and row.get("reason") == "refused" and row.get("pipeline") == "private"
      and row.get("state") == "delivered" and row.get("url") == "https://127.0.0.1:%s/handoff" % RPORT
      and "13700001111" not in json.dumps(c),
      "the console lists the hand-off: reason and delivery state (delivered), never the package", (st, c))
check(not leaks(["13700001111"]), "after delivery the outbox row holds no package", leaks(["13700001111"]))
st, c = req("GET", "/v1/console/handoffs", key="app")
check(st == 403, "a client key may not list hand-offs", st)

check(not leaks(list(VALUES)), "no file under the runtime dir holds any value in any rendering", leaks(list(VALUES)))

# ------------------------------------------------------------ a call ended before its turn runs
# (max_bytes): its answer is made before the privacy door, and still shows
# the values, not the placeholders.
st, j = turn("call me on 13500135000 " + "x" * 600, pipe="tight")
tid = (j or {}).get("session")
st, j = turn("y" * 600, tid, pipe="tight")
h = (j or {}).get("handoff") or {}
said = [t["caller"] for t in h.get("transcript", [])]
check(st == 200 and j["done"] is True and h.get("reason") == "max_bytes" and said and said[0].startswith("call me on 13500135000")
      and "\u27e8" not in json.dumps(j) and not leaks(["13500135000"]),
      "a call ended by max_bytes: its package in the answer has the values, the store none", (st, j))

# ------------------------------------------------------------ erasure
rc, out, err = erase("--value", "138-0013-8000")
got = json.loads(out)["erased"] if rc == 0 else {}
check(rc == 0 and got.get("sessions") == 1, "erase --value finds the session by its sealed values", (rc, out, err))
st, _ = req("GET", "/v1/sessions/" + str(sid), key="dpo")
check(st == 404, "the erased session is gone", st)
rc, out, err = erase("--session", hid or "x")
check(rc == 0 and json.loads(out)["erased"]["sessions"] == 1, "erase --session", (rc, out, err))
st, _ = req("GET", "/v1/sessions/" + str(kid), key="dpo")
check(st == 200, "another caller's session is kept", st)

sys.exit(check.summary())
