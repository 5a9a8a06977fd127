#!/usr/bin/env python3
"""fleet_http.py URL PID_A RUN_A URL_A PID_B RUN_B URL_B - conversations
through HAProxy (URL) over two boxes that share their sessions in
PostgreSQL (tests/fleet_test.sh starts them; PID_x is box x's supervisor,
RUN_x its runtime directory, URL_x the box itself, past HAProxy).

1. A call that asks for two slots: its three turns alternate between the
   boxes and it completes, twice (the second call's last turn lands on the
   box that asked the first question: that box's suspended run is stale by
   then and must not answer it).
2. One turn sent to both boxes at once (a caller's retry racing its first
   try): one box answers it, the other says 409 session_busy, and the
   session holds the turn once.
3. A longer call on a slow pipeline: one box is killed (-9: its supervisor,
   its router and its workers) while it runs a turn; the caller sends that turn again
   and the other box finishes the call, with every answered turn kept once.
Standard library only (http.client).
"""
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

URL = sys.argv[1]
BOXES = {"a": (int(sys.argv[2]), sys.argv[3]), "b": (int(sys.argv[5]), sys.argv[6])}
DIRECT = {"a": urllib.parse.urlparse(sys.argv[4]), "b": urllib.parse.urlparse(sys.argv[7])}
u = urllib.parse.urlparse(URL)
fails = 0


def check(ok, what, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": %s" % str(detail)[:400]))
    if not ok:
        fails += 1


def req(method, path, body=None, timeout=60, at=None):
    """(status, box, json) through HAProxy, or box `at` directly; status 0
    when the connection broke."""
    where = DIRECT[at] if at else u
    c = http.client.HTTPConnection(where.hostname, where.port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        raw = r.read()
        try:
            j = json.loads(raw)
        except ValueError:
            j = None
        return r.status, r.getheader("X-Box"), j
    except (OSError, http.client.HTTPException) as e:
        return 0, None, {"error": str(e)}
    finally:
        c.close()


def kill_box(name):
    """kill -9 of a whole box, as a power cut would: the supervisor first
    (it would restart the router), then the router and the workers."""
    sup, run = BOXES[name]
    with open(os.path.join(run, "state.json")) as f:
        state = json.load(f)
    pids = [sup, itlib.router_pid(run)] + [w["pid"] for w in state.get("models", {}).values()
                                           if isinstance(w, dict) and w.get("pid")]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def turn(pipe, text, session=None, at=None):
    body = {"input": text}
    if session:
        body["session"] = session
    return req("POST", "/v1/pipelines/" + pipe, body, at=at)


# ------------------------------------------------------------ 1. alternating
for call in (1, 2):
    boxes, replies = [], []
    st, box, j = turn("ask", "I have a question about my bill")
    sid = (j or {}).get("session")
    boxes.append(box)
    replies.append((j or {}).get("reply"))
    for text in ("4410032", "Ann"):
        st2, box, j = turn("ask", text, sid)
        check(st2 == 200, "call %d: turn %r answered through HAProxy" % (call, text), (st2, j))
        boxes.append(box)
        replies.append((j or {}).get("reply"))
    check(st == 200 and sid and replies == ["What is your account number?", "And your name, please?",
                                            "account 4410032 for Ann"],
          "call %d: asked for the account, then the name, then answered with both" % call, replies)
    check(all(boxes[i] != boxes[i + 1] for i in range(len(boxes) - 1)) and set(boxes) == {"a", "b"},
          "call %d: its turns alternated between the boxes (%s)" % (call, " ".join(map(str, boxes))), boxes)
    check(j and j.get("awaiting") is None and j["state"]["slots"] == {"account": "4410032", "name": "Ann"}
          and j["state"]["turn"] == 3, "call %d: the state holds both slots at turn 3" % call, j)
    st, box, g = req("GET", "/v1/sessions/%s" % sid)
    check(st == 200 and [t["caller"] for t in g["transcript"]] == ["I have a question about my bill", "4410032", "Ann"],
          "call %d: the transcript, read from box %s, has the three turns" % (call, box), g)

# ------------------------------------------------------------ 2. one turn on both boxes at once
st, _, j = turn("slow", "race turn 1")
rsid = (j or {}).get("session")
out = {}
racers = [threading.Thread(target=lambda b=b: out.update({b: turn("slow", "race turn 2", rsid, at=b)})) for b in "ab"]
for t in racers:
    t.start()
for t in racers:
    t.join(60)
codes = sorted((out[b][0], ((out[b][2] or {}).get("error") or {}).get("code")) for b in "ab")
check(st == 200 and codes == [(200, None), (409, "session_busy")],
      "the same turn on both boxes at once: one answers it, the other 409 session_busy", codes)
st, _, g = req("GET", "/v1/sessions/%s" % rsid)
check(st == 200 and [t["caller"] for t in g["transcript"]] == ["race turn 1", "race turn 2"],
      "and the session holds that turn once", g)

# ------------------------------------------------------------ 3. one box dies mid-call
st, last_box, j = turn("slow", "turn 1")
sid = (j or {}).get("session")
check(st == 200 and sid, "slow call: first turn answered by box %s" % last_box, (st, j))
answered = {1: "turn 1"} if st == 200 else {}
n, killed, died_box = 1, None, None
while sid and n < 8:
    n += 1
    text = "turn %d" % n
    if n == 4:                      # round-robin: this turn goes to the other box; kill it while it runs
        died_box = "b" if last_box == "a" else "a"
        out = {}
        t = threading.Thread(target=lambda: out.update(r=turn("slow", text, sid)))
        t.start()
        time.sleep(0.7)             # the box is inside the turn's 1.5 s tool
        kill_box(died_box)
        killed = time.time()
        t.join(60)
        st, box, j = out["r"]
        check(st != 200 or box != died_box, "the turn in flight on killed box %s was not answered by it" % died_box,
              (st, box, j))
        if st != 200:               # unanswered: the caller says it again
            st, box, j = turn("slow", text, sid)
    else:
        st, box, j = turn("slow", text, sid)
    check(st == 200 and j["reply"] == "heard " + text and j["state"]["turn"] == len(answered) + 1,
          "slow call: %r answered by box %s as turn %d" % (text, box, len(answered) + 1), (st, box, j))
    if st != 200:
        break
    answered[j["state"]["turn"]] = text
    last_box = box
    if killed:
        check(box != died_box, "after the kill, box %s answers, not the dead %s" % (box, died_box), box)

st, box, g = req("GET", "/v1/sessions/%s" % sid)
callers = [t["caller"] for t in (g or {}).get("transcript", [])]
check(st == 200 and callers == ["turn %d" % i for i in range(1, 9)] and len(answered) == 8,
      "slow call finished on box %s: 8 turns, each answered turn kept once and in order" % box, callers)

print("fleet_http: %s" % ("FAIL" if fails else "ok"))
sys.exit(1 if fails else 0)
