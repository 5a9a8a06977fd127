#!/usr/bin/env python3
"""console_overhead.py URL KEY PIPELINE [SECONDS] [--rounds R] [--callers N]
       [--hotline] [--quiet-file PATH] - what an open console costs the router.

N callers (default 16: the hotline burst; threads, keep-alive connections)
call POST /v1/pipelines/P with Cache-Control: no-cache for SECONDS, once
with no console client and once with one reading GET /v1/console/events,
R rounds (the order alternating). Over each run it reads:

  * the router's CPU time from /proc/PID/stat (utime + stime, whole
    process, 10 ms ticks) and its loop thread's (/proc/PID/task/PID/stat);
  * the console's own CPU time from switchboard_console_cpu_seconds_total
    (per path: feed, snapshot, connect, state; timed on the loop thread with
    CLOCK_THREAD_CPUTIME_ID) and the feed's bytes.

Prints per run the calls, the router's CPU, the console's CPU and their
ratio (the direct figure), and per round the difference in router CPU per
call with and without the console (the differential figure, noisy on a
shared box). --hotline cycles the caller texts of tests/bench/hotline_burst.py
(for configs/demo.yaml's pipeline). --quiet-file: while PATH exists no run
starts, and a run during which it appears is thrown away. Run on the same
box as the router (docs/router.md records runs).
"""
import argparse, http.client, json, os, re, socket, statistics, sys, threading, time, urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("key")
ap.add_argument("pipeline")
ap.add_argument("seconds", nargs="?", type=float, default=10)
ap.add_argument("--rounds", type=int, default=1)
ap.add_argument("--callers", type=int, default=16)
ap.add_argument("--hotline", action="store_true")
ap.add_argument("--quiet-file")
A = ap.parse_args()
u = urllib.parse.urlparse(A.url)
H = {"Authorization": "Bearer " + A.key, "Content-Type": "application/json", "Cache-Control": "no-cache"}
TEXTS = None
if A.hotline:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import hotline_burst  # noqa: E402
    TEXTS = hotline_burst.CALLS
TICK = os.sysconf("SC_CLK_TCK")


def get(path):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", path, headers=H)
    return c.getresponse().read()


def proc_cpu(path):
    f = open(path).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def sample(pid):
    """(process CPU s, loop thread CPU s, {path: console CPU s}, feed bytes, loadavg)"""
    text = get("/metrics").decode()
    paths = {m.group(1): float(m.group(2))
             for m in re.finditer(r'^switchboard_console_cpu_seconds_total\{path="(\w+)"\} (\S+)$', text, re.M)}
    sent = re.search(r"^switchboard_console_sent_bytes_total (\S+)$", text, re.M)
    return (proc_cpu("/proc/%d/stat" % pid), proc_cpu("/proc/%d/task/%d/stat" % (pid, pid)), paths,
            float(sent.group(1)) if sent else 0.0, open("/proc/loadavg").read().split()[:3])


def caller(stop, n, i):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=900)
    k = 0
    while not stop.is_set():
        k += 1
        text = TEXTS[(i + k * A.callers) % len(TEXTS)] if TEXTS else "caller %d call %d" % (i, k)
        c.request("POST", "/v1/pipelines/" + A.pipeline, body=json.dumps({"input": text}), headers=H)
        r = c.getresponse()
        r.read()
        n[i] += r.status == 200


def console(stop, got, conns):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=900)
    conns.append(c)
    c.request("GET", "/v1/console/events", headers=H)
    r = c.getresponse()
    try:
        while not stop.is_set():
            line = r.fp.readline()
            if not line:
                break
            got[0] += line.startswith(b"data: ")
    except (OSError, ValueError, AttributeError):   # closed by the run's end
        pass


def quiet():
    return A.quiet_file and os.path.exists(A.quiet_file)


def run(pid, with_console):
    """The run's figures, or None when the quiet file appeared during it."""
    while quiet():
        time.sleep(10)
    stop, cstop, n, got, conns = threading.Event(), threading.Event(), [0] * A.callers, [0], []
    if with_console:
        threading.Thread(target=console, args=(cstop, got, conns), daemon=True).start()
        time.sleep(0.5)
    s0, t0 = sample(pid), time.time()
    callers = [threading.Thread(target=caller, args=(stop, n, i)) for i in range(A.callers)]
    for t in callers:
        t.start()
    disturbed = False
    while time.time() - t0 < A.seconds and not disturbed:
        time.sleep(0.25)
        disturbed = quiet()
    stop.set()
    for t in callers:
        t.join()
    s1, t1 = sample(pid), time.time()
    cstop.set()
    for c in conns:                 # the next run must not have a console client left over
        c.sock.shutdown(socket.SHUT_RDWR)
    if disturbed:
        print("  (run thrown away: %s appeared)" % A.quiet_file, flush=True)
        return None
    calls, wall = sum(n), t1 - t0
    proc, loop = s1[0] - s0[0], s1[1] - s0[1]
    cons = {k: s1[2].get(k, 0) - s0[2].get(k, 0) for k in s1[2]}
    ctot = sum(cons.values())
    print("%-8s %6d calls in %.1f s (%.1f/s), load %s -> %s: router CPU %.2f s = %.1f%% of a core "
          "(loop thread %.2f s), %.3f ms/call; console CPU %.4f s (%s), %.0f feed bytes/s, %d events read; "
          "console/router = %.3f%%" % (
              "console" if with_console else "none", calls, wall, calls / wall, "/".join(s0[4]), "/".join(s1[4]),
              proc, 100 * proc / wall, loop, 1e3 * proc / max(calls, 1), ctot,
              ", ".join("%s %.4f" % kv for kv in sorted(cons.items())), (s1[3] - s0[3]) / wall, got[0],
              100 * ctot / proc if proc else 0), flush=True)
    return {"console": with_console, "per_call": proc / max(calls, 1), "ratio": ctot / proc if proc else 0,
            "console_s": ctot, "router_s": proc}


pid = json.loads(get("/v1/console/state"))["router"]["pid"]
ratios, diffs = [], []
for k in range(A.rounds):
    order = [False, True] if k % 2 == 0 else [True, False]
    res = {}
    for wc in order:
        res[wc] = run(pid, wc)
    if res[True]:
        ratios.append(res[True]["ratio"])
    if res[True] and res[False]:
        d = (res[True]["per_call"] - res[False]["per_call"]) / res[False]["per_call"]
        diffs.append(d)
        print("round %d: console adds %+.1f%% router CPU per call (differential)" % (k + 1, 100 * d), flush=True)
if ratios:
    print("direct: console CPU / router CPU = %s (median %.3f%%, max %.3f%%)" % (
        ", ".join("%.3f%%" % (100 * r) for r in ratios), 100 * statistics.median(ratios), 100 * max(ratios)))
if diffs:
    print("differential: %s (median %+.1f%%)" % (", ".join("%+.1f%%" % (100 * d) for d in diffs),
                                                100 * statistics.median(diffs)))
