#!/usr/bin/env python3
"""console_browser.py URL KEY PIPELINE OUTDIR - the console in headless Chromium.

Drives a real Chromium over the DevTools protocol on a pipe
(--remote-debugging-pipe: fd 3 carries our commands, fd 4 its answers, each
message JSON ended by NUL; Python stdlib only) and checks what an operator
sees:
  * GET /console loads, takes the key from its #key= fragment and goes live;
  * a call made after that shows in the DOM within 1 s of its reply;
  * clicking it opens its trace with every stage;
  * marking the correct intent in the trace stores it (GET /v1/feedback.tsv);
  * no request leaves for another origin.
Saves OUTDIR/console.png (calls view) and OUTDIR/console-trace.png.
Prints one line per check; exit 1 on any failure.
"""
import base64, json, os, select, shutil, subprocess, sys, tempfile, time, urllib.request

URL, KEY, PIPE, OUT = sys.argv[1:5]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import itlib  # noqa: E402

check = itlib.Checks(detail_max=300)


def http(path, body=None, headers=None):
    h = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
    h.update(headers or {})
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode() if body is not None else None, headers=h)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, dict(r.headers), r.read()


class Chrome:
    def __init__(self):
        exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
        if not exe:
            raise SystemExit("SKIP no chromium (apt-get install chromium)")
        self.prof = tempfile.mkdtemp(prefix="sb-chromium-")
        cmd_r, self.cmd_w = os.pipe()
        self.ev_r, ev_w = os.pipe()

        # fds 3 and 4 by dup2 (inheritable); close_fds=False keeps them, and
        # our own ends (os.pipe: close-on-exec) do not reach chromium.
        def fds():
            a, b = os.dup(cmd_r), os.dup(ev_w)     # cmd_r may be fd 3 itself: dup2(3, 3) keeps close-on-exec
            os.dup2(a, 3)
            os.dup2(b, 4)
        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--disable-background-networking", "--remote-debugging-pipe", "--window-size=1440,900",
                "--user-data-dir=" + self.prof, "about:blank"]
        self.p = subprocess.Popen(args, preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(ev_w)
        self.buf = b""
        self.n = 0
        self.events = []

    def _read(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.time()
            if left <= 0 or not select.select([self.ev_r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self.ev_r, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None, timeout=20):
        self.n += 1
        m = {"id": self.n, "method": method, "params": params or {}}
        if session:
            m["sessionId"] = session
        os.write(self.cmd_w, json.dumps(m).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            r = self._read(deadline)
            if r.get("id") == self.n:
                if "error" in r:
                    raise RuntimeError("%s: %s" % (method, r["error"]))
                return r.get("result", {})
            self.events.append(r)

    def close(self):
        try:
            self.call("Browser.close", timeout=3)
        except Exception:
            pass
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        shutil.rmtree(self.prof, ignore_errors=True)


c = Chrome()
try:
    tid = c.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = c.call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
    c.call("Page.enable", session=sid)
    c.call("Network.enable", session=sid)
    c.call("Emulation.setDeviceMetricsOverride",
           {"width": 1440, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=sid)

    def js(expr):
        r = c.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)
        return r.get("result", {}).get("value")

    def wait_for(expr, timeout, step=0.01):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if js(expr):
                return time.time() - t0
            time.sleep(step)
        return None

    c.call("Page.navigate", {"url": URL + "/console#key=" + KEY}, session=sid)
    check(wait_for("document.querySelector('#conn') && document.querySelector('#conn').textContent === 'live'", 10)
          is not None, "the console loads and its feed goes live")
    check(js("location.hash") == "", "the key is gone from the address bar", js("location.href"))

    # Calls made now must appear within 1 s of their reply. Timing is the
    # subject (the feed is live): the event is pushed as the call ends and
    # drawn in ms; 1 s leaves a sanitized router on a loaded box room, while
    # a page that only showed calls on a reload or a poll would miss it.
    delays = []
    inputs = ["my bill is wrong", "I want to complain about the noise", "put me through to a person",
              "the meter reading is off again", "why was I charged twice"]
    for i, text in enumerate(inputs):
        cid = "browser-%d-%d" % (os.getpid(), i)
        st, hd, _ = http("/v1/pipelines/" + PIPE, {"input": text}, {"X-Call-Id": cid, "Cache-Control": "no-cache"})
        t_reply = time.time()
        d = wait_for("!!document.querySelector('tr.call[data-id=\"%s\"]')" % cid, 3)
        delays.append(None if d is None else time.time() - t_reply)
    worst = max((d for d in delays if d is not None), default=None)
    check(all(d is not None and d < 1.0 for d in delays), "every call shows in the DOM within 1 s of its reply",
          "delays %s" % delays)
    print("     delays (s): %s" % " ".join("%.3f" % d for d in delays if d is not None))
    check(js("document.querySelector('tr.call[data-id=\"%s\"] td.caller').textContent" % cid).startswith("[caller text"),
          "the caller's text is masked in the calls table")
    shot = c.call("Page.captureScreenshot", {"format": "png"}, session=sid)
    open(os.path.join(OUT, "console.png"), "wb").write(base64.b64decode(shot["data"]))

    # Open the last call's trace.
    js("document.querySelector('tr.call[data-id=\"%s\"]').click()" % cid)
    opened = wait_for("!document.querySelector('#trace').hidden && "
                      "document.querySelector('#tracebody').textContent.includes('Call %s') && "
                      "document.querySelectorAll('#tracebody .stage').length >= 2" % cid, 5)
    check(opened is not None, "clicking a call opens its trace with its stages",
          js("document.querySelector('#tracebody').textContent.slice(0, 300)"))
    names = js("[...document.querySelectorAll('#tracebody .stage h4')].map(h => h.firstChild.textContent)")
    check(names and "route" in names and "answer" in names, "the trace lists the stages", names)
    # The supervisor marks the correct intent.
    js("document.querySelector('#fbintent').value = 'complaint'; document.querySelector('#fbsend').click()")
    check(wait_for("document.querySelector('#fbnote').textContent === 'marked: complaint'", 5) is not None,
          "marking the correct intent is acknowledged", js("document.querySelector('#fbnote').textContent"))
    _, _, tsv = http("/v1/feedback.tsv")
    check(("complaint\t" + inputs[-1]).encode() in tsv, "the mark is in GET /v1/feedback.tsv", tsv[:300])
    time.sleep(0.3)
    shot = c.call("Page.captureScreenshot", {"format": "png"}, session=sid)
    open(os.path.join(OUT, "console-trace.png"), "wb").write(base64.b64decode(shot["data"]))

    # The page asked nothing of another origin.
    reqs = [e["params"]["request"]["url"] for e in c.events if e.get("method") == "Network.requestWillBeSent"]
    foreign = [u for u in reqs if not u.startswith(URL) and not u.startswith("data:")]
    check(reqs and not foreign, "the page makes no external requests", foreign[:5])
finally:
    c.close()

print("console browser check: %s" % ("FAILED" if check.failed else "passed"))
sys.exit(1 if check.failed else 0)
