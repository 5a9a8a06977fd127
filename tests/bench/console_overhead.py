#!/usr/bin/env python3
"""console_overhead.py URL KEY PIPELINE [SECONDS] - what an open console costs the router.

16 callers (threads, keep-alive connections) call POST /v1/pipelines/P with
Cache-Control: no-cache for SECONDS, first with no console client, then
with one reading GET /v1/console/events; between the two the router's CPU
time is read from /proc/PID/stat (utime + stime). Prints calls, router CPU
seconds and CPU per call for each, and the difference. Run on the same box
as the router (docs/router.md records a run).
"""
import http.client, json, os, sys, threading, time, urllib.parse

URL, KEY, PIPE = sys.argv[1:4]
SECS = float(sys.argv[4]) if len(sys.argv) > 4 else 10
u = urllib.parse.urlparse(URL)
H = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json", "Cache-Control": "no-cache"}


def router_pid():
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", "/v1/console/state", headers=H)
    return json.loads(c.getresponse().read())["router"]["pid"]


def cpu(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def caller(stop, n, i):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    k = 0
    while not stop.is_set():
        k += 1
        c.request("POST", "/v1/pipelines/" + PIPE, body=json.dumps({"input": "caller %d call %d" % (i, k)}), headers=H)
        r = c.getresponse()
        r.read()
        n[i] += r.status == 200


def console(stop, got):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("GET", "/v1/console/events", headers=H)
    r = c.getresponse()
    while not stop.is_set():
        line = r.fp.readline()
        if not line:
            break
        got[0] += line.startswith(b"data: ")


def run(with_console):
    pid = router_pid()
    stop, n, got = threading.Event(), [0] * 16, [0]
    ts = []
    if with_console:
        ts.append(threading.Thread(target=console, args=(stop, got), daemon=True))
        ts[0].start()
        time.sleep(0.5)
    c0, t0 = cpu(pid), time.time()
    callers = [threading.Thread(target=caller, args=(stop, n, i)) for i in range(16)]
    for t in callers:
        t.start()
    time.sleep(SECS)
    stop.set()
    for t in callers:
        t.join()
    c1, t1 = cpu(pid), time.time()
    calls = sum(n)
    print("%-16s %6d calls in %.1f s (%.0f/s), router CPU %.2f s = %.1f%% of one core, %.3f ms/call%s" % (
        "with console" if with_console else "without console", calls, t1 - t0, calls / (t1 - t0), c1 - c0,
        100 * (c1 - c0) / (t1 - t0), 1e3 * (c1 - c0) / max(calls, 1),
        ", %d events read" % got[0] if with_console else ""))
    return (c1 - c0) / max(calls, 1)


a = run(False)
b = run(True)
print("console adds %.1f%% router CPU per call" % (100 * (b - a) / a))
