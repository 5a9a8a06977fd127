#!/usr/bin/env python3
"""sessions_rss.py URL RUNDIR N [THREADS] - what N idle sessions of 4 turns
cost the router in memory (tests/sessions_rss.sh starts the runtime).

Each session is a call on pipeline `mem` whose stage asks four slots: the
first turn runs the model and asks the first, the next three answer and are
asked the next - so after its 4 turns every session is idle and awaiting,
the router holding its suspended run (the most a session keeps in memory).
Prints the router's VmRSS (from /proc) after 200 warm-up sessions and
after the N, and the difference, and fails past 64 MB. Then the oldest and
the newest session each answer their last question and must end with the
pipeline's answer: the router keeps only its latest suspended runs, so the
oldest goes on from its stored state. Standard library only.
"""
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

URL, RUN, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
THREADS = int(sys.argv[4]) if len(sys.argv) > 4 else 4
u = urllib.parse.urlparse(URL)


def turn(text, sid=None):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    body = {"input": text}
    if sid:
        body["session"] = sid
    c.request("POST", "/v1/pipelines/mem", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    j = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError("%d %s" % (r.status, j))
    return j


def call(n):
    j = turn("hello, caller %d here" % n)
    sid = j["session"]
    for k in range(3):
        j = turn("answer %d of caller %d" % (k + 1, n), sid)
    assert j["state"]["turn"] == 4 and j["awaiting"], j
    return sid


def rss_kb():
    with open("/proc/%d/status" % itlib.router_pid(RUN)) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def run(count, base):
    todo, lock, errors = list(range(base, base + count)), threading.Lock(), []
    sids = {}

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                n = todo.pop()
            try:
                sids[n] = call(n)
            except Exception as e:  # noqa: BLE001 - counted and shown
                errors.append(str(e))
    ts = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors, [sids[n] for n in sorted(sids)]


run(200, 0)                         # warm-up: the allocator's arenas, SQLite's cache
time.sleep(1)
before = rss_kb()
t0 = time.time()
errors, sids = run(N, 1000)
time.sleep(1)
after = rss_kb()
print("sessions_rss: %d sessions x 4 turns in %.0f s, %d errors%s" %
      (N, time.time() - t0, len(errors), (": " + errors[0]) if errors else ""))
print("sessions_rss: router VmRSS %.1f MB after warm-up, %.1f MB after; +%.1f MB (%.0f bytes a session)" %
      (before / 1024, after / 1024, (after - before) / 1024, (after - before) * 1024 / max(N, 1)))
ok = not errors and after - before <= 64 * 1024
for which, sid in (("oldest", sids[0]), ("newest", sids[-1])):
    j = turn("billing", sid)
    fine = j["reply"] == "done" and j["awaiting"] is None and j["state"]["turn"] == 5
    print("sessions_rss: the %s session's 5th turn %s" % (which, "ends the call" if fine else "FAILS: %s" % j))
    ok = ok and fine
sys.exit(0 if ok else 1)
