#!/usr/bin/env python3
"""16 hotline calls at once against the same 16 one after another.

    tests/bench/hotline_burst.py [--sb bin/switchboard] [--config configs/demo.yaml]
        [--calls 16] [--rounds 1] [--out build/bench]

Starts the runtime (`switchboard run`) on a copy of the config that only
changes the runtime directory, the cache file and the listen port (so it
runs beside anything else), waits for /health, then sends every call through
POST /v1/pipelines/hotline with Cache-Control: no-cache (each call is
computed, none comes from the response cache):

  * warm-up: one call per composer stage (extract+answer, handoff), so both
    modes find the stages' fixed prompts in the worker's prefix cache;
  * sequential: the N calls one after another;
  * burst: the same N calls sent at the same moment from N threads;
  * with --rounds R, R rounds, the order of the two modes alternating.

Reports per mode the wall time and per-call latency p50/p95 (nearest rank),
the burst's wall as a fraction of the sequential one (the goal:
≤ 40 %), and checks that every call's answer (intent, every stage's output,
the reply) is the same in the burst as alone. The config's generate stages
must be greedy: the script refuses a config whose stages set a temperature
other than 0 (a pipeline stage's default is 0). Results and the load
average before each mode go into OUT/hotline_burst.json.
Exit status: 0 when every call succeeded and all answers matched.
"""
import argparse
import datetime
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import itlib  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GOAL = 0.40   # burst wall / sequential wall

# Different callers over every intent, both languages; the first two are
# the warm-up calls' kind (answer, handoff), not repeated below.
WARMUP = ["我想查一下我的社保缴费记录", "Can I talk to an operator please?"]
CALLS = [
    "My water bill is wrong this month, the meter reading is far too high.",
    "租房可以提取公积金吗？需要带什么材料",
    "How do I claim my hospital bill on medical insurance?",
    "我要投诉，小区门口的垃圾一个星期没人清理了",
    "How much of my housing fund can I withdraw each month to pay rent?",
    "孩子出生了，怎么给他上户口？",
    "My pension contribution record shows a gap in 2019, how can I fix it?",
    "这个月燃气费比上个月高了一倍，燃气表号 GX-20931",
    "住院花了两万多，医保能报销多少？",
    "I'd like to speak to a real person, not a machine.",
    "How do I apply for a residence permit? I moved here last month.",
    "公积金贷款买第一套房需要什么条件？",
    "The electricity company charged me a late fee but I paid on time, account 77120045.",
    "我要举报楼下工地晚上十二点还在施工",
    "我的医保卡在药店刷不了了，怎么办",
    "Can my employer stop paying my social insurance while I am on sick leave?",
]


def log(msg):
    print(f"hotline_burst: {msg}", flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def derived_config(src, run_dir, port):
    """A copy of SRC next to it (its relative paths still resolve) with its
    own runtime dir, cache file and port; refuses non-greedy stages."""
    text = open(src, encoding="utf-8").read()
    temps = [float(t) for t in re.findall(r"^\s*temperature:\s*([0-9.]+)", text, re.M)]
    if any(t != 0 for t in temps):
        sys.exit(f"hotline_burst: {src} sets temperature {temps}; the answers must be greedy")
    text = re.sub(r"(?m)^  dir: .*$", f"  dir: {run_dir}", text)
    text = re.sub(r"(?m)^  http: .*$", f"  http: 127.0.0.1:{port}", text)
    text = re.sub(r"(?m)^  path: .*cache\.sqlite$", f"  path: {run_dir}/cache.sqlite", text)
    dst = os.path.join(os.path.dirname(os.path.abspath(src)), f".hotline-burst-{os.getpid()}.yaml")
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)
    return dst


def model_names(cfg):
    block = re.search(r"(?ms)^models:\n(.*?)^\S", open(cfg, encoding="utf-8").read()).group(1)
    return re.findall(r"(?m)^  ([A-Za-z0-9_-]+):", block)


def call(url, text):
    """(seconds, answer-or-None, error-or-None) of one hotline call."""
    t0 = time.monotonic()
    status, headers, body = itlib.request(
        url + "/v1/pipelines/hotline", "POST", {"input": text},
        headers={"Content-Type": "application/json", "Cache-Control": "no-cache"}, timeout=900)
    dt = time.monotonic() - t0
    if status != 200:
        return dt, None, f"HTTP {status}: {body[:200]!r}"
    if headers.get("X-Cache", headers.get("x-cache", "")) == "hit":
        return dt, None, "answered from the response cache despite no-cache"
    d = json.loads(body)
    # what "the same answer" means: the route, every stage's result, the reply
    answer = {"intent": d.get("intent"), "output": d.get("output"),
              "stages": [[s.get("name"), s.get("status"), s.get("output"), s.get("json")]
                         for s in d.get("stages", [])]}
    return dt, answer, None


def nearest_rank(xs, q):
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)]


def sequential(url, calls):
    t0 = time.monotonic()
    res = [call(url, c) for c in calls]
    return time.monotonic() - t0, res


def burst(url, calls):
    res = [None] * len(calls)
    go = threading.Barrier(len(calls) + 1)

    def one(i):
        go.wait()
        res[i] = call(url, calls[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    return time.monotonic() - t0, res


def summary(name, wall, res, load):
    lat = [r[0] for r in res]
    s = {"mode": name, "wall_s": round(wall, 2), "load1_before": load,
         "p50_s": round(statistics.median(lat), 2), "p95_s": round(nearest_rank(lat, 0.95), 2),
         "min_s": round(min(lat), 2), "max_s": round(max(lat), 2),
         "latencies_s": [round(x, 2) for x in lat],
         "errors": [r[2] for r in res if r[2]]}
    log(f"  {name}: wall {wall:.1f} s, per call p50 {s['p50_s']:.1f} p95 {s['p95_s']:.1f} "
        f"(min {s['min_s']:.1f} max {s['max_s']:.1f}) s, load before {load:.2f}"
        + (f", {len(s['errors'])} errors: {s['errors'][:2]}" if s["errors"] else ""))
    return s


def start_runtime(sb, cfg, run_dir, models, url, logf):
    proc = subprocess.Popen([sb, "run", "-c", cfg], stdout=logf, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"switchboard run exited ({proc.returncode}) during start-up")
        socks = ["router"] + models
        if all(os.path.exists(os.path.join(run_dir, s + ".sock")) for s in socks):
            try:
                if itlib.request(url + "/health", "GET", timeout=5)[0] == 200:
                    return proc
            except OSError:
                pass
        time.sleep(0.5)
    raise RuntimeError("the runtime was not ready after 300 s")


def stop_runtime(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sb", default=os.path.join(REPO_ROOT, "bin", "switchboard"))
    ap.add_argument("--config", default=os.path.join(REPO_ROOT, "configs", "demo.yaml"))
    ap.add_argument("--calls", type=int, default=16, help=f"at most {len(CALLS)}")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "build", "bench"))
    args = ap.parse_args()
    if not 1 <= args.calls <= len(CALLS) or args.rounds < 1:
        sys.exit(f"hotline_burst: --calls 1..{len(CALLS)}, --rounds ≥ 1")
    calls = CALLS[:args.calls]
    tmp = tempfile.mkdtemp(prefix="sb-hotline-burst-")
    run_dir = os.path.join(tmp, "run")
    port = itlib.free_port()
    url = f"http://127.0.0.1:{port}"
    cfg = derived_config(args.config, run_dir, port)
    logpath = os.path.join(tmp, "run.log")
    results = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
               "config": os.path.relpath(args.config, REPO_ROOT), "calls": calls,
               "load_start": loadavg(), "rounds": []}
    proc = None
    ok = True
    try:
        with open(logpath, "w") as logf:
            proc = start_runtime(args.sb, cfg, run_dir, model_names(cfg), url, logf)
        log(f"runtime up on {url} (log {logpath}); warm-up")
        for w in WARMUP:
            dt, _, err = call(url, w)
            if err:
                raise RuntimeError(f"warm-up call failed: {err}")
        for r in range(args.rounds):
            log(f"round {r + 1}/{args.rounds}")
            order = ("sequential", "burst") if r % 2 == 0 else ("burst", "sequential")
            modes = {}
            for m in order:
                load = loadavg()[0]
                wall, res = (sequential if m == "sequential" else burst)(url, calls)
                modes[m] = (summary(m, wall, res, load), [x[1] for x in res])
            seq, bur = modes["sequential"], modes["burst"]
            same = [a is not None and a == b for a, b in zip(seq[1], bur[1])]
            frac = bur[0]["wall_s"] / seq[0]["wall_s"]
            rnd = {"order": list(order), "sequential": seq[0], "burst": bur[0],
                   "burst_over_sequential": round(frac, 3),
                   "answers_equal": sum(same), "answers_differ": [calls[i] for i, s in enumerate(same) if not s],
                   "answers": seq[1]}
            results["rounds"].append(rnd)
            log(f"  burst / sequential wall: {100 * frac:.0f} % (goal ≤ {100 * GOAL:.0f} %); "
                f"answers equal {sum(same)}/{len(calls)}")
            ok = ok and all(same) and not seq[0]["errors"] and not bur[0]["errors"]
        h = json.loads(itlib.request(url + "/health", "GET")[2])
        results["health"] = h
    except (RuntimeError, OSError) as exc:
        log(f"FAILED: {exc}; last lines of {logpath}:")
        with open(logpath, errors="replace") as f:
            print("".join(f.readlines()[-20:]), file=sys.stderr)
        ok = False
    finally:
        if proc:
            stop_runtime(proc)
        os.unlink(cfg)
    results["load_end"] = loadavg()
    fr = [r["burst_over_sequential"] for r in results["rounds"]]
    if fr:
        results["median_burst_over_sequential"] = statistics.median(fr)
        results["goal_met"] = statistics.median(fr) <= GOAL
        log(f"median burst / sequential: {100 * statistics.median(fr):.0f} % over {len(fr)} rounds: "
            f"goal {'met' if results['goal_met'] else 'NOT met'}; answers "
            f"{'all equal' if ok else 'DIFFER or errors'}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hotline_burst.json"), "w") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
    log(f"wrote {os.path.join(args.out, 'hotline_burst.json')}")
    if ok:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
