#!/usr/bin/env python3
"""erase_http.py URL RUNDIR SB CONFIG LOG - `switchboard privacy erase`
against a real runtime (tests/it_erase.sh starts it). Prints one line per
check; exit 1 on any failure."""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

URL, RUN, SB, CONFIG, LOG = sys.argv[1:6]
ADMIN, OPS, APP = os.environ["SB_ERASE_KEY"], os.environ["SB_OPS_KEY"], "app-key-0123456789"
fails = 0


def check(cond, what, detail=""):
    global fails
    print(("ok   " if cond else "FAIL ") + what + ("" if cond else ": " + str(detail)[:400]))
    if not cond:
        fails += 1


def req(method, path, body=None, key=APP, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(URL + path, data=data, method=method)
    r.add_header("Authorization", "Bearer " + key)
    if data is not None:
        r.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        r.add_header(k, v)
    try:
        with urllib.request.urlopen(r, timeout=60) as resp:
            raw = resp.read()
            return resp.status, raw.decode("utf-8", "replace"), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace"), dict(e.headers)


def call(text, call_id=None, session=None, pipe="desk"):
    body = {"input": text}
    if session:
        body["session"] = session
    st, out, h = req("POST", "/v1/pipelines/" + pipe, body, headers={"X-Call-Id": call_id} if call_id else None)
    check(st == 200, "call %s %s" % (pipe, call_id or ""), (st, out))
    return json.loads(out) if st == 200 else {}


def files_holding(needle):
    """Files under the runtime dir that hold needle (as UTF-8 or a JSON \\u escape)."""
    return itlib.files_holding(RUN, needle)


def served_holding(needle):
    """What the router serves that holds needle: the traces and the export."""
    where = []
    for path in ("/v1/calls?limit=1000", "/v1/feedback.tsv"):
        st, out, _ = req("GET", path, key=ADMIN)
        if needle in out or json.dumps(needle)[1:-1] in out:
            where.append(path)
    return where


def erase(flag, arg, env_key=ADMIN):
    env = dict(os.environ, SB_TEST_ADMIN=env_key)
    p = subprocess.run([SB, "privacy", "erase", flag, arg, "-c", CONFIG, "--api-key-env", "SB_TEST_ADMIN"],
                       capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def mark(call_id, intent="billing"):
    st, out, _ = req("POST", "/v1/calls/%s/feedback" % call_id, {"intent": intent}, key=OPS)
    check(st == 200, "feedback mark on " + call_id, (st, out))


# ---- one number, said three ways, in every store
V1 = ["13800138000", "138 0013 8000", "幺三八零零幺三八零零零"]
call("my mobile is 13800138000, the bill is wrong", "v1-digits")
call("call me back on 138 0013 8000 please", "v1-spaced")
call("我的手机号是幺三八零零幺三八零零零", "v1-numerals")
call("another caller: 13912345678", "other")
j = call("hello, my number is 138 0013 8000", pipe="conv")
sid1 = j.get("session")
call("and again 幺三八零零幺三八零零零", session=sid1, pipe="conv")
mark("v1-digits")
mark("v1-numerals")
mark("other")
before = {v: files_holding(v) for v in V1}
check(all("otel.jsonl" in f and "cache.sqlite-wal" in f for f in before.values()),
      "before: every rendering is on disk (OTel export, cache WAL)", before)
check(all(served_holding(v) for v in V1[:1]), "before: the traces and export serve it")

rc, out, err = erase("--value", "13800138000", env_key=OPS)
check(rc == 1 and "403" in err, "a console-only key may not erase (403)", (rc, err))
rc, out, err = erase("--value", "+86 138-0013-8000")
check(rc == 0, "erase --value (a fourth rendering)", (rc, out, err))
counts = json.loads(out)["erased"] if rc == 0 else {}
keys = json.loads(out).get("cache_keys", []) if rc == 0 else []
check(len(keys) == counts.get("cache_entries") and all(len(k) == 64 for k in keys),
      "the reply names the erased cache entries' keys (for the cloud's copies)", keys)
check(counts.get("sessions") == 1 and counts.get("traces", 0) >= 4 and counts.get("cache_entries", 0) >= 3
      and counts.get("feedback") == 2 and counts.get("otel_lines", 0) >= 4, "every store had the value", counts)
for v in V1:
    check(not files_holding(v), "after erase --value: no file holds '%s'" % v, files_holding(v))
    check(not served_holding(v), "after erase --value: nothing served holds '%s'" % v, served_holding(v))
check(files_holding("13912345678"), "another caller's number is kept", files_holding("13912345678"))
st, _, _ = req("GET", "/v1/sessions/" + (sid1 or "x"))
check(st == 404, "the session is gone", st)

# ---- a session by its id: its transcript, and its turns' traces
j = call("account holder, mobile 13700001111", pipe="conv")
sid2 = j.get("session")
call("yes 13700001111 is right", session=sid2, pipe="conv")
check(files_holding("13700001111"), "before: the session's value is on disk")
rc, out, err = erase("--session", sid2 or "x")
check(rc == 0 and json.loads(out)["erased"]["sessions"] == 1, "erase --session", (rc, out, err))
check(not files_holding("13700001111") and not served_holding("13700001111"),
      "after erase --session: nothing holds its words", (files_holding("13700001111"), served_holding("13700001111")))

# ---- a call by its id: its trace, its cache entry, its feedback mark
call("card 6222020200112233445 was charged twice", "erase-me")
mark("erase-me")
check(files_holding("6222020200112233445"), "before: the call's words are on disk")
rc, out, err = erase("--call", "erase-me")
got = json.loads(out)["erased"] if rc == 0 else {}
check(rc == 0 and got.get("traces") == 1 and got.get("cache_entries") == 1 and got.get("feedback") == 1
      and got.get("otel_lines") == 1,
      "erase --call: its trace, cache entry and mark", (rc, out, err))
check(not files_holding("6222020200112233445") and not served_holding("6222020200112233445"),
      "after erase --call: nothing holds its words")
st, _, _ = req("GET", "/v1/calls/erase-me", key=ADMIN)
check(st == 404, "GET /v1/calls/erase-me: 404", st)

# ---- who may see what, and the audit log
AUDIT = os.path.join(RUN, "audit.jsonl")


def audit_lines():
    try:
        return [json.loads(line) for line in open(AUDIT, encoding="utf-8")]
    except FileNotFoundError:
        return []


call("my e-mail is li.wei@example.com", "seen")
j = call("open a session for 13566667777", pipe="conv")
sid3 = j.get("session")
n0 = len(audit_lines())
st, out, _ = req("GET", "/v1/feedback.tsv", key=OPS)
check(st == 403 and "admin" in out, "a console key may not read the feedback export (403)", (st, out))
st, out, _ = req("GET", "/v1/calls/seen", key=OPS)
check(st == 403, "with show_caller_text, a console key may not read a trace (403)", (st, out))
check(len(audit_lines()) == n0, "a refused read is not a read: no audit line")
st, out, _ = req("GET", "/v1/feedback.tsv", key=ADMIN)
check(st == 200, "an admin key reads the feedback export", (st, out))
lines = audit_lines()
check(len(lines) == n0 + 1 and lines[-1].get("key") == "dpo" and lines[-1].get("path") == "/v1/feedback.tsv"
      and lines[-1].get("method") == "GET" and lines[-1].get("at", "").endswith("Z"),
      "one audit line: the admin key's name, the route, the time", lines[-1:])
st, out, _ = req("GET", "/v1/calls/seen", key=ADMIN)
check(st == 200 and "li.wei@example.com" in out, "an admin key reads a trace with the caller's words", (st, out[:200]))
check(audit_lines()[-1].get("path") == "/v1/calls/seen", "the trace read is audited with the call's id", audit_lines()[-1:])
st, out, _ = req("GET", "/v1/sessions/" + (sid3 or "x"), key=ADMIN)
check(st == 200 and "13566667777" in out, "an admin key reads another key's session", (st, out[:200]))
check(audit_lines()[-1].get("path") == "/v1/sessions/" + str(sid3), "the session read is audited", audit_lines()[-1:])
st, out, _ = req("GET", "/v1/sessions/" + (sid3 or "x"), key=APP)
check(st == 200, "its owner reads it too", (st, out[:200]))
st, out, _ = req("DELETE", "/v1/sessions/" + (sid3 or "x"), key=ADMIN)
check(st == 404, "an admin key does not DELETE another key's session (erase does)", (st, out[:200]))
audit_text = open(AUDIT, encoding="utf-8").read()
for v in ("li.wei@example.com", "13566667777", "13800138000", "+86 138-0013-8000"):
    check(v not in audit_text, "the audit log does not hold '%s'" % v)
check(any(a.get("path") == "/v1/privacy/erase" and a.get("key") == "dpo" for a in audit_lines()),
      "every erase is in the audit log (its value is not)")
check(os.stat(AUDIT).st_mode & 0o777 == 0o600, "the audit log is 0600", oct(os.stat(AUDIT).st_mode))

# ---- bad requests and the log
rc, out, err = erase("--value", "12345")
check(rc == 1 and "400" in err, "a value too short to erase safely is refused", (rc, err))
log = open(LOG, encoding="utf-8", errors="replace").read()
check("privacy erase by key 'dpo': value" in log, "the erase is logged with the key's name")
for v in V1 + ["+86 138-0013-8000", "13700001111", "6222020200112233445"]:
    check(v not in log, "the log does not hold '%s'" % v)
print("erase_http: %d failed" % fails)
sys.exit(1 if fails else 0)
