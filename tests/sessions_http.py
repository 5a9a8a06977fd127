#!/usr/bin/env python3
"""sessions_http.py URL RUNDIR KEYS_FILE - named API keys and conversations
against a real runtime (tests/it_sessions.sh starts it).

Keys: app and other hold the client role, ops only console, and the
legacy runtime.api_key_env key is "default" with every role. Pipelines:
conv keeps sessions (max_turns 4), brief expires after 2 idle seconds,
plain keeps none. Standard library only: http.client against the gateway,
the supervisor's state.json for the router's pid (kill -9, SIGHUP).
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

URL, RUN, KEYS_FILE = sys.argv[1:4]
u = urllib.parse.urlparse(URL)
KEYS = {"app": "app-key-0123456789", "other": "other-key-0123456789", "ops": "ops-key-0123456789"}
fails = 0


def check(ok, what, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {str(detail)[:400]}"))
    if not ok:
        fails += 1


def req(method, path, body=None, key="app", headers=None, timeout=60):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    h = dict(headers or {})
    if key:
        h["Authorization"] = "Bearer " + KEYS.get(key, key)
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        j = json.loads(raw)
    except ValueError:
        j = None
    return r.status, {k.lower(): v for k, v in r.getheaders()}, j


def code(j):
    return (j or {}).get("error", {}).get("code")


def turn(text, session=None, key="app", pipe="conv"):
    body = {"input": text}
    if session is not None:
        body["session"] = session
    return req("POST", "/v1/pipelines/" + pipe, body, key=key)


def router_pid():
    return itlib.router_pid(RUN)


def wait_router(old_pid, secs=60):
    """The supervisor's new router answering; its pid."""
    return itlib.wait_router(RUN, old_pid, lambda: req("GET", "/v1/models", timeout=2)[0] == 200, secs)


# ------------------------------------------------------------------ keys and roles
st, _, j = req("POST", "/v1/pipelines/conv", {"input": "hi"}, key=None)
check(st == 401 and code(j) == "invalid_api_key", "no key -> 401 invalid_api_key", (st, j))
st, _, j = req("POST", "/v1/pipelines/conv", {"input": "hi"}, key="not-a-key")
check(st == 401 and code(j) == "invalid_api_key", "unknown key -> 401", (st, j))
st, _, j = req("POST", "/v1/pipelines/conv", {"input": "hi"}, key="ops")
check(st == 403 and code(j) == "insufficient_role" and "client" in j["error"]["message"],
      "console-only key on a client route -> 403 insufficient_role", (st, j))
st, _, j = req("GET", "/v1/calls", key="ops")
check(st == 200, "console key reads the traces", (st, j))
st, _, j = req("GET", "/v1/calls", key="app")
check(st == 403 and code(j) == "insufficient_role", "client key on a console route -> 403", (st, j))
st, _, j = req("GET", "/v1/calls", key=os.environ["SB_TEST_API_KEY"])
check(st == 200, "the single legacy key keeps the console role", (st, j))

# ------------------------------------------------------------------ a conversation
st, h, j = turn("hello one")
sid = (j or {}).get("session")
check(st == 200 and isinstance(sid, str) and len(sid) == 32 and all(c in "0123456789abcdef" for c in sid),
      "a call without a session opens one: 128-bit hex id", (st, j))
check(j and h.get("x-session-id") == sid, "the id is also in X-Session-Id", h)
check(j and j["reply"] == j["output"] and "hello one" in j["reply"], "reply equals output", j)
check(j and j["state"]["turn"] == 1 and j["state"]["intent"] == j["intent"] and j["state"]["slots"] == {}
      and j["awaiting"] is None and j["handoff"] is None and j["done"] is False and isinstance(j["fallback"], bool),
      "state, awaiting, fallback, handoff, done on turn 1", j)
check("x-cache" not in h, "a session's turn is not looked up in the cache", h)
st, h, j = turn("hello one", sid)
check(st == 200 and j["session"] == sid and j["state"]["turn"] == 2, "the same words continue: turn 2, not a cache hit", (st, j))
check("x-cache" not in h, "a session's repeated turn is not a cache hit", h)

st, _, g = req("GET", "/v1/sessions/" + sid)
check(st == 200 and g["turns"] == 2 and [t["caller"] for t in g["transcript"]] == ["hello one", "hello one"]
      and g["state"]["turn"] == 2 and g["pipeline"] == "conv", "GET /v1/sessions/ID: transcript and state", (st, g))

# ------------------------------------------------------------------ isolation
st, _, j = req("GET", "/v1/sessions/" + sid, key="other")
check(st == 404 and code(j) == "session_not_found", "another key cannot read it (404)", (st, j))
st, _, j = turn("let me in", sid, key="other")
check(st == 404 and code(j) == "session_not_found", "another key cannot continue it (404)", (st, j))
st, _, j = req("DELETE", "/v1/sessions/" + sid, key="other")
check(st == 404, "another key cannot end it (404)", (st, j))
st, _, j = turn("x", "not-a-session-id")
check(st == 404 and code(j) == "session_not_found", "a malformed id is a 404", (st, j))
st, _, j = turn("x", sid, pipe="plain")
check(st == 400 and "conversation" in j["error"]["message"], "a session on a pipeline without conversation: 400", (st, j))
st, _, j = req("POST", "/v1/pipelines/conv", {"input": "x", "session": 5})
check(st == 400 and "'session'" in j["error"]["message"], "a non-string session: 400", (st, j))

# ------------------------------------------------------------------ stateless and cached as before
st, h1, j = turn("plain words", pipe="plain")
st2, h2, j2 = turn("plain words", pipe="plain")
check(st == 200 and j["session"] is None and j["done"] is False and j["state"]["turn"] == 1,
      "a pipeline without conversation: session null", (st, j))
check(h2.get("x-cache") == "hit" and j2["reply"] == j["reply"], "and it is still cached", (h1, h2))

# ------------------------------------------------------------------ the OpenAI door
st, h, j = req("POST", "/v1/chat/completions",
                {"model": "pipeline:conv", "messages": [{"role": "user", "content": "openai turn"}]})
osid = h.get("x-session-id", "")
check(st == 200 and len(osid) == 32 and "openai turn" in j["choices"][0]["message"]["content"],
      "OpenAI door: a new session's id in X-Session-Id", (st, h, j))
st, h, j = req("POST", "/v1/chat/completions",
                {"model": "pipeline:conv", "messages": [{"role": "user", "content": "second"}]},
                headers={"X-Session-Id": osid})
st, _, g = req("GET", "/v1/sessions/" + osid)
check(st == 200 and g["turns"] == 2 and g["transcript"][1]["caller"] == "second",
      "OpenAI door: X-Session-Id continues it", (st, g))
c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
c.request("POST", "/v1/chat/completions", body=json.dumps(
    {"model": "pipeline:conv", "stream": True, "messages": [{"role": "user", "content": "streamed"}]}),
    headers={"Authorization": "Bearer " + KEYS["app"], "Content-Type": "application/json", "X-Session-Id": osid})
r = c.getresponse()
sse = r.read().decode()
c.close()
chunks = [json.loads(line[6:]) for line in sse.split("\n") if line.startswith("data: {")]
text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch.get("choices"))
check(r.status == 200 and r.getheader("X-Session-Id") == osid and "streamed" in text and sse.rstrip().endswith("[DONE]"),
      "a session's turn asked as SSE comes whole, after it is stored", (r.status, sse[:300]))
st, _, j = req("POST", "/v1/chat/completions",
                {"model": "pipeline:conv", "messages": [{"role": "user", "content": "x"}]},
                headers={"X-Session-Id": osid}, key="other")
check(st == 404, "OpenAI door: another key's session is a 404", (st, j))

# ------------------------------------------------------------------ slots asked for
# The random-weight fixture extracts nothing, so every slot is asked for.
st, _, j = turn("I want to check my bill", pipe="ask")
asid = (j or {}).get("session")
check(st == 200 and j["reply"] == "What is your account number?" and j["output"] == j["reply"]
      and j["awaiting"] == {"kind": "slot", "slot": "account"} and j["done"] is False,
      "an empty required slot is asked for, in the caller's language", (st, j))
st, _, j = turn("  4410032 ", asid, pipe="ask")
check(st == 200 and j["state"]["slots"].get("account") == "4410032" and j["reply"] == "And your name, please?"
      and j["awaiting"] == {"kind": "slot", "slot": "name"} and j["state"]["turn"] == 2,
      "the next turn fills it; the next empty slot is asked", (st, j))
st, _, j = turn("我要查账单", pipe="ask")
check(st == 200 and j["reply"] == "请问您的账号是多少？", "a Chinese caller is asked in Chinese", (st, j))

# ------------------------------------------------------------------ kill -9 mid-conversation
pid = router_pid()
os.kill(pid, signal.SIGKILL)
new = wait_router(pid)
check(new is not None, f"the supervisor restarted the router after kill -9 (pid {pid} -> {new})")
st, _, j = turn("after the crash", sid)
check(st == 200 and j["session"] == sid and j["state"]["turn"] == 3,
      "the next turn continues the session: turn 3", (st, j))
st, _, g = req("GET", "/v1/sessions/" + sid)
check(st == 200 and [t["caller"] for t in g["transcript"]] == ["hello one", "hello one", "after the crash"]
      and all(t["reply"] for t in g["transcript"]), "no answered turn was lost", g)
# The suspended run died with the router; the session knows which stage asked.
st, _, j = turn("Ann", asid, pipe="ask")
check(st == 200 and j["reply"] == "account 4410032 for Ann" and j["awaiting"] is None
      and j["state"]["slots"] == {"account": "4410032", "name": "Ann"} and j["state"]["turn"] == 3,
      "an awaited slot is answered after the restart: the run starts at the stage that asked", (st, j))
st, _, g = req("GET", "/v1/sessions/" + asid)
check(st == 200 and [t["reply"] for t in g["transcript"]] ==
      ["What is your account number?", "And your name, please?", "account 4410032 for Ann"]
      and g["awaiting"] is None and g["state"]["slots"]["name"] == "Ann", "its transcript holds the questions", g)

# ------------------------------------------------------------------ kill -9 under load
# 100 callers keep talking while the router is killed: every turn that was
# answered (a 200 reached the caller) must be in its session afterwards.
answered, stop = {}, threading.Event()


CALLERS = 100
started = threading.Semaphore(0)


def caller(n):
    for _ in range(50):             # a first turn refused while 100 start at once (503) is sent again
        st, _, j = turn("caller %d turn 1" % n, pipe="many")
        if st != 503:
            break
        time.sleep(0.2)
    started.release()
    if st != 200:
        return
    sid_n, k = j["session"], 1
    answered[sid_n] = [1]
    while not stop.is_set():
        k += 1
        try:
            st, _, j = turn("caller %d turn %d" % (n, k), sid_n, pipe="many")
        except (OSError, http.client.HTTPException):
            break           # the router died under this turn: unanswered, so it may be lost
        if st != 200:
            break
        answered[sid_n].append(j["state"]["turn"])


threads = [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
for t in threads:
    t.start()
for _ in range(CALLERS):            # every call is under way, most with a turn in flight
    started.acquire(timeout=120)
time.sleep(0.5)
pid = router_pid()
os.kill(pid, signal.SIGKILL)
stop.set()
for t in threads:
    t.join(60)
new = wait_router(pid)
n_turns = sum(len(v) for v in answered.values())
lost = []
for s_id, turns in answered.items():
    st, _, g = req("GET", "/v1/sessions/" + s_id)
    have = {t["turn"] for t in (g or {}).get("transcript", [])} if st == 200 else set()
    lost += [(s_id, t) for t in turns if t not in have]
check(new is not None and len(answered) == CALLERS and n_turns > CALLERS and not lost,
      "kill -9 with %d sessions mid-call: none of %d answered turns lost" % (len(answered), n_turns), lost[:5])
st, _, j = turn("after", next(iter(answered)), pipe="many")
check(st == 200 and j["state"]["turn"] >= 2, "and their next turns continue", (st, j))

# ------------------------------------------------------------------ max_turns
st, _, j = turn("fourth", sid)
h = (j or {}).get("handoff") or {}
check(st == 200 and j["done"] is True and h.get("reason") == "max_turns" and j["state"]["turn"] == 4
      and h.get("intent") == j["intent"] and isinstance(h.get("confidence"), float)
      and [t["turn"] for t in h.get("transcript", [])] == [1, 2, 3, 4] and h["transcript"][-1]["caller"] == "fourth"
      and h.get("summary", "").startswith(j["intent"] + ":") and h["summary"].endswith("handed off: max_turns"),
      "the max_turns-th turn is answered and ends the call, handed off with its package", (st, j))
st, _, j = turn("fifth", sid)
check(st == 409 and code(j) == "session_ended", "a turn after the end: 409 session_ended", (st, j))

# ------------------------------------------------------------------ hang up
st, _, j = req("DELETE", "/v1/sessions/" + osid)
check(st == 200 and j["deleted"] is True, "DELETE ends a session", (st, j))
st, _, j = req("GET", "/v1/sessions/" + osid)
check(st == 404 and code(j) == "session_not_found", "and it is gone", (st, j))
st, _, j = req("PUT", "/v1/sessions/" + sid)
check(st == 405, "PUT on a session: 405", (st, j))

# ------------------------------------------------------------------ expiry and the sweep
st, _, j = turn("short call", pipe="brief")
bsid = j["session"]
time.sleep(2.5)
st, _, j = turn("too late", bsid, pipe="brief")
check(st == 404 and code(j) in ("session_expired", "session_not_found"), "an idle session expires: 404", (st, j))
end = time.time() + 10
while time.time() < end:
    st, _, j = req("GET", "/v1/sessions/" + bsid)
    if code(j) == "session_not_found":
        break
    time.sleep(0.3)
check(code(j) == "session_not_found", "the sweep purges it", (st, j))
mode = os.stat(RUN + "/sessions.sqlite").st_mode & 0o777
check(mode == 0o600, f"sessions.sqlite is 0600 ({oct(mode)})")

# ------------------------------------------------------------------ SIGHUP reloads the keys
KEYS["late"] = "late-key-0123456789"
with open(KEYS_FILE, "a") as f:
    f.write("late late-key-0123456789 client\n")
os.chmod(KEYS_FILE, 0o644)          # a key file others can read is refused, the old keys kept
os.kill(router_pid(), signal.SIGHUP)
time.sleep(1)
st, _, _ = req("GET", "/v1/models", key="late")
st2, _, _ = req("GET", "/v1/models", key="app")
check(st == 401 and st2 == 200, "a world-readable key file is refused on SIGHUP; the old keys serve", (st, st2))
os.chmod(KEYS_FILE, 0o600)
os.kill(router_pid(), signal.SIGHUP)
end = time.time() + 10
while time.time() < end:
    st, _, _ = req("GET", "/v1/models", key="late")
    if st == 200:
        break
    time.sleep(0.2)
check(st == 200, "SIGHUP loads the new key", st)

print("sessions_http: %s" % ("FAIL" if fails else "ok"))
sys.exit(1 if fails else 0)
