#!/usr/bin/env python3
"""slots_http.py URL RECEIVER_PORT RUNDIR - slots asked for, checked, re-asked and
handed off, against a real runtime (tests/it_slots.sh starts it; no API
key). The hand-off packages of `slots` go to a receiver served here on
RECEIVER_PORT, which fails the first two attempts of every package (and
every attempt of a package it is told to hold back, across a kill -9 of
the router: the supervisor's RUNDIR/state.json gives its pid).

The `slots` pipeline asks for account (seven digits, re-asked once), id
(a resident ID by its check character; optional) and name (no checks).
The random-weight fixture extracts nothing, so every slot is asked for.
"""
import http.client
import http.server
import json
import os
import signal
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

u = urllib.parse.urlparse(sys.argv[1])
RECEIVER_PORT, RUN = int(sys.argv[2]), sys.argv[3]
ID = "11010519491231002X"       # a resident ID whose MOD 11-2 check character is X
check = itlib.Checks(detail_max=600)


def req(method, path, body=None):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    data = json.dumps(body).encode() if body is not None else None
    c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, None


def turn(text, session=None):
    body = {"input": text}
    if session:
        body["session"] = session
    return req("POST", "/v1/pipelines/slots", body)


def asks(j, slot):
    return j is not None and j.get("awaiting") == {"kind": "slot", "slot": slot} and j["done"] is False


def slots(j):
    return j["state"]["slots"]


# ---------------------------------------------------- the hand-off receiver
attempts, accepted, lock = {}, {}, threading.Lock()
held = set()        # keys refused for now, whatever the attempt


class Receiver(http.server.BaseHTTPRequestHandler):
    """Fails each package's first two attempts (503); takes a package once
    per Idempotency-Key (a repeat is acknowledged, not taken again)."""

    def do_POST(self):
        key = self.headers.get("Idempotency-Key")
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with lock:
            attempts[key] = attempts.get(key, 0) + 1
            ok = attempts[key] > 2 and key not in held
            if ok and key not in accepted:
                accepted[key] = json.loads(body)
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", RECEIVER_PORT), Receiver)
threading.Thread(target=srv.serve_forever, daemon=True).start()
handoffs = {}       # session -> the package its answer carried


# ---------------------------------------------------- spoken digits, correction, several at once
st, j = turn("I want to check my bill")
sid = j and j.get("session")
check(st == 200 and asks(j, "account") and j["reply"] == "What is your account number?", "account asked", (st, j))
st, j = turn("four four one zero zero three two", sid)
check(st == 200 and slots(j).get("account") == "4410032" and asks(j, "id")
      and j["reply"] == "What is your resident ID number?",
      "an account said in English digit words is taken as digits; the ID is asked next", (st, j))
st, j = turn("no, it's 4410033, and my ID is 110105 19491231 002X", sid)
check(st == 200 and slots(j).get("account") == "4410033" and slots(j).get("id") == ID and asks(j, "name"),
      "a correction replaces the account it fits, and the ID given with it (spaced groups) fills the ID", (st, j))
st, j = turn("Ann", sid)
check(st == 200 and j["awaiting"] is None and j["handoff"] is None and j["done"] is False
      and j["reply"] == f"account 4410033 id {ID} name Ann",
      "a slot without checks takes the answer as said; the run goes on with every slot", (st, j))

# ---------------------------------------------------- Chinese numerals, several slots in one answer
st, j = turn("我要查账单")
zid = j and j.get("session")
check(st == 200 and asks(j, "account") and j["reply"] == "请问您的账号是多少？", "a Chinese caller is asked in Chinese", (st, j))
st, j = turn("账号四四一零零三二，身份证" + ID, zid)
check(st == 200 and slots(j).get("account") == "4410032" and slots(j).get("id") == ID and asks(j, "name")
      and j["reply"] == "请问您怎么称呼？",
      "an answer with two slots (one in Chinese numerals) fills both; the next empty one is asked", (st, j))

# ---------------------------------------------------- a checksum refuses, an optional slot is declined
st, j = turn("I need my bill")
oid = j and j.get("session")
turn("4410032", oid)
st, j = turn("110105194912310021", oid)      # the check character is X, not 1
check(st == 200 and asks(j, "id") and "id" not in slots(j) or slots(j).get("id") in (None, ""),
      "an ID with a wrong check character is refused and asked again", (st, j))
st, j = turn("I'd rather not say", oid)
check(st == 200 and asks(j, "name") and not slots(j).get("id"),
      "a refusal of an optional slot goes on without it", (st, j))
st, j = turn("Bob", oid)
check(st == 200 and j["reply"] == "account 4410032 id  name Bob" and j["handoff"] is None,
      "the call completes without the declined slot", (st, j))
st, j = turn("I need my bill")
pid = j and j.get("session")
turn("4410032", pid)
turn("skip", pid)
st, j = turn("my ID is " + ID, pid)
check(st == 200 and slots(j).get("id") == ID and not slots(j).get("name") and asks(j, "name"),
      "asked for the name, an answer holding only an ID fills the ID and is not taken as the name", (st, j))
long_name = "欧阳" + "娜" * 150 + " the third"
st, j = turn("  " + long_name + " ", pid)
check(st == 200 and j["reply"] == f"account 4410032 id {ID} name {long_name}",
      "a long answer to a slot without checks is taken whole, trimmed", (st, j))

# ---------------------------------------------------- re-asks, then a hand-off
st, j = turn("我要查账单")
rid = j and j.get("session")
st, j = turn("幺二三", rid)
check(st == 200 and asks(j, "account") and j["reply"] == "账号是七位数字，请再说一遍。",
      "an answer that fails the pattern is asked again with the re-ask text", (st, j))
st, j = turn("十二", rid)
h = (j or {}).get("handoff") or {}
handoffs[rid] = h
check(st == 200 and j["done"] is True and j["awaiting"] is None and h.get("reason") == "retries_exhausted"
      and j["reply"] == "正在为您转接人工服务，请稍候。",
      "past its retries the call is handed off, with the hand-off reply", (st, j))
check([t["caller"] for t in h.get("transcript", [])] == ["我要查账单", "幺二三", "十二"]
      and h["transcript"][-1]["reply"] == "正在为您转接人工服务，请稍候。"
      and "retries_exhausted" in h.get("summary", "") and "slots" in h and "confidence" in h and "intent" in h,
      "the package holds the transcript with this turn, the slots, a summary and the reason", h)
st, j = turn("4410032", rid)
check(st == 409 and j["error"]["code"] == "session_ended", "a handed-off call takes no more turns", (st, j))
st, j = req("GET", "/v1/sessions/" + rid)
check(st == 200 and j["done"] is True and len(j["transcript"]) == 3, "the session shows the call ended", (st, j))

# ---------------------------------------------------- a required slot refused
st, j = turn("I want to check my bill")
fid = j and j.get("session")
st, j = turn("no, I'd rather not", fid)
h = (j or {}).get("handoff") or {}
handoffs[fid] = h
check(st == 200 and j["done"] is True and h.get("reason") == "refused"
      and j["reply"] == "Putting you through to a colleague."
      and h.get("summary", "").endswith("handed off: refused"),
      "a refusal of a required slot hands the call to a person", (st, j))
st, j = turn("I want to check my bill")
gid = j and j.get("session")
turn("4410032", gid)
turn(ID, gid)
st, j = turn("不方便说", gid)
h = (j or {}).get("handoff") or {}
handoffs[gid] = h
check(st == 200 and h.get("reason") == "refused" and h["slots"] == {"account": "4410032", "id": ID}
      and "account=4410032" in h["summary"] and ID in h["summary"],
      "the package carries the real slot values given before the refusal", (st, j))

# ---------------------------------------------------- routed to a person
st, j = req("POST", "/v1/pipelines/agent", {"input": "let me talk to a person"})
h = (j or {}).get("handoff") or {}
check(st == 200 and j["done"] is True and h.get("reason") == "asked" and h.get("intent") == j["intent"]
      and j["intent"] in ("human_agent", "complaint") and isinstance(h.get("confidence"), float)
      and j["reply"] == "a colleague will take your call" and len(h.get("transcript", [])) == 1,
      "an intent of conversation.handoff_intents hands the call off as asked, after the pipeline's reply", (st, j))

# ---------------------------------------------------- max_bytes
st, j = req("POST", "/v1/pipelines/bytes", {"input": "x" * 600})
bid = j and j.get("session")
st, j = req("POST", "/v1/pipelines/bytes", {"input": "y" * 600, "session": bid})
h = (j or {}).get("handoff") or {}
handoffs[bid] = h
check(st == 200 and j["done"] is True and h.get("reason") == "max_bytes" and len(h.get("transcript", [])) == 1,
      "a turn past max_bytes ends the call with a package (the turns stored so far)", (st, j))

# ---------------------------------------------------- a kill -9 with a package undelivered
st, j = turn("I want to check my bill")
kid = j and j.get("session")
with lock:
    held.add(kid)
st, j = turn("skip it", kid)
handoffs[kid] = (j or {}).get("handoff") or {}
check(st == 200 and handoffs[kid].get("reason") == "refused", "a call handed off while its receiver refuses", (st, j))
end = time.time() + 10
while time.time() < end and attempts.get(kid, 0) < 3:
    time.sleep(0.05)
# A confirmation awaited when the router dies: the session keeps the stage
# that asked, what it awaits and the slots its readback names.
st, j = req("POST", "/v1/pipelines/confirm", {"input": "I want to file a request"})
cid = j and j.get("session")
st, j = req("POST", "/v1/pipelines/confirm", {"input": "4410032", "session": cid})
check(st == 200 and j["awaiting"] == {"kind": "confirm"} and "account 4410032. Go ahead?" in j["reply"],
      "a confirm stage reads back what it will do with the account", (st, j))
pid = itlib.router_pid(RUN)
os.kill(pid, signal.SIGKILL)
new = itlib.wait_router(RUN, pid, lambda: req("GET", "/v1/models")[0] == 200)
check(new is not None, f"the supervisor restarted the router after kill -9 (pid {pid} -> {new})")
st, j = req("POST", "/v1/pipelines/confirm", {"input": "no, it's 4410033", "session": cid})
check(st == 200 and j["awaiting"] == {"kind": "confirm"} and "account 4410033. Go ahead?" in j["reply"]
      and j["state"]["slots"].get("account") == "4410033",
      "after a kill -9 the awaited confirmation is answered: a correction is read back", (st, j))
st, j = req("POST", "/v1/pipelines/confirm", {"input": "yes", "session": cid})
check(st == 200 and j["reply"] == "filed for 4410033" and j["awaiting"] is None,
      "... and the yes runs the tool with the corrected account", (st, j))
with lock:
    before = attempts.get(kid, 0)
    held.discard(kid)

# ---------------------------------------------------- delivery
end = time.time() + 20
while time.time() < end:
    with lock:
        if all(k in accepted for k in handoffs):
            break
    time.sleep(0.1)
time.sleep(1.5)         # a duplicate sent after the acknowledgement would show up by now
with lock:
    check(set(accepted) == set(handoffs) and all(accepted[k] == handoffs[k] for k in handoffs),
          "every hand-off package reaches the receiver, the same package as the answer's, keyed by its session",
          (sorted(accepted), sorted(handoffs)))
    check(all(attempts.get(k) == 3 for k in handoffs if k != kid),
          "each after two failed attempts, retried with backoff, and not sent again once taken", attempts)
    check(before >= 3 and attempts.get(kid) == before + 1,
          "a package still undelivered at a kill -9 is sent by the next router, once taken never again",
          (before, attempts.get(kid)))
check(all(v.get("session") == k for k, v in accepted.items()), "the package names its session", accepted)
st, j = req("POST", "/v1/pipelines/agent", {"input": "a person please"})
time.sleep(1.5)
with lock:
    check(j["session"] not in attempts, "a pipeline without handoff_url queues nothing", attempts)

sys.exit(check.summary())
