#!/usr/bin/env python3
"""erase_cloud.py SB TMP INTERVAL URL_A URL_B PGRUN PGBIN - an erase at
edge A carried through the cloud to edge B (tests/it_erase_cloud.sh starts
the cloud, its PostgreSQL and both edges). One line per check; exit 1 on
any failure."""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

SB, TMP, INTERVAL, URL = sys.argv[1], sys.argv[2], int(sys.argv[3]), {"a": sys.argv[4], "b": sys.argv[5]}
PGRUN, PGBIN = sys.argv[6].split(), sys.argv[7]
ADMIN, APP = os.environ["SB_ERASE_KEY"], "app-key-0123456789"
TOKEN = "admin-tok-42"
RUN = {e: os.path.join(TMP, "run-" + e) for e in "ab"}
LOG = {e: os.path.join(TMP, e + ".log") for e in "ab"}
fails = 0


def check(cond, what, detail=""):
    global fails
    print(("ok   " if cond else "FAIL ") + what + ("" if cond else ": " + str(detail)[:400]), flush=True)
    if not cond:
        fails += 1
    return cond


def req(edge, method, path, body=None, key=APP, headers=None):
    h = {"Authorization": "Bearer " + key, "Content-Type": "application/json", **(headers or {})}
    st, _, out = itlib.request(URL[edge] + path, method, body, h, 60)
    return st, out.decode("utf-8", "replace")


def call(edge, text, call_id=None, session=None, pipe="desk"):
    body = {"input": text}
    if session:
        body["session"] = session
    st, out = req(edge, "POST", "/v1/pipelines/" + pipe, body, headers={"X-Call-Id": call_id} if call_id else None)
    check(st == 200, "edge %s: call %s %s" % (edge, pipe, call_id or ""), (st, out))
    return json.loads(out) if st == 200 else {}


def mark(edge, call_id):
    st, out = req(edge, "POST", "/v1/calls/%s/feedback" % call_id, {"intent": "billing"}, key=ADMIN)
    check(st == 200, "edge %s: feedback mark on %s" % (edge, call_id), (st, out))


def pg_dump():
    return subprocess.run(PGRUN + [PGBIN + "/pg_dump", "-h", TMP + "/pg", "-U", "postgres", "postgres"],
                          capture_output=True, timeout=60, check=True).stdout


def holding(edge, needle):
    """Where edge's files, what it serves, and the cloud's database hold needle."""
    where = ["%s:%s" % (edge, f) for f in itlib.files_holding(RUN[edge], needle)]
    forms = (needle, json.dumps(needle)[1:-1])
    for path in ("/v1/calls?limit=1000", "/v1/feedback.tsv"):
        st, out = req(edge, "GET", path, key=ADMIN)
        if any(f in out for f in forms):
            where.append("%s:GET %s" % (edge, path))
    if any(f.encode() in pg_dump() for f in forms):
        where.append("cloud:pg_dump")
    return where


def log_lines(edge, needle):
    try:
        return sum(needle in line for line in open(LOG[edge], encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        return 0


def wait_for(cond, secs):
    end = time.time() + secs
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.25)
    return cond()


def erase(flag, arg, *extra, token=TOKEN):
    env = dict(os.environ, SB_TEST_ADMIN=ADMIN)
    env.pop("SB_ADMIN_TOKEN", None)
    if token is not None:
        env["SB_ADMIN_TOKEN"] = token
    p = subprocess.run([SB, "privacy", "erase", flag, arg, "-c", os.path.join(TMP, "a.yaml"),
                        "--api-key-env", "SB_TEST_ADMIN", *extra], capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def erasures_synced(edge):
    """Sync rounds of edge's that took at least one erasure. The loop erases
    the stores it owns first (its "privacy erase from the cloud" line); the
    sync thread then applies the reply's cache deletions and vacuums the cache,
    and only then logs the round."""
    try:
        text = open(LOG[edge], encoding="utf-8", errors="replace").read()
    except FileNotFoundError:
        return 0
    return len(re.findall(r"cache sync with .* [1-9][0-9]* erasures in", text))


def synced(edge, n=1):
    """Wait until edge has finished n more syncs."""
    base = log_lines(edge, "cache sync with")
    return wait_for(lambda: log_lines(edge, "cache sync with") >= base + n, 3 * INTERVAL + 10)


# ---- one number at both edges, in every store
V = ["13800138000", "138 0013 8000", "幺三八零零幺三八零零零"]
call("a", "my mobile is 13800138000, the bill is wrong", "a-digits")
call("a", "call me back on 138 0013 8000 please", "a-spaced")
call("a", "我的手机号是幺三八零零幺三八零零零", "a-numerals")
call("b", "this is edge b: 13800138000 again, the meter too", "b-digits")
call("b", "another caller: 13912345678", "b-other")
j = call("b", "hello, my number is 138 0013 8000", pipe="conv")
call("b", "and again 幺三八零零幺三八零零零", session=j.get("session"), pipe="conv")
mark("b", "b-digits")
# A uploads; B then receives A's entries (pushed at threshold 0).
check(synced("a") and synced("b"), "both edges synced")
check(wait_for(lambda: itlib.files_holding(RUN["b"], "the bill is wrong"), 3 * INTERVAL + 10),
      "edge a's answer reached edge b's cache through the cloud")
check(wait_for(lambda: b"the meter too" in pg_dump(), 3 * INTERVAL + 10), "edge b's entry reached the cloud")
for v in V:
    w = holding("b", v)
    check(any(x.startswith("b:") for x in w) and "cloud:pg_dump" in w, "before: edge b and the cloud hold '%s'" % v, w)

# ---- refusals: nothing is sent without the cloud's admin token
rc, out, err = erase("--value", "13700009999", token=None)
check(rc == 3 and "SB_ADMIN_TOKEN" in err, "no admin token: erased here, exit 3, says what to set", (rc, err))
rc, out, err = erase("--value", "13700009999", token="wrong")
check(rc == 3 and "answered 401" in err, "a wrong admin token: the cloud refuses (401), exit 3", (rc, err))
rc, out, err = erase("--value", "13700009999", "--local-only", token=None)
check(rc == 0 and '"cloud"' not in out, "--local-only: erased here only", (rc, out, err))
rc, out, err = erase("--value", "Zhang Wei Street")
check(rc == 3 and "neither a number nor an identifier" in err, "a name is not sent as a hash no one can match", (rc, err))

# ---- erase by value at A: gone at B within one sync interval
base_b = erasures_synced("b")
rc, out, err = erase("--value", "+86 138-0013-8000")
got = json.loads(out) if out.strip() else {}
check(rc == 0 and got.get("cloud", {}).get("status") == 200, "erase --value at edge a, sent to the cloud", (rc, out, err))
t0 = time.time()
# One interval until B's next sync, the 1 s tick that hands the erasure to
# its loop, and the erase itself.
check(wait_for(lambda: log_lines("b", "privacy erase from the cloud: value"), INTERVAL + 2),
      "edge b applied the erase within one sync interval (%d s) and its 1 s hand-off" % INTERVAL,
      "%.1f s" % (time.time() - t0))
check(wait_for(lambda: erasures_synced("b") > base_b, 5), "edge b finished that sync round")
print("     edge b erased %.1f s after the cloud took the erase" % (time.time() - t0))
for v in V:
    check(not holding("b", v), "after: nothing at edge b or in the cloud holds '%s'" % v, holding("b", v))
    check(not holding("a", v), "after: nothing at edge a holds '%s'" % v, holding("a", v))
check(itlib.files_holding(RUN["b"], "13912345678"), "edge b keeps another caller's number")
st, _ = req("b", "GET", "/v1/sessions/" + str(j.get("session")))
check(st == 404, "edge b's session holding the number is gone", st)

# ---- a call erased at A: its cache entry and same-id trace gone at B
call("a", "card 6222020200112233445 was charged twice", "erase-me")
check(synced("a") and synced("b"), "both edges synced again")
check(wait_for(lambda: itlib.files_holding(RUN["b"], "charged twice"), 3 * INTERVAL + 10), "the call's answer reached edge b")
call("b", "retry of the same call id at b", "erase-me")
base_b = erasures_synced("b")
rc, out, err = erase("--call", "erase-me")
check(rc == 0 and json.loads(out).get("cloud", {}).get("status") == 200, "erase --call at edge a", (rc, out, err))
check(wait_for(lambda: log_lines("b", "privacy erase from the cloud: call"), INTERVAL + 5), "edge b applied the call's erase")
# The entry itself goes with the cloud's deletions, applied after the loop's erase.
check(wait_for(lambda: erasures_synced("b") > base_b, 5), "edge b finished that sync round")
check(not holding("b", "6222020200112233445"), "after: the call's words are gone at edge b and in the cloud",
      holding("b", "6222020200112233445"))
st, _ = req("b", "GET", "/v1/calls/erase-me", key=ADMIN)
check(st == 404, "edge b's trace with the erased call id is gone", st)

# ---- a session erased at A reaches B
j = call("a", "account holder, mobile 13700001111", pipe="conv")
rc, out, err = erase("--session", j.get("session") or "x")
check(rc == 0 and json.loads(out).get("cloud", {}).get("status") == 200, "erase --session at edge a", (rc, out, err))
check(wait_for(lambda: log_lines("b", "privacy erase from the cloud: session"), INTERVAL + 5), "edge b applied the session's erase")

# ---- the erasures' hashes are forgotten once both edges synced past them
def erasure_rows():
    dump = pg_dump().decode("utf-8", "replace")
    block = dump.split("COPY public.sb_erasures", 1)[1].split("\\.", 1)[0] if "COPY public.sb_erasures" in dump else ""
    return len(block.strip().splitlines()) - 1 if block else -1


check(synced("a", 2) and synced("b", 2) and wait_for(lambda: erasure_rows() == 0, 3 * INTERVAL),
      "once both edges synced past them, the cloud keeps no erasure", erasure_rows())

# ---- the logs: the value never, nor its hash
dump = pg_dump()
check(b"sb_erasures" in dump, "the cloud's dump has the erasures table")
logs = {e: open(LOG[e], encoding="utf-8", errors="replace").read() for e in "ab"}
logs["cloud"] = open(os.path.join(TMP, "cloud.log"), encoding="utf-8", errors="replace").read()
check("erase (value)" in logs["cloud"], "the cloud logs the erase by kind")
for name, text in logs.items():
    for v in V + ["+86 138-0013-8000", "6222020200112233445"]:
        check(v not in text, "the %s log does not hold '%s'" % (name, v))
    check("admin-tok-42" not in text, "the %s log does not hold the admin token" % name)
print("erase_cloud: %d failed" % fails)
sys.exit(1 if fails else 0)
