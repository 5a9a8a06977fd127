#!/usr/bin/env python3
"""Our RAG pipeline against the Python baseline, at fixed concurrency.

    tests/bench/rag_bench.py --sb bin/switchboard [--concurrency 10] [--requests 200]
        [--rounds 3] [--max-tokens 64] [--stream-requests 40] [--c1-requests 20]
        [--py-workers 1] [--py-threads N] [--py-embed-threads N] [--out build/rag_bench] [--quick]

Run by tools/rag_bench.sh with the bench venv's Python (which has
llama-cpp-python, chromadb, FastAPI, uvicorn; tests/bench/python_rag/).

  1. prepare: our base (switchboard kb add examples/kb/*.md into OUT/policy.sqlite),
     its chunks exported to OUT/passages.jsonl and ingested into the
     baseline's store (python_rag/ingest.py: llama.cpp embeddings, chromadb,
     FTS5), so both stacks search the same passages;
  2. rounds: each stack in turn, started alone (the other stopped: PSS then
     counts the shared model pages once per stack), the order alternating;
     per stack and round:
       warm-up   --concurrency calls, not measured;
       main      every question of the shuffled list through
                 POST /v1/pipelines/NAME, closed loop at --concurrency;
       stream    the first --stream-requests questions through the OpenAI
                 door (model pipeline:NAME, stream: true) at --concurrency:
                 time to the first token (ours has no stream on the pipeline door);
       c1        the first --c1-requests questions, one at a time;
     summed PSS of the stack's processes (/proc/PID/smaps_rollup, every
     200 ms) and their CPU time (/proc/PID/stat utime+stime) per phase;
  3. answers: the main pass's answers of both stacks compared question by
     question; a differing one is put down to retrieval (other passages),
     the prompt (other prompt tokens: template or tokenizer) or decoding
     (same prompt token ids, other tokens out);
  4. OUT/results.json (every call) and OUT/results.md, and the last line
     `rag p99 ours X s, python Y s, ratio Y/X; rss ours A MB, python B MB`.

Exit status: 0 when every call of every pass was answered (200), 1 if some
failed, 2 on bad arguments or a stack that would not start.
"""
import argparse
import datetime
import http.client
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "python_rag"))
sys.path.insert(0, os.path.dirname(HERE))
import itlib  # noqa: E402
import rag as pyrag  # noqa: E402  (the prompt rendering, for the diagnosis)

PIPELINE = "rag"
RETRIEVE = "docs"       # the retrieve stage's name, set from the config in main()
MB = 1 << 20
CLK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print(*a, flush=True)


def pct(xs, p):
    """Nearest-rank percentile (common/'s sb_percentile)."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(1, -(-len(s) * p // 100))
    return s[int(k) - 1]


# --------------------------------------------------------------- /proc

def proc_tree(root):
    """root and its descendants, from /proc/*/stat's ppid."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


PSS_KEYS = ("Pss:", "Pss_Anon:", "Pss_File:", "Pss_Shmem:")


def pss_kb(pid):
    """{Pss, Pss_Anon, Pss_File, Pss_Shmem} of pid in kB (zeros when gone):
    the file part is mostly the mapped model pages, which both stacks share
    the same way; the anonymous part is what each stack allocates."""
    got = {k[:-1]: 0 for k in PSS_KEYS}
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith(PSS_KEYS):
                    k, v = line.split()[:2]
                    got[k[:-1]] = int(v)
    except OSError:
        pass
    return got


def mappings(pid, top=12):
    """What pid's PSS is made of, from /proc/PID/smaps: (the largest
    anonymous mappings by resident kB, [{"kb": size, "rss_kb", "name"}]
    - the KV pool, scratch buffers, the heap -; the file PSS per mapped
    file, [{"pss_kb", "name"}] - the models' pages, code). Read only when
    the stack reaches a new peak, not every sample."""
    maps, files, rss, cur = [], {}, {}, None
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                head = line.split()
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    name = head[5] if len(head) > 5 else ""
                    cur = {"kb": (hi - lo) // 1024, "rss_kb": 0, "name": name or "(anon)"}
                    maps.append(cur)
                elif head and head[0] == "Anonymous:" and cur is not None:
                    cur["rss_kb"] = int(head[1])
                    if cur["name"].startswith("/"):     # a file's private copies (relocations): not file pages
                        files[cur["name"]] = files.get(cur["name"], 0) - int(head[1])
                elif head and head[0] == "Pss:" and cur is not None and cur["name"].startswith("/"):
                    files[cur["name"]] = files.get(cur["name"], 0) + int(head[1])
                elif head and head[0] == "Rss:" and cur is not None and cur["name"].startswith("/"):
                    rss[cur["name"]] = rss.get(cur["name"], 0) + int(head[1])
    except OSError:
        return [], []
    maps = [m for m in maps if m["rss_kb"]]
    maps.sort(key=lambda m: -m["rss_kb"])
    rest = sum(m["rss_kb"] for m in maps[top:])
    anon = maps[:top] + ([{"kb": 0, "rss_kb": rest, "name": "(%d smaller)" % (len(maps) - top)}] if rest else [])
    # rss_kb above pss_kb: another process maps the same pages (someone's
    # worker on the same model) and PSS gives it its share.
    by_file = sorted(({"pss_kb": v, "rss_kb": rss.get(k, 0), "name": k} for k, v in files.items() if v),
                     key=lambda m: -m["pss_kb"])
    rest = sum(m["pss_kb"] for m in by_file[4:])
    return anon, by_file[:4] + ([{"pss_kb": rest, "name": "(%d more files)" % (len(by_file) - 4)}] if rest else [])


def proc_name(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in argv if w]
    if len(words) > 2 and words[1] == "worker" and "--name" in words:
        return "worker " + words[words.index("--name") + 1]
    return " ".join(os.path.basename(w) for w in words[:2])


def cpu_s(pids):
    """utime + stime (and reaped children's) of pids, seconds."""
    t = 0
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                st = f.read()
        except OSError:
            continue
        fl = st[st.rindex(")") + 2:].split()
        t += int(fl[11]) + int(fl[12]) + int(fl[13]) + int(fl[14])
    return t / CLK


class Sampler(threading.Thread):
    """Summed PSS of a process tree every `period` s; peak per phase."""

    def __init__(self, root, period=0.2):
        super().__init__(daemon=True)
        self.root, self.period = root, period
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.peak_kb = 0
        self.at_peak = None         # the stack's split at its highest total, over the whole run
        self.pids = proc_tree(root)
        self.n = 0

    def run(self):
        while not self.stop_ev.is_set():
            if self.n % 10 == 0:        # the tree is stable once up; refresh now and then
                self.pids = proc_tree(self.root)
            each = {p: pss_kb(p) for p in self.pids}
            total = sum(v["Pss"] for v in each.values())
            with self.lock:
                self.peak_kb = max(self.peak_kb, total)
                if not self.at_peak or total > self.at_peak["total_mb"] * 1024:
                    self.at_peak = {"total_mb": total / 1024,
                                    "anon_mb": sum(v["Pss_Anon"] for v in each.values()) / 1024,
                                    "file_mb": sum(v["Pss_File"] for v in each.values()) / 1024,
                                    "shmem_mb": sum(v["Pss_Shmem"] for v in each.values()) / 1024,
                                    "processes": [{"name": proc_name(p), "pss_mb": v["Pss"] / 1024,
                                                   "anon_mb": v["Pss_Anon"] / 1024, "file_mb": v["Pss_File"] / 1024,
                                                   **dict(zip(("anon_maps", "file_maps"), mappings(p)))}
                                                  for p, v in each.items() if v["Pss"]]}
            self.n += 1
            self.stop_ev.wait(self.period)

    def take_peak(self):
        with self.lock:
            p, self.peak_kb = self.peak_kb, 0
        return p

    def stop(self):
        self.stop_ev.set()
        self.join()


# ----------------------------------------------------------------- calls

def post(conn, path, body, stream):
    """One call on a kept-alive connection: (status, reply dict or None,
    ttft s or None, answer text, error)."""
    data = json.dumps(body, ensure_ascii=False).encode()
    t0 = time.perf_counter()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if not stream or r.status != 200:
        raw = r.read()
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        err = None if r.status == 200 else raw[:300].decode("utf-8", "replace")
        return r.status, doc, None, (doc or {}).get("output") if r.status == 200 else None, err
    ttft, parts = None, []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            r.read()
            break
        ch = json.loads(payload)
        piece = (ch.get("choices") or [{}])[0].get("delta", {}).get("content")
        if piece:
            if ttft is None:
                ttft = time.perf_counter() - t0
            parts.append(piece)
    return r.status, None, ttft, "".join(parts), None


def closed_loop(port, questions, concurrency, stream=False):
    """Every question once, `concurrency` callers each sending its next
    question when its last one is answered. Per call: index, latency,
    ttft, status, answer, passages, usage, error."""
    results = [None] * len(questions)
    nxt = [0]
    lock = threading.Lock()

    def caller():
        conn = None
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(questions):
                break
            q = questions[i]
            if stream:
                path, body = "/v1/chat/completions", {"model": "pipeline:" + PIPELINE, "stream": True,
                                                      "messages": [{"role": "user", "content": q}]}
            else:
                path, body = "/v1/pipelines/" + PIPELINE, {"input": q}
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
                status, doc, ttft, answer, err = post(conn, path, body, stream)
            except (OSError, http.client.HTTPException, ValueError) as e:
                status, doc, ttft, answer, err = 0, None, None, None, "%s: %s" % (type(e).__name__, e)
                conn.close()
                conn = None
            lat = time.perf_counter() - t0
            rec = {"i": i, "q": q, "latency_s": lat, "status": status, "answer": answer}
            if ttft is not None:
                rec["ttft_s"] = ttft
            if err:
                rec["error"] = err
            if doc:
                st = {s["name"]: s for s in doc.get("stages", [])}
                docs = st.get(RETRIEVE, {}).get("json") or {}
                rec["passages"] = [[p["source"], p["section"], p["text"]] for p in docs.get("passages", [])]
                rec["usage"] = doc.get("usage")
                rec["stage_ms"] = {x["name"]: x.get("ms") for x in doc.get("stages", [])}
            results[i] = rec
        if conn is not None:
            conn.close()

    t0 = time.perf_counter()
    ths = [threading.Thread(target=caller) for _ in range(min(concurrency, len(questions)))]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return results, time.perf_counter() - t0


def summarize(results, wall, cpu, peak_kb):
    ok = [r for r in results if r["status"] == 200]
    lat = [r["latency_s"] for r in ok]
    ttft = [r["ttft_s"] for r in ok if "ttft_s" in r]
    s = {"requests": len(results), "ok": len(ok), "wall_s": wall,
         "throughput_rps": len(ok) / wall if wall > 0 else None,
         "p50_s": pct(lat, 50), "p95_s": pct(lat, 95), "p99_s": pct(lat, 99), "max_s": max(lat) if lat else None,
         "cpu_s": cpu, "cpu_s_per_request": cpu / len(ok) if ok else None, "peak_pss_mb": peak_kb / 1024}
    if ttft:
        s.update(ttft_p50_s=pct(ttft, 50), ttft_p95_s=pct(ttft, 95), ttft_p99_s=pct(ttft, 99))
    return s


# ---------------------------------------------------------------- stacks

class Stack:
    """One stack's process tree, started alone and stopped after its phases."""

    def __init__(self, name, argv, env, port, log_path, ready_factory):
        self.name, self.argv, self.env, self.port = name, argv, env, port
        self.log_path, self.ready_factory = log_path, ready_factory
        self.proc = None

    def start(self, timeout=600):
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self.logf, stderr=subprocess.STDOUT,
                                     cwd=REPO, start_new_session=True)
        t0, ready = time.time(), self.ready_factory()     # a fresh check for each start
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with status %s during start-up (log: %s)"
                                   % (self.name, self.proc.returncode, self.log_path))
            if ready(self.port):
                return time.time() - t0
            time.sleep(0.25)
        raise RuntimeError("%s not ready after %d s (log: %s)" % (self.name, timeout, self.log_path))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.logf.close()


def http_get_json(port, path):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return json.loads(body) if r.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None


def ours_ready(port):
    h = http_get_json(port, "/health")
    return bool(h) and h.get("status") == "ok" and all(m.get("status") == "up" for m in h["models"].values())


def python_ready_factory(workers):
    """A check that is true once /health was answered by `workers`
    different uvicorn worker processes of this start."""
    def factory():
        seen = set()

        def ready(port):
            h = http_get_json(port, "/health")
            if h:
                seen.add(h.get("pid"))
            return len(seen) >= workers
        return ready
    return factory


# --------------------------------------------------------------- prepare

def derive_config(src, dst, run_dir, kb_path, port, max_tokens):
    """Our config with its runtime dir, port, base path and the answer's
    max_tokens replaced, and the relative paths made absolute."""
    base = os.path.dirname(os.path.abspath(src))
    out = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            line = re.sub(r"^  dir: .*", "  dir: " + run_dir, line)
            line = re.sub(r"^  http: .*", "  http: 127.0.0.1:%d" % port, line)
            line = re.sub(r"^(        max_tokens: )\d+", lambda m: m.group(1) + str(max_tokens), line)
            line = re.sub(r"^(  policy: \{ path: )[^,]+", lambda m: m.group(1) + kb_path, line)
            line = line.replace("../../", os.path.normpath(os.path.join(base, "../..")) + "/")
            out.append(line)
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(out)


def export_passages(kb_path, dst):
    db = sqlite3.connect("file:%s?mode=ro" % kb_path, uri=True)
    rows = db.execute("SELECT c.id, d.source, c.section, c.pos, c.text FROM chunks c JOIN docs d ON d.id = c.doc_id "
                      "ORDER BY c.id").fetchall()
    db.close()
    with open(dst, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(dict(zip(("id", "source", "section", "pos", "text"), r)), ensure_ascii=False) + "\n")
    return len(rows)


def read_questions(path, n, seed):
    qs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            lang, source, q = line.rstrip("\n").split("\t")
            qs.append(q)
    rng = random.Random(seed)
    rng.shuffle(qs)
    # More calls than questions: the list again, each question with a
    # caller's preamble, so no two calls send the same text.
    pre_en = ["Hello, ", "Hi, quick question: ", "Good morning. ", "Excuse me, "]
    pre_zh = ["您好，", "你好，请问", "麻烦问一下，", "打扰一下，"]
    out, k = [], 0
    while len(out) < n:
        for q in qs:
            if len(out) == n:
                break
            if k == 0:
                out.append(q)
            else:
                zh = any("\u4e00" <= ch <= "\u9fff" for ch in q)
                out.append((pre_zh if zh else pre_en)[(k - 1) % 4] + q)
        k += 1
    return out


# ------------------------------------------------------------- diagnosis

def same_passages(a, b):
    return a.get("passages") == b.get("passages")


def our_prompt_ids(sb, gguf, msgs, tmp):
    req = os.path.join(tmp, "chat_req.json")
    with open(req, "w", encoding="utf-8") as f:
        json.dump({"messages": msgs}, f, ensure_ascii=False)
    prompt = subprocess.run([sb, "chat-prompt", "-m", gguf, "-f", req], capture_output=True, check=True).stdout
    pf = os.path.join(tmp, "prompt.txt")
    with open(pf, "wb") as f:
        f.write(prompt)
    ids = subprocess.run([sb, "tokenize", "-m", gguf, "-f", pf], capture_output=True, check=True, text=True).stdout
    return prompt.decode("utf-8"), [int(x) for x in ids.split()]


def tokenize_text(sb, gguf, text):
    out = subprocess.run([sb, "tokenize", "-m", gguf, "--no-bos", "--no-special", "-p", text], capture_output=True,
                         check=True, text=True).stdout
    return [int(x) for x in out.split()]


def divergence(sb, gguf, prompt_ids, ours, py):
    """Where two answers to the same prompt part, in tokens, and how close
    our engine's top two logits are there: a near tie that the two engines'
    rounding can tip either way, or a real difference."""
    oi, pi = tokenize_text(sb, gguf, ours or ""), tokenize_text(sb, gguf, py or "")
    k = common_prefix(oi, pi)
    ids = prompt_ids + oi[:k]
    out = subprocess.run([sb, "logits", "-m", gguf, "--ids", ",".join(map(str, ids)), "-n", "0", "--top", "2",
                          "-c", str(len(ids) + 1)], capture_output=True, check=True, text=True).stdout
    (t1, l1), (t2, l2) = json.loads(out)["positions"][-1]["top"]
    return {"token": k, "ours_token": oi[k] if k < len(oi) else None, "python_token": pi[k] if k < len(pi) else None,
            "ours_top2": [t1, t2], "ours_top2_gap": round(l1 - l2, 4)}


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def diagnose(ours, py, port, a, pipe):
    """Why the answers of the main pass differ, question by question (up to
    --diagnose of them asked again with debug: the baseline's prompt ids)."""
    rows, asked = [], 0
    for o, p in zip(ours, py):
        if o["status"] != 200 or p["status"] != 200 or o["answer"] == p["answer"]:
            continue
        row = {"i": o["i"], "q": o["q"], "ours": o["answer"], "python": p["answer"],
               "same_passages": same_passages(o, p),
               "prompt_tokens": [o["usage"]["prompt_tokens"], p["usage"]["prompt_tokens"]],
               "common_prefix_chars": common_prefix(o["answer"] or "", p["answer"] or "")}
        if not row["same_passages"]:
            row["cause"] = "retrieval"
        elif row["prompt_tokens"][0] != row["prompt_tokens"][1]:
            row["cause"] = "prompt"
        else:
            row["cause"] = "decoding"
        if row["same_passages"] and asked < a.diagnose:
            asked += 1
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
            _, doc, _, _, err = post(c, "/v1/pipelines/" + PIPELINE,
                                     {"input": o["q"], "until": RETRIEVE, "debug": True}, False)
            c.close()
            if doc and doc.get("debug"):
                hits = [{"source": s, "section": sec, "text": t} for s, sec, t in o["passages"]]
                msgs = [{"role": "system", "content": pipe.system}] if pipe.system else []
                msgs.append({"role": "user", "content": pipe.render(pyrag.passages_text(hits), o["q"])})
                _, ids = our_prompt_ids(a.sb, pipe.gen_model["gguf"], msgs, a.out)
                pids = doc["debug"]["prompt_ids"]
                row["same_messages"] = msgs == doc["debug"]["messages"]
                row["same_prompt_ids"] = ids == pids
                row["first_prompt_id_difference"] = common_prefix(ids, pids) if ids != pids else None
                if ids != pids:
                    row["cause"] = "prompt"
                else:
                    row["divergence"] = divergence(a.sb, pipe.gen_model["gguf"], ids, o["answer"], p["answer"])
        rows.append(row)
    return rows


# ------------------------------------------------------------------ main

def run_phase(stack, sampler, pids_fn, port, questions, conc, stream):
    cpu0 = cpu_s(pids_fn())
    sampler.take_peak()
    res, wall = closed_loop(port, questions, conc, stream)
    peak = sampler.take_peak()
    cpu = cpu_s(pids_fn()) - cpu0
    bad = [r for r in res if r["status"] != 200]
    if bad:
        log("  %d of %d calls failed; the first: status %s, %s" % (len(bad), len(res), bad[0]["status"],
                                                                  bad[0].get("error")))
    return res, summarize(res, wall, cpu, peak)


def measure_stack(stack, a, questions, out, rnd):
    log("\n== round %d: %s" % (rnd, stack.name))
    up_s = stack.start()
    sampler = Sampler(stack.proc.pid)
    sampler.start()
    pids = lambda: proc_tree(stack.proc.pid)  # noqa: E731
    rec = {"round": rnd, "stack": stack.name, "startup_s": up_s, "load_before": os.getloadavg()[0], "phases": {}}
    try:
        closed_loop(stack.port, questions[:a.concurrency], a.concurrency)          # warm-up
        res, s = run_phase(stack, sampler, pids, stack.port, questions, a.concurrency, False)
        rec["phases"]["main"] = dict(s, calls=res)
        log("  main   c=%d n=%d: p50 %.2f p95 %.2f p99 %.2f max %.2f s, %.2f req/s, cpu %.2f s/req, "
            "peak PSS %.0f MB, %.0f s" % (a.concurrency, len(res), s["p50_s"] or 0, s["p95_s"] or 0, s["p99_s"] or 0,
                                          s["max_s"] or 0, s["throughput_rps"] or 0, s["cpu_s_per_request"] or 0,
                                          s["peak_pss_mb"], s["wall_s"]))
        if a.stream_requests:
            res, s = run_phase(stack, sampler, pids, stack.port, questions[:a.stream_requests], a.concurrency, True)
            rec["phases"]["stream"] = dict(s, calls=res)
            log("  stream c=%d n=%d: ttft p50 %.2f p95 %.2f s, latency p50 %.2f p99 %.2f s"
                % (a.concurrency, len(res), s.get("ttft_p50_s") or 0, s.get("ttft_p95_s") or 0, s["p50_s"] or 0,
                   s["p99_s"] or 0))
        if a.c1_requests:
            res, s = run_phase(stack, sampler, pids, stack.port, questions[:a.c1_requests], 1, False)
            rec["phases"]["c1"] = dict(s, calls=res)
            log("  c1     n=%d: p50 %.2f p95 %.2f s, cpu %.2f s/req" % (len(res), s["p50_s"] or 0, s["p95_s"] or 0,
                                                                        s["cpu_s_per_request"] or 0))
        rec["peak_pss_mb"] = max(sampler.take_peak() / 1024,
                                 max(p["peak_pss_mb"] for p in rec["phases"].values()))
        rec["pss_at_peak"] = sampler.at_peak
        if stack.name == "python" and a.diagnose and out.get("ours_main"):
            rec["diagnosis"] = diagnose(out["ours_main"], rec["phases"]["main"]["calls"], stack.port, a,
                                        out["pipe"])
    finally:
        sampler.stop()
        stack.stop()
    rec["load_after"] = os.getloadavg()[0]
    return rec


def pooled(recs, stack, phase, key="latency_s"):
    return [c[key] for r in recs if r["stack"] == stack and phase in r["phases"]
            for c in r["phases"][phase]["calls"] if c["status"] == 200 and key in c]


def report(a, recs, diag, equality, meta):
    lines = ["# RAG benchmark: ours against the Python baseline", "",
             "%s; %d questions, concurrency %d, %d round(s), max_tokens %d; load average at start %.1f" %
             (meta["started"], a.requests, a.concurrency, a.rounds, a.max_tokens, meta["load_start"]), "",
             "%s, %d cores, kernel %s; tree %s; baseline %s" % (
                 meta["cpu"], meta["cpus"], meta["kernel"], meta["commit"],
                 ", ".join("%s %s" % kv for kv in meta["packages"].items())), "",
             "| stack | pass | calls | P50 s | P95 s | P99 s | max s | TTFT P50 s | TTFT P95 s | req/s | CPU s/req | peak PSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = {}
    split_lines = []
    for stack in ("ours", "python"):
        for phase in ("main", "stream", "c1"):
            lat = pooled(recs, stack, phase)
            if not lat:
                continue
            ttft = pooled(recs, stack, phase, "ttft_s")
            ph = [r["phases"][phase] for r in recs if r["stack"] == stack and phase in r["phases"]]
            ok = sum(p["ok"] for p in ph)
            s = {"calls": ok, "p50_s": pct(lat, 50), "p95_s": pct(lat, 95), "p99_s": pct(lat, 99), "max_s": max(lat),
                 "ttft_p50_s": pct(ttft, 50), "ttft_p95_s": pct(ttft, 95),
                 "throughput_rps": ok / sum(p["wall_s"] for p in ph),
                 "cpu_s_per_request": sum(p["cpu_s"] for p in ph) / ok if ok else None,
                 "peak_pss_mb": max(p["peak_pss_mb"] for p in ph),
                 "p99_per_round_s": [p["p99_s"] for p in ph]}
            summary.setdefault(stack, {})[phase] = s
            f = lambda x, d=2: "-" if x is None else "%.*f" % (d, x)  # noqa: E731
            lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %.0f |" % (
                stack, {"main": "c=%d" % a.concurrency, "stream": "c=%d stream" % a.concurrency, "c1": "c=1"}[phase],
                ok, f(s["p50_s"]), f(s["p95_s"]), f(s["p99_s"]), f(s["max_s"]), f(s["ttft_p50_s"]), f(s["ttft_p95_s"]),
                f(s["throughput_rps"]), f(s["cpu_s_per_request"]), s["peak_pss_mb"]))
        peaks = [r["peak_pss_mb"] for r in recs if r["stack"] == stack]
        if peaks:
            summary[stack]["peak_pss_mb"] = max(peaks)
        splits = [r["pss_at_peak"] for r in recs if r["stack"] == stack and r.get("pss_at_peak")]
        if splits:
            top = max(splits, key=lambda x: x["total_mb"])
            summary[stack]["pss_at_peak"] = top
            split_lines.append("- %s at its peak: %.0f MB = file %.0f MB (mapped model pages and code) + anonymous "
                               "%.0f MB + shmem %.0f MB; %s" % (
                                   stack, top["total_mb"], top["file_mb"], top["anon_mb"], top["shmem_mb"],
                                   ", ".join("%s %.0f (anon %.0f)" % (q["name"], q["pss_mb"], q["anon_mb"])
                                             for q in sorted(top["processes"], key=lambda q: -q["pss_mb"]))))
            for q in sorted(top["processes"], key=lambda q: -q["pss_mb"]):
                if q.get("anon_maps"):
                    split_lines.append("  - %s, anonymous mappings (resident / mapped MB): %s" % (
                        q["name"], ", ".join("%s %.1f/%.1f" % (m["name"], m["rss_kb"] / 1024, m["kb"] / 1024)
                                             for m in q["anon_maps"])))
                if q.get("file_maps"):
                    split_lines.append("  - %s, file PSS (MB; RSS when pages are shared with other processes): %s" % (
                        q["name"], ", ".join("%s %.1f%s" % (os.path.basename(m["name"]), m["pss_kb"] / 1024,
                                                           " (RSS %.1f)" % (m["rss_kb"] / 1024)
                                                           if m.get("rss_kb", 0) > m["pss_kb"] * 1.02 + 256 else "")
                                             for m in q["file_maps"])))
    lines += ["", "Stream: the OpenAI door (`model: pipeline:%s`, `stream: true`) on both; ours' pipeline door "
              "does not stream. Peak PSS: summed over the stack's processes, every 200 ms, highest of all passes." % PIPELINE,
              ""] + split_lines + [
              "", "Answers (main pass, round 1 of each): %d of %d identical (%.1f %%); differing: %s" % (
                  equality["same"], equality["compared"], 100.0 * equality["same"] / max(1, equality["compared"]),
                  ", ".join("%s %d" % kv for kv in sorted(equality["causes"].items())) or "none")]
    if diag:
        lines += ["", "| # | question | cause | same passages | prompt tokens ours/python | same prompt ids | "
                  "parts at token | ours' top-2 logit gap there |", "|---|---|---|---|---|---|---|---|"]
        for d in diag[:40]:
            dv = d.get("divergence") or {}
            lines.append("| %d | %s | %s | %s | %d/%d | %s | %s | %s |" % (
                d["i"], d["q"].replace("|", "\\|"), d["cause"], d["same_passages"], d["prompt_tokens"][0],
                d["prompt_tokens"][1], d.get("same_prompt_ids", "-"), dv.get("token", "-"),
                dv.get("ours_top2_gap", "-")))
    return lines, summary


def machine():
    """What the figures were taken on: CPU, cores, kernel, our commit and
    the baseline's package versions."""
    from importlib import metadata
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        commit = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = ""
    versions = {}
    for pkg in ("llama_cpp_python", "chromadb", "fastapi", "uvicorn", "numpy"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": os.uname().release, "commit": commit,
            "python": sys.version.split()[0], "packages": versions}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--sb", default=os.path.join(REPO, "bin", "switchboard"))
    ap.add_argument("--config", default=os.path.join(HERE, "rag_bench.yaml"))
    ap.add_argument("--questions", default=os.path.join(HERE, "rag_questions.tsv"))
    ap.add_argument("--out", default=os.path.join(REPO, "build", "rag_bench"))
    ap.add_argument("--concurrency", type=int, help="callers at once (default 10)")
    ap.add_argument("--requests", type=int, help="calls of the main pass (default 200)")
    ap.add_argument("--rounds", type=int, help="rounds, the stacks' order alternating (default 3)")
    ap.add_argument("--max-tokens", type=int, help="the answer's max_tokens (default 64)")
    ap.add_argument("--stream-requests", type=int, help="calls of the streamed pass (default 40; 0: none)")
    ap.add_argument("--c1-requests", type=int, help="calls of the one-at-a-time pass (default 20; 0: none)")
    ap.add_argument("--py-workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--py-threads", type=int, default=None, help="the baseline's generator threads (default: the config's)")
    ap.add_argument("--py-embed-threads", type=int, default=None,
                    help="the baseline's encoder threads (default: the config's)")
    ap.add_argument("--diagnose", type=int, help="differing answers whose prompt ids are compared (default 20)")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--only", choices=("ours", "python"), help="measure one stack only")
    ap.add_argument("--quick", action="store_true",
                    help="defaults of a smoke run: 20 calls, concurrency 4, 1 round, max_tokens 16, 8 streamed, 4 alone")
    a = ap.parse_args()
    defaults = dict(concurrency=10, requests=200, rounds=3, max_tokens=64, stream_requests=40, c1_requests=20,
                    diagnose=20)
    if a.quick:
        defaults.update(concurrency=4, requests=20, rounds=1, max_tokens=16, stream_requests=8, c1_requests=4,
                        diagnose=5)
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    for k in ("concurrency", "requests", "rounds", "max_tokens", "py_workers"):
        if getattr(a, k) < 1:
            ap.error("--%s must be at least 1" % k.replace("_", "-"))
    for k in ("stream_requests", "c1_requests", "diagnose"):
        if getattr(a, k) < 0:
            ap.error("--%s must be 0 or more" % k.replace("_", "-"))
    if not os.access(a.sb, os.X_OK):
        ap.error("%s is not an executable (build it: make)" % a.sb)
    a.out = os.path.abspath(a.out)
    return a


def prepare(a, port_ours):
    """Our config and base, and the baseline's store filled with the same
    passages: (our config's path, the pipeline, the baseline's store dir)."""
    global RETRIEVE
    cfg = os.path.join(a.out, "ours.yaml")
    kb = os.path.join(a.out, "policy.sqlite")
    derive_config(a.config, cfg, os.path.join(a.out, "run"), kb, port_ours, a.max_tokens)
    pipe = pyrag.Pipeline(cfg, PIPELINE)
    RETRIEVE = pipe.retrieve["name"]
    for f in (kb, kb + "-wal", kb + "-shm"):
        if os.path.exists(f):
            os.unlink(f)
    log("prepare: switchboard kb add examples/kb/*.md")
    kb_dir = os.path.join(REPO, "examples", "kb")
    docs = sorted(os.path.join(kb_dir, f) for f in os.listdir(kb_dir) if f.endswith(".md"))
    subprocess.run([a.sb, "kb", "add", "-c", cfg, "--quiet"] + docs, check=True)
    passages = os.path.join(a.out, "passages.jsonl")
    n = export_passages(kb, passages)
    store = os.path.join(a.out, "pystore")
    if a.only == "ours":        # nothing of the baseline runs: no venv, no llama.cpp needed
        return cfg, pipe, store
    log("prepare: %d passages -> the baseline's store (llama.cpp embeddings, chromadb, FTS5)" % n)
    # One thread: ingesting is not measured, and two llama.cpp threads on
    # cores that other processes keep busy wait on each other for seconds
    # per passage (ggml's spinning barrier).
    subprocess.run([sys.executable, os.path.join(HERE, "python_rag", "ingest.py"), "--config", cfg, "--pipeline",
                    PIPELINE, "--passages", passages, "--store", store, "--threads", "1"], check=True)
    return cfg, pipe, store


def make_stacks(a, cfg, store, port_ours, port_py):
    env_py = dict(os.environ, RAG_CONFIG=cfg, RAG_PIPELINE=PIPELINE, RAG_STORE=store)
    if a.py_threads:
        env_py["RAG_THREADS"] = str(a.py_threads)
    if a.py_embed_threads:
        env_py["RAG_EMBED_THREADS"] = str(a.py_embed_threads)
    uvicorn = os.path.join(os.path.dirname(sys.executable), "uvicorn")
    return {
        "ours": Stack("ours", [a.sb, "run", "-c", cfg], dict(os.environ), port_ours, os.path.join(a.out, "ours.log"),
                      lambda: ours_ready),
        "python": Stack("python", [uvicorn, "app:app", "--app-dir", os.path.join(HERE, "python_rag"),
                                   "--host", "127.0.0.1", "--port", str(port_py), "--workers", str(a.py_workers),
                                   "--log-level", "warning", "--no-access-log"],
                        env_py, port_py, os.path.join(a.out, "python.log"), python_ready_factory(a.py_workers)),
    }


def compare_answers(out, recs):
    """Round 1's main answers of both stacks side by side, the diagnosis's
    causes, and how many answers each stack repeats in every round."""
    equality = {"compared": 0, "same": 0, "causes": {}}
    diag = next((r.get("diagnosis") for r in recs if r.get("diagnosis") is not None), [])
    if "ours_main" in out and "py_main" in out:
        for o, p in zip(out["ours_main"], out["py_main"]):
            if o["status"] == 200 and p["status"] == 200:
                equality["compared"] += 1
                equality["same"] += o["answer"] == p["answer"]
        for d in diag:
            equality["causes"][d["cause"]] = equality["causes"].get(d["cause"], 0) + 1
    for stack in ("ours", "python"):
        mains = [r["phases"]["main"]["calls"] for r in recs if r["stack"] == stack]
        if len(mains) > 1:
            equality["%s_stable_across_rounds" % stack] = sum(
                all(m[i]["answer"] == mains[0][i]["answer"] for m in mains) for i in range(len(mains[0])))
    return equality, diag


def headline(summary):
    """The last line, when both stacks answered in their main passes."""
    if not all("main" in summary.get(st, {}) for st in ("ours", "python")):
        return None
    xo, yp = summary["ours"]["main"]["p99_s"], summary["python"]["main"]["p99_s"]
    return "rag p99 ours %.2f s, python %.2f s, ratio %.2f; rss ours %.0f MB, python %.0f MB" % (
        xo, yp, yp / xo, summary["ours"]["peak_pss_mb"], summary["python"]["peak_pss_mb"])


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    meta = {"started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load_start": os.getloadavg()[0], "args": vars(a), **machine()}
    port_ours, port_py = itlib.free_port(), itlib.free_port()
    cfg, pipe, store = prepare(a, port_ours)
    questions = read_questions(a.questions, a.requests, a.seed)
    stacks = make_stacks(a, cfg, store, port_ours, port_py)

    recs, out, t_start = [], {"pipe": pipe}, time.time()
    results_path = os.path.join(a.out, "results.json")
    failed = False
    for rnd in range(1, a.rounds + 1):
        for name in ["ours", "python"] if rnd % 2 else ["python", "ours"]:
            if a.only and name != a.only:
                continue
            try:
                rec = measure_stack(stacks[name], a, questions, out, rnd)
            except RuntimeError as e:
                log("rag_bench: error: %s" % e)
                return 2
            out.setdefault("ours_main" if name == "ours" else "py_main", rec["phases"]["main"]["calls"])
            failed |= any(c["status"] != 200 for p in rec["phases"].values() for c in p["calls"])
            recs.append(rec)
            with open(results_path, "w", encoding="utf-8") as f:        # a stopped run keeps what it measured
                json.dump({"meta": meta, "rounds": recs}, f, ensure_ascii=False, indent=1, default=str)

    equality, diag = compare_answers(out, recs)
    meta["wall_s"] = time.time() - t_start
    lines, summary = report(a, recs, diag, equality, meta)
    last = headline(summary)
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "summary": summary, "equality": equality, "diagnosis": diag, "rounds": recs},
                  f, ensure_ascii=False, indent=1, default=str)
    with open(os.path.join(a.out, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines + ([""] + [last] if last else [])) + "\n")
    log("\n" + "\n".join(lines))
    log("\nresults: %s, %s (%.0f s in all)" % (results_path, os.path.join(a.out, "results.md"), meta["wall_s"]))
    if failed:
        log("rag_bench: some calls failed (status in results.json)")
    if last:
        log(last)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
