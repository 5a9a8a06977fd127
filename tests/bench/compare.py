#!/usr/bin/env python3
"""Side-by-side benchmark: `switchboard bench` vs llama.cpp's llama-bench.

Called by tools/bench.sh (`make bench`), which first makes sure llama.cpp,
the forged models and the membw tool exist. Run directly only if they do:

    tests/bench/compare.py --sb BIN --llama-bench EXE --membw EXE
        [--models tinyllama,phi3,llama3] [--rounds 5] [--pp 512] [--tg 128]
        [--threads 2] [--fa 0] [--out build/bench]

Method (see docs/PERFORMANCE.md):
  * each round runs ours once, then llama.cpp once, on the same file with the
    same threads (-r 1 each), so slow drift in machine load hits both equally;
  * the figure per engine is the median over rounds;
  * decode is also given as a fraction of the memory-bandwidth limit:
    tg_tps * (weight bytes read per token) / (read bandwidth, 2 threads),
    with the bandwidth measured in every round, just before that round's
    runs (on a shared host it moves by tens of percent within minutes), and
    the median of the per-round fractions reported;
  * and, unless --no-interleaved-bw, against the bandwidth `switchboard
    bench --membw` probes between its windows of 16 decode tokens (each
    window's decode bytes/s over the probe next to it, median of windows;
    bytes = weights + the KV rows read); llama.cpp's decode is set against
    the median of the interleaved probes of the same round, run just before
    it;
  * prompt processing is also given as a fraction of this machine's int8
    peak: pp_tps * (multiply-adds per prompt token: the elements of every
    matrix but token_embd and the output, which a prompt runs for its last
    token only) / (peak of one core * threads), the peak being the one
    `switchboard tune` measured for the instruction family the gemm uses,
    read from the tuning profile the engine reads (SB_TUNE_PROFILE, else
    ~/.cache/switchboard/tune-<cpu>.json; no profile: no such column);
  * thread scaling: TinyLlama decode at -t 1 and -t 2, alternated likewise.
Every raw sample and the 1-minute load average at the time it was taken go
into results.json, so noisy runs can be recognised later.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

try:
    import gguf
except ImportError:
    sys.exit("compare: the 'gguf' Python package is missing (pip install gguf)")

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL_FILES = {   # what tests/bench/forge.py writes
    "tinyllama": ("TinyLlama-1.1B", "tinyllama-1.1b-shape.Q2_K.gguf"),
    "phi3": ("Phi-3-mini-4k", "phi-3-mini-4k-shape.Q4_K_M.gguf"),
    "llama3": ("Llama-3-8B", "llama-3-8b-shape.Q5_K_M.gguf"),
}
RUN_TIMEOUT = 3600   # seconds; one llama3 pp512 at 2 t/s is ~4 min


def log(msg):
    print(f"bench: {msg}", flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def median(xs):
    return statistics.median(xs) if xs else None


def weight_bytes_per_token(path):
    """Bytes of weights a decode step streams: every tensor but token_embd.

    token_embd is only gathered (one row per token), so it does not count;
    KV-cache reads are small at these context lengths and are ignored.
    """
    reader = gguf.GGUFReader(path)
    return sum(int(t.n_bytes) for t in reader.tensors if t.name != "token_embd.weight")


def pp_macs_per_token(path):
    """Int8 multiply-adds a prompt token costs in the matrices: one per
    weight element of every matrix but token_embd (gathered) and output
    (a prompt's logits are its last token's only)."""
    reader = gguf.GGUFReader(path)
    return sum(int(t.n_elements) for t in reader.tensors
               if len(t.shape) == 2 and t.name not in ("token_embd.weight", "output.weight"))


def cpuinfo_key():
    """vendor-family-model-stepping, as the engine names its profile."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        return None
    try:
        return f"{info['vendor_id']}-{info['cpu family']}-{info['model']}-{info['stepping']}"
    except KeyError:
        return None


def tune_profile():
    """The profile the engine reads (SB_TUNE_PROFILE=FILE|off, else the
    cache path), with the measured int8 peak of the gemm's instruction
    family; None when there is none or it cannot be read."""
    env = os.environ.get("SB_TUNE_PROFILE")
    if env == "off":
        return None
    path = env
    if not path:
        key = cpuinfo_key()
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = xdg if xdg.startswith("/") else os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "switchboard", f"tune-{key}.json") if key else None
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            p = json.load(f)
        m = p["measured"]
        fam = m["gemm_family"]
        return {"path": path, "date": m.get("date"), "gemm_family": fam,
                "peak_per_core": m["peak_macs_per_core"].get(fam), "plan": p.get("plan"),
                "peak_all_threads": m.get("gemm_peak_macs_all_threads"), "threads": m.get("threads"),
                "bandwidth_gbs_t": m.get("bandwidth_gbs_t")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        log(f"tuning profile {path} unreadable ({e}); no int8-peak columns")
        return None


def run(cmd, env=None):
    """Run cmd; return (stdout, error-or-None, seconds, load1 at start)."""
    load1 = loadavg()[0]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        return "", f"timed out after {RUN_TIMEOUT} s", time.time() - t0, load1
    except OSError as exc:
        return "", str(exc), 0.0, load1
    dt = time.time() - t0
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return p.stdout, f"exit {p.returncode}: " + " | ".join(tail), dt, load1
    return p.stdout, None, dt, load1


def parse_ours(stdout):
    """`switchboard bench --json` prints one object; tolerate log lines around it."""
    try:
        return json.loads(stdout)
    except ValueError:
        pass
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise ValueError("no JSON object in switchboard's output")


def parse_llama(stdout):
    """llama-bench -o json: a list with one entry per test (pp, tg)."""
    pp = tg = None
    seen = {}
    for entry in json.loads(stdout):
        if entry.get("n_prompt", 0) > 0 and entry.get("n_gen", 0) == 0:
            pp = entry["avg_ts"]
        elif entry.get("n_gen", 0) > 0 and entry.get("n_prompt", 0) == 0:
            tg = entry["avg_ts"]
        seen = {k: entry.get(k) for k in (
            "build_commit", "n_threads", "n_batch", "n_ubatch", "type_k", "type_v",
            "flash_attn", "load_mode", "repack", "poll", "model_type", "model_size")}
    return pp, tg, seen


class Engines:
    def __init__(self, args):
        self.args = args

    def ours_cmd(self, path, threads, pp, tg, membw=False):
        return [self.args.sb, "bench", "-m", path, "-p", str(pp), "-n", str(tg),
                "-t", str(threads), "-r", "1", "--json"] + (["--membw"] if membw else [])

    def llama_cmd(self, path, threads, pp, tg):
        return [self.args.llama_bench, "-m", path, "-t", str(threads),
                "-p", str(pp), "-n", str(tg), "-r", "1", "-fa", str(self.args.fa),
                "-o", "json"]

    def ours(self, path, threads, pp, tg, membw=False, untuned=False):
        # untuned: the built-in kernel choices (or --baseline-profile's), whatever profile is in force
        env = dict(os.environ, SB_TUNE_PROFILE=self.args.baseline_profile or "off") if untuned else None
        out, err, dt, load1 = run(self.ours_cmd(path, threads, pp, tg, membw), env)
        sample = {"load1": load1, "seconds": round(dt, 1)}
        if err is None:
            try:
                obj = parse_ours(out)
                sample.update(pp=obj.get("pp_tps"), tg=obj.get("tg_tps"),
                              weight_bytes=obj.get("weight_bytes"), raw=obj,
                              bw_int=obj.get("bw_gbs"), frac_int=obj.get("tg_bw_frac"),
                              bytes_per_token=obj.get("bytes_per_token"),
                              huge_page_frac=obj.get("huge_page_frac"), tuned=obj.get("tuned"))
            except ValueError as exc:
                err = str(exc)
        if err:
            sample["error"] = err
        return sample

    def llama(self, path, threads, pp, tg):
        out, err, dt, load1 = run(self.llama_cmd(path, threads, pp, tg))
        sample = {"load1": load1, "seconds": round(dt, 1)}
        if err is None:
            try:
                sample["pp"], sample["tg"], sample["settings"] = parse_llama(out)
            except (ValueError, KeyError, TypeError) as exc:
                err = f"cannot parse llama-bench JSON: {exc}"
        if err:
            sample["error"] = err
        return sample


def summarise(samples, key):
    vals = [s[key] for s in samples if s.get(key) is not None]
    return {"median": median(vals), "n": len(vals),
            "min": min(vals) if vals else None, "max": max(vals) if vals else None}


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def times(x):
    return "—" if x is None else f"{x:.2f}×"


def mib(n):
    return "—" if not n else f"{n / 2**20:.0f} MiB"


def ratio(a, b):
    return a / b if a is not None and b else None


def drop_cached_pages(path):
    """Both engines map the file; if it was just written (forged, copied)
    the page cache holds it in 4 KiB pages and every decode pays a TLB miss
    per 4 KiB. Dropped, it is read back through the first run's mapping in
    2 MiB folios where the filesystem has them (ext4 since Linux 6.16), and
    both engines share those. Ours reports the fraction (huge_page_frac)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def bench_model(key, eng, args):
    name, fname = MODEL_FILES[key]
    path = os.path.join(args.models_dir, fname)
    res = {"name": name, "file": os.path.relpath(path, REPO_ROOT),
           "file_bytes": os.path.getsize(path),
           "llama_weight_bytes": weight_bytes_per_token(path),
           "pp_macs_per_token": pp_macs_per_token(path),
           "ours": [], "llamacpp": [], "untuned": []}
    log(f"{name}: {fname}, {res['file_bytes'] / 2**30:.2f} GiB, "
        f"{args.rounds} rounds x (ours, llama.cpp), pp{args.pp} tg{args.tg} -t {args.threads}")
    drop_cached_pages(path)
    ours_ok = True
    for r in range(args.rounds):
        bw, _ = measure_bandwidth(args, args.membw_round_reps)
        # --untuned: ours again on the built-in choices, before the tuned run
        # in odd rounds and after it in even ones
        sides = ([True, False] if r % 2 else [False, True]) if args.untuned else [False]
        for untuned in sides if ours_ok else []:
            s_ours = eng.ours(path, args.threads, args.pp, args.tg, not args.no_interleaved_bw, untuned)
            s_ours["bw_gbs"] = bw
            res["untuned" if untuned else "ours"].append(s_ours)
            # an engine that cannot run this model yet would fail every
            # round; do not spend the rounds' time on it
            ours_ok = ours_ok and "error" not in s_ours
        s_llama = eng.llama(path, args.threads, args.pp, args.tg)
        s_llama["bw_gbs"] = bw
        s_llama["bw_int"] = res["ours"][-1].get("bw_int")   # the interleaved probes just before it
        res["llamacpp"].append(s_llama)
        o = res["ours"][-1]
        log(f"  round {r + 1}/{args.rounds}: ours pp {fmt(o.get('pp'))} "
            f"tg {fmt(o.get('tg'))}{' [' + o['error'] + ']' if 'error' in o else ''}"
            f" | llama.cpp pp {fmt(s_llama.get('pp'))} tg {fmt(s_llama.get('tg'))}"
            f"{' [' + s_llama['error'] + ']' if 'error' in s_llama else ''}"
            f" | bandwidth {fmt(bw, 1)} GB/s, interleaved {fmt(o.get('bw_int'), 1)}"
            f" (ours at {fmt(100 * o['frac_int'] if o.get('frac_int') else None, 0)} %)"
            f" | load {s_llama['load1']:.2f}"
            f" | file on 2 MiB pages {fmt(100 * o['huge_page_frac'] if o.get('huge_page_frac') is not None else None, 0)} %"
            + (f" | untuned pp {fmt(res['untuned'][-1].get('pp'))} tg {fmt(res['untuned'][-1].get('tg'))}"
               f" ({fmt(100 * res['untuned'][-1]['frac_int'] if res['untuned'][-1].get('frac_int') else None, 0)} %)"
               if res["untuned"] else ""))
    for side in ("ours", "llamacpp", "untuned"):
        res[side + "_pp"] = summarise(res[side], "pp")
        res[side + "_tg"] = summarise(res[side], "tg")
    res["bw_frac_int_untuned"] = median([s["frac_int"] for s in res["untuned"] if s.get("frac_int")])
    wb = [s["weight_bytes"] for s in res["ours"] if s.get("weight_bytes")]
    res["ours_weight_bytes"] = wb[0] if wb else None
    res["ratio_pp"] = ratio(res["ours_pp"]["median"], res["llamacpp_pp"]["median"])
    res["ratio_tg"] = ratio(res["ours_tg"]["median"], res["llamacpp_tg"]["median"])
    res["bw_gbs"] = summarise(res["llamacpp"], "bw_gbs")
    def frac(side, nbytes):
        # each sample against the bandwidth of its own round
        return median([s["tg"] * nbytes / (s["bw_gbs"] * 1e9) for s in res[side]
                       if s.get("tg") and s.get("bw_gbs") and nbytes])
    res["bw_frac_ours"] = frac("ours", res["ours_weight_bytes"])
    res["bw_frac_llamacpp"] = frac("llamacpp", res["llama_weight_bytes"])
    # against the interleaved probes: ours window by window, llama.cpp
    # against the same round's median probe (bytes: + the mean KV read)
    res["bw_int_gbs"] = summarise(res["ours"], "bw_int")
    res["bw_frac_int_ours"] = median([s["frac_int"] for s in res["ours"] if s.get("frac_int")])
    bpt = [s["bytes_per_token"] for s in res["ours"] if s.get("bytes_per_token")]
    res["ours_bytes_per_token"] = bpt[0] if bpt else None
    kv = (bpt[0] - res["ours_weight_bytes"]) if bpt and res["ours_weight_bytes"] else 0
    res["bw_frac_int_llamacpp"] = median([s["tg"] * (res["llama_weight_bytes"] + kv) / (s["bw_int"] * 1e9)
                                          for s in res["llamacpp"] if s.get("tg") and s.get("bw_int")])
    # pp against the int8 peak `switchboard tune` measured (all threads)
    tp = args.tune
    # (measured with that many threads at once when the profile was made with
    # them: two vCPUs may not reach twice one core's rate)
    peak = None
    if tp and tp.get("peak_all_threads") and tp.get("threads") == args.threads:
        peak = tp["peak_all_threads"]
    elif tp and tp.get("peak_per_core"):
        peak = tp["peak_per_core"] * args.threads
    res["pp_peak_macs"] = peak
    for side in ("ours", "llamacpp", "untuned"):
        med = res[side + "_pp"]["median"]
        res[f"pp_peak_frac_{side}"] = med * res["pp_macs_per_token"] / peak if med and peak else None
    return res


def thread_scaling(eng, args):
    """TinyLlama decode only (pp 0) at 1 and 2 threads, alternated."""
    name, fname = MODEL_FILES["tinyllama"]
    path = os.path.join(args.models_dir, fname)
    out = {"model": name, "tg": args.tg, "ours": {"1": [], "2": []},
           "llamacpp": {"1": [], "2": []}}
    log(f"thread scaling: {name} tg{args.tg} at -t 1 and -t 2, {args.rounds} rounds")
    def last(side, t):
        return fmt(out[side][t][-1].get("tg")) if out[side][t] else "—"
    ours_pp, ours_ok = 0, True
    for r in range(args.rounds):
        for t in ("1", "2"):
            if ours_ok:
                s = eng.ours(path, int(t), ours_pp, args.tg)
                if "error" in s and ours_pp == 0:
                    # an engine that insists on a prompt: give it the smallest one
                    ours_pp = 1
                    s = eng.ours(path, int(t), ours_pp, args.tg)
                ours_ok = "error" not in s
                out["ours"][t].append(s)
            out["llamacpp"][t].append(eng.llama(path, int(t), 0, args.tg))
        log(f"  round {r + 1}/{args.rounds}: ours t1 {last('ours', '1')} t2 {last('ours', '2')}"
            f" | llama.cpp t1 {last('llamacpp', '1')} t2 {last('llamacpp', '2')}")
    for side in ("ours", "llamacpp"):
        m1 = summarise(out[side]["1"], "tg")["median"]
        m2 = summarise(out[side]["2"], "tg")["median"]
        out[side + "_median"] = {"1": m1, "2": m2, "speedup": ratio(m2, m1)}
    return out


def measure_bandwidth(args, reps):
    p = subprocess.run([args.membw, "-t", str(args.threads), "-r", str(reps)],
                       capture_output=True, text=True)
    m = re.search(r"threads=%d\s+best ([0-9.]+) GB/s" % args.threads, p.stdout)
    if p.returncode != 0 or not m:
        log(f"membw failed: {p.stdout.strip()} {p.stderr.strip()}")
        return None, p.stdout
    return float(m.group(1)), p.stdout.strip()


def markdown(results):
    a = results["settings"]
    pp, tg = f"pp{a['pp']}", f"tg{a['tg']}"
    lines = [
        f"Measured {results['date']} on {results['host']['cpu']} "
        f"({results['host']['cores']} cores), {a['threads']} threads, "
        f"medians of {a['rounds']} alternating rounds; llama.cpp {results['llamacpp']['commit']} "
        f"(llama-bench -fa {a['fa']}), switchboard binary built "
        f"{results['switchboard'].get('binary_built', '?')} (tree at run time: "
        f"{results['switchboard']['commit']}). "
        f"Memory read bandwidth ({a['threads']} threads) at the start: {fmt(results['membw_gbs'], 1)} GB/s; "
        f"the BW columns use each round's own measurement. "
        f"Load average (1/5/15 min) at start {results['load']['start']}, "
        f"at end {results['load']['end']}."
        + ("" if results.get("complete", True) else " **Incomplete run.**"),
    ]
    models = list(results["models"].values())
    if models:
        lines += ["", f"| model | file | ours {pp} | llama.cpp {pp} | {pp} ours/llama.cpp | "
        f"ours {pp} % of int8 peak | llama.cpp {pp} % of int8 peak | "
        f"ours {tg} | llama.cpp {tg} | {tg} ours/llama.cpp | ours {tg} % of BW limit | "
        f"llama.cpp {tg} % of BW limit | BW GB/s (min–max of rounds) | "
        f"ours {tg} % of interleaved limit | llama.cpp {tg} % of interleaved limit | "
        f"interleaved BW GB/s (median of rounds, min–max) | MB per token | load (1 min) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    def pct(x):
        return "—" if x is None else f"{100 * x:.0f}%"
    for m in models:
        lines.append(
            f"| {m['name']} | `{os.path.basename(m['file'])}` ({m['file_bytes'] / 2**30:.2f} GiB) | "
            f"{fmt(m['ours_pp']['median'])} | {fmt(m['llamacpp_pp']['median'])} | "
            f"{times(m['ratio_pp'])} | {pct(m.get('pp_peak_frac_ours'))} | {pct(m.get('pp_peak_frac_llamacpp'))} | "
            f"{fmt(m['ours_tg']['median'])} | "
            f"{fmt(m['llamacpp_tg']['median'])} | {times(m['ratio_tg'])} | "
            f"{pct(m['bw_frac_ours'])} | {pct(m['bw_frac_llamacpp'])} | "
            f"{fmt(m['bw_gbs']['min'], 1)}–{fmt(m['bw_gbs']['max'], 1)} | "
            f"{pct(m.get('bw_frac_int_ours'))} | {pct(m.get('bw_frac_int_llamacpp'))} | "
            f"{fmt(m.get('bw_int_gbs', {}).get('median'), 1)} ({fmt(m.get('bw_int_gbs', {}).get('min'), 1)}–"
            f"{fmt(m.get('bw_int_gbs', {}).get('max'), 1)}) | "
            f"{fmt((m.get('ours_bytes_per_token') or 0) / 1e6, 1)} | "
            f"{fmt(median([s['load1'] for s in m['ours'] + m['llamacpp']]), 1)} |")
    unt = [m for m in models if m.get("untuned")]
    if unt:
        bp = results["settings"].get("baseline_profile")
        base = f"the profile {bp}" if bp else "the built-in kernel choices"
        lines += ["", f"Ours with {base} (`SB_TUNE_PROFILE={bp or 'off'}`: "
                  "the untuned columns), in the same rounds "
                  "(before the tuned run in odd rounds, after it in even ones):", "",
                  f"| model | untuned {pp} | tuned {pp} | untuned {pp} % of int8 peak | tuned | "
                  f"untuned {tg} | tuned {tg} | untuned {tg} % of interleaved limit | tuned |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for m in unt:
            lines.append(f"| {m['name']} | {fmt(m['untuned_pp']['median'])} | {fmt(m['ours_pp']['median'])} | "
                         f"{pct(m.get('pp_peak_frac_untuned'))} | {pct(m.get('pp_peak_frac_ours'))} | "
                         f"{fmt(m['untuned_tg']['median'])} | {fmt(m['ours_tg']['median'])} | "
                         f"{pct(m.get('bw_frac_int_untuned'))} | {pct(m.get('bw_frac_int_ours'))} |")
        lines += ["", "Per round, tuned / untuned: " + "; ".join(
            f"{m['name']} pp " + ", ".join(f"{fmt(a_.get('pp'), 1)}/{fmt(b_.get('pp'), 1)}" for a_, b_ in zip(m["ours"], m["untuned"]))
            + "; tg " + ", ".join(f"{fmt(a_.get('tg'))}/{fmt(b_.get('tg'))}" for a_, b_ in zip(m["ours"], m["untuned"]))
            for m in unt) + "."]
    ts = results.get("thread_scaling")
    if ts:
        o, l = ts["ours_median"], ts["llamacpp_median"]
        lines += ["", f"Thread scaling, {ts['model']} tg{ts['tg']} (tokens/s): "
                  f"ours {fmt(o['1'])} (-t 1) → {fmt(o['2'])} (-t 2), {times(o['speedup'])}; "
                  f"llama.cpp {fmt(l['1'])} → {fmt(l['2'])}, {times(l['speedup'])}."]
    errs = [f"{m['name']}: {s['error']}" for m in models
            for s in m["ours"] + m["llamacpp"] + m.get("untuned", []) if "error" in s]
    if errs:
        lines += ["", "Errors: " + "; ".join(sorted(set(errs)))]
    tp = results.get("tune_profile")
    if models:
        all_t = tp and tp.get("peak_all_threads") and tp.get("threads") == a["threads"]
        lines += ["", ("int8 peak: " + (f"{fmt(tp['peak_per_core'] / 1e9, 1)} G multiply-adds/s per core "
                                        f"({tp['gemm_family']}, the gemm's family); "
                                        + (f"{fmt(tp['peak_all_threads'] / 1e9, 1)} G/s with {a['threads']} "
                                           "threads at once, the columns' peak; " if all_t else
                                           f"× {a['threads']} threads, the columns' peak; ") +
                                        f"measured by `switchboard tune` {tp.get('date')} (`{tp['path']}`, "
                                        f"plan {json.dumps(tp.get('plan'), separators=(',', ':'))}); "
                                        if tp and tp.get("peak_per_core") else
                                        "no tuning profile, so no int8-peak columns (run `switchboard tune`); ")
                       + "multiply-adds per prompt token: "
                       + ", ".join(f"{m['name']} {fmt((m.get('pp_macs_per_token') or 0) / 1e9, 2)} G" for m in models)
                       + ".")]
        hp = [(m["name"], median([x["huge_page_frac"] for x in m["ours"] if x.get("huge_page_frac") is not None]))
              for m in models]
        lines += ["", "The file on 2 MiB pages (ours' reading, median of rounds): "
                  + ", ".join(f"{n} {pct(f)}" for n, f in hp) + "."]
        lines += ["", "Bytes per token for the bandwidth limit: "
                  + ", ".join(f"{m['name']} ours {mib(m['ours_weight_bytes'])}"
                              f" / llama.cpp {mib(m['llama_weight_bytes'])}"
                              for m in models) + "."]
    return "\n".join(lines) + "\n"


def save_as(results, out_dir, stem, render, quiet=False):
    """STEM.json (every sample) and STEM.md (render(results)) in out_dir."""
    results["load"]["end"] = loadavg()
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(results, f, indent=1)
    md = render(results)
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write(md)
    if not quiet:
        print()
        print(md)
        log(f"wrote {os.path.join(out_dir, stem + '.json')} and {stem}.md")


def save(results, out_dir, quiet=False):
    save_as(results, out_dir, "results", markdown, quiet)


def git_commit():
    try:
        # --dirty: the binary is built from the working tree, which others
        # change all the time; say so instead of naming a clean commit
        return subprocess.run(["git", "-C", REPO_ROOT, "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sb", required=True, help="switchboard binary")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--membw", required=True)
    ap.add_argument("--llama-commit", default="?")
    ap.add_argument("--models", default="tinyllama,phi3,llama3")
    ap.add_argument("--models-dir", default=os.path.join(REPO_ROOT, "models", "bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fa", default="0", help="llama-bench -fa (we have no flash attention)")
    ap.add_argument("--membw-reps", type=int, default=10, help="passes per reader at the start")
    ap.add_argument("--membw-round-reps", type=int, default=4, help="passes per reader in each round")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--untuned", action="store_true",
                    help="also run ours with SB_TUNE_PROFILE=off in every round (tuned against untuned)")
    ap.add_argument("--baseline-profile", metavar="FILE",
                    help="with --untuned: the second run of ours uses this profile instead of none "
                         "(an A/B of two plans in the same rounds)")
    ap.add_argument("--no-interleaved-bw", action="store_true",
                    help="do not pass --membw to switchboard bench (binaries without it)")
    ap.add_argument("--scaling-only", action="store_true",
                    help="only the TinyLlama -t 1 vs -t 2 decode comparison")
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "build", "bench"))
    args = ap.parse_args()
    args.tune = tune_profile()
    keys = [k for k in args.models.split(",") if k]
    for k in keys:
        if k not in MODEL_FILES:
            sys.exit(f"compare: unknown model {k!r} (known: {', '.join(MODEL_FILES)})")
    os.makedirs(args.out, exist_ok=True)

    results = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "host": {"cpu": cpu_name(), "cores": os.cpu_count()},
        "llamacpp": {"commit": args.llama_commit, "llama_bench": args.llama_bench,
                     "command": " ".join(Engines(args).llama_cmd("FILE", args.threads, args.pp, args.tg))},
        "switchboard": {"commit": git_commit(), "binary": args.sb,
                        # the tree's commit says little about a --sb binary
                        # built earlier; its build time does
                        "binary_built": datetime.datetime.fromtimestamp(
                            os.path.getmtime(args.sb)).strftime("%Y-%m-%d %H:%M"),
                        "command": " ".join(Engines(args).ours_cmd("FILE", args.threads, args.pp, args.tg))},
        "settings": {"threads": args.threads, "pp": args.pp, "tg": args.tg,
                     "rounds": args.rounds, "fa": args.fa, "untuned": args.untuned,
                     "baseline_profile": args.baseline_profile},
        "load": {"start": loadavg()},
        "tune_profile": args.tune,
        "models": {},
    }
    bw, raw = measure_bandwidth(args, args.membw_reps)
    results["membw_gbs"], results["membw_raw"] = bw, raw
    log(f"memory read bandwidth ({args.threads} threads, best of {args.membw_reps}): {fmt(bw, 1)} GB/s")
    eng = Engines(args)
    # Save after every model: a run stopped half-way (a busy machine makes
    # Llama-3 take hours) still leaves the finished models' table.
    results["complete"] = False
    for k in ([] if args.scaling_only else keys):
        results["models"][k] = bench_model(k, eng, args)
        save(results, args.out, quiet=True)
    if ("tinyllama" in keys or args.scaling_only) and not args.no_scaling:
        results["thread_scaling"] = thread_scaling(eng, args)
    results["complete"] = True
    save(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
