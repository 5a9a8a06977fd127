#!/usr/bin/env python3
"""A batching worker's memory under 64 concurrent requests.

    tests/bench/batch_memory.py [--sb bin/switchboard] [--model M.gguf]
        [--kv-mb 16,64] [--clients 64] [--parallel 16] [--gen 32] [--ctx 1024]
        [--out build/bench]

For each --kv-mb value: starts `switchboard worker --parallel P --kv-mb M
--max-queue CLIENTS` on the model, waits for its socket, answers one request
(the idle figure: model loaded, pool allocated, one request served), then
sends CLIENTS different generate requests at the same moment, each from its
own thread on its own connection (tests/itlib.py ipc_call), GEN tokens at
temperature 0. While they run, /proc/PID/status is sampled every 20 ms:

  VmRSS    all resident pages;
  RssAnon  private memory (KV pool, scratch, logits, queues) - what kv_mb
           must bound;
  RssFile  the model's pages: the GGUF is mmap'ed read-only, shared with the
           page cache and with every other worker on the same file;
  VmHWM    the peak of VmRSS, read at the end.

The figure: peak RssAnon - kv_mb = the fixed overhead, which must not grow
with kv_mb or with the load (compare the idle row and the kv_mb values).
Results go into OUT/batch_memory.json. Exit status 0 when every request was
answered (a refused one - the pool too small for it - counts as an error).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import itlib  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")
TOPICS = ["water bill", "street light", "parking permit", "library hours", "recycling bin", "potholes",
          "tax office", "noisy neighbour", "rubbish collection", "housing fund", "residence card",
          "town hall appointment", "bus stop sign", "newborn registration", "restaurant complaint",
          "bulky waste"]


def log(msg):
    print(f"batch_memory: {msg}", flush=True)


def status_kib(pid):
    """The FIELDS of /proc/PID/status, in KiB (None once the process is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key in FIELDS:
                    out[key] = int(val.split()[0])
    except OSError:
        return None
    return out


def mib(kib):
    return kib / 1024.0


def prompt(i):
    return (f"Caller {i} asks the city hotline about the {TOPICS[i % len(TOPICS)]}. "
            f"Write the agent's reply in two short sentences, and mention reference number {1000 + 37 * i}.")


def run_one(args, kv_mb, tmp):
    sock = os.path.join(tmp, f"w{kv_mb}.sock")
    cmd = [args.sb, "worker", "--model", args.model, "--socket", sock, "-t", str(args.threads),
           "-c", str(args.ctx), "--parallel", str(args.parallel), "--kv-mb", str(kv_mb),
           "--max-queue", str(args.clients)]
    logf = open(os.path.join(tmp, f"w{kv_mb}.log"), "w")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start (see {logf.name})")
            time.sleep(0.1)
        first = itlib.ipc_call(sock, "generate", {"prompt": prompt(0), "max_tokens": args.gen,
                                                  "temperature": 0}, timeout=600)
        if not first.get("ok"):
            raise RuntimeError(f"first request failed: {first}")
        idle = status_kib(proc.pid)
        samples, stop = [], threading.Event()

        def sampler():
            while not stop.is_set():
                s = status_kib(proc.pid)
                if s:
                    samples.append(s)
                time.sleep(0.02)

        out = [None] * args.clients
        go = threading.Barrier(args.clients + 1)

        def client(i):
            go.wait()
            try:
                out[i] = itlib.ipc_call(sock, "generate", {"prompt": prompt(i), "max_tokens": args.gen,
                                                           "temperature": 0}, timeout=1800)
            except OSError as exc:
                out[i] = {"ok": False, "error": str(exc)}

        st = threading.Thread(target=sampler)
        st.start()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        load = float(open("/proc/loadavg").read().split()[0])
        go.wait()
        t0 = time.monotonic()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        stop.set()
        st.join()
        end = status_kib(proc.pid)
        health = itlib.ipc_call(sock, "health", {})["result"]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        logf.close()
    errors = [o for o in out if not (o and o.get("ok"))]
    peak = {k: max(s[k] for s in samples) for k in ("VmRSS", "RssAnon", "RssFile")}
    res = {"kv_mb": kv_mb, "clients": args.clients, "parallel": args.parallel, "gen": args.gen,
           "ctx": args.ctx, "wall_s": round(wall, 1), "load1_before": load, "samples": len(samples),
           "idle_mib": {k: round(mib(v), 1) for k, v in idle.items()},
           "peak_mib": {k: round(mib(v), 1) for k, v in peak.items()},
           "vmhwm_mib": round(mib(end["VmHWM"]), 1),
           "overhead_anon_mib": round(mib(peak["RssAnon"]) - kv_mb, 1),
           "tokens_out": sum(o["result"]["completion_tokens"] for o in out if o and o.get("ok")),
           "errors": len(errors), "error_sample": errors[:2],
           "health": {k: health.get(k) for k in ("parallel", "kv_blocks_total", "prefix_hits",
                                                 "prefix_misses", "blocks_cached") if k in health}}
    log(f"kv_mb {kv_mb}: {args.clients} requests in {wall:.1f} s ({res['tokens_out']} tokens, "
        f"{len(errors)} errors), load {load:.2f}; idle anon {res['idle_mib']['RssAnon']} MiB; peak "
        f"VmRSS {res['peak_mib']['VmRSS']} RssAnon {res['peak_mib']['RssAnon']} RssFile "
        f"{res['peak_mib']['RssFile']} MiB, VmHWM {res['vmhwm_mib']} MiB; anon - kv_mb = "
        f"{res['overhead_anon_mib']} MiB")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sb", default=os.path.join(REPO_ROOT, "bin", "switchboard"))
    ap.add_argument("--model", default=os.path.join(REPO_ROOT, "models",
                                                    "qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf"))
    ap.add_argument("--kv-mb", default="16,64", help="comma-separated pool sizes, MiB")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "build", "bench"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sb-batch-memory-")
    results = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
               "model": os.path.relpath(args.model, REPO_ROOT), "runs": []}
    for kv in [int(x) for x in args.kv_mb.split(",") if x]:
        results["runs"].append(run_one(args, kv, tmp))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "batch_memory.json"), "w") as f:
        json.dump(results, f, indent=1)
    log(f"wrote {os.path.join(args.out, 'batch_memory.json')} (worker logs in {tmp})")
    return 1 if any(r["errors"] for r in results["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
