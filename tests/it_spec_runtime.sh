#!/usr/bin/env bash
# Speculative decoding in the runtime, with real processes
# on the tiny fixtures: `switchboard run` with models that set `lookup:` and
# `draft:` (a Q2_K of the same vocabulary drafting for the Q8_0), at
# --parallel 2 (the batching worker: one request alone speculates) and 1.
# Greedy completions through HTTP must be the plain model's, token for token;
# /metrics must show the workers' drafted/accepted counters moving; a draft of
# another vocabulary is refused at load, naming both models; config errors
# (draft naming itself / no model, lookup with draft) name the key. Set
# SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init spec
run=$tmp/run
port=$(it_ports 1)
T=$DATA/tiny-llama-spm-Q8_0.gguf
base="threads: 1, ctx: 512, max_tokens: 100"
cat > "$tmp/rt.yaml" <<YAML
runtime: { dir: $run, http: "127.0.0.1:$port", drain_ms: 1000 }
models:
  plain: { gguf: $T, $base, parallel: 2 }
  look:  { gguf: $T, $base, parallel: 2, lookup: 8 }
  look1: { gguf: $T, $base, parallel: 1, lookup: 8 }
  drafted: { gguf: $T, $base, parallel: 2, draft: small }
  small: { gguf: $DATA/tiny-llama-spm-Q2_K.gguf, $base }
  other: { gguf: $DATA/tiny-llama3-Q4_K_M.gguf, $base }
  bad:   { gguf: $T, $base, draft: other }
YAML
# Config errors first: the loader names the key.
for bad in "draft: nothing" "draft: self" "draft: small, lookup: 4"; do
    sed "s|^  plain: { gguf: $T, |  self: { gguf: $T, $bad, |" "$tmp/rt.yaml" > "$tmp/bad.yaml"
    out=$("$SB" run -c "$tmp/bad.yaml" --check 2>&1) && { echo "FAIL --check accepted '$bad'"; exit 1; }
    case "$out" in *"models.self"*) ;; *) echo "FAIL '$bad': $out"; exit 1 ;; esac
done
# A worker started by hand with a draft of another vocabulary: exit 2, both named.
it_expect 2 "not the same vocabulary" "$SB" worker --name w --model "$T" --draft "$DATA/tiny-llama3-Q4_K_M.gguf" \
    --socket "$tmp/w.sock"
grep -q "tiny-llama3-Q4_K_M.gguf cannot draft for 'w' ($T)" "$tmp/err" || { echo "FAIL: $(cat "$tmp/err")"; exit 1; }

"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
# /health stays 503: model bad is down by design. wait_up polls each model.
python3 - "http://127.0.0.1:$port" "$tmp/run.log" <<'PY'
import json, re, sys, time, urllib.request
url, log = sys.argv[1], sys.argv[2]
def post(model, prompt):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 60, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["choices"][0]["text"]
def metrics():
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for m in re.finditer(r'^switchboard_spec_(drafted|accepted)_total\{model="([^"]+)"\} (\d+)$', text, re.M):
        out[(m.group(2), m.group(1))] = int(m.group(3))
    return out
def wait_up(model):
    for _ in range(600):
        try:
            return post(model, "hi")
        except Exception:
            time.sleep(0.1)
    sys.exit(f"FAIL model {model} never answered")
for m in ("plain", "look", "look1", "drafted"): wait_up(m)
prompts = ["one two three four one two three four one two three",
           "the cat sat on the mat and the cat sat on the",
           "a b c d e f a b c d e f a b c"]
for p in prompts:
    ref = post("plain", p)
    for m in ("look", "look1", "drafted"):
        got = post(m, p)
        if got != ref:
            sys.exit(f"FAIL {m}: speculative text differs from plain for {p!r}:\n{got!r}\n{ref!r}")
# The router reads the counters from the workers' health probes.
for _ in range(100):
    c = metrics()
    if all(c.get((m, "drafted"), 0) > 0 for m in ("look", "look1", "drafted")): break
    time.sleep(0.1)
else:
    sys.exit(f"FAIL /metrics spec counters did not move: {c}")
for m in ("look", "look1", "drafted"):
    if not 0 < c[(m, "accepted")] <= c[(m, "drafted")]: sys.exit(f"FAIL {m}: counters {c}")
if c.get(("plain", "drafted"), 0) != 0: sys.exit(f"FAIL plain drafted: {c}")
with open(log) as f: text = f.read()
if not re.search(r"tiny-llama3-Q4_K_M\.gguf cannot draft for 'bad' \(.*tiny-llama-spm-Q8_0\.gguf\).*not the same vocabulary", text):
    sys.exit("FAIL the runtime's log lacks the refused draft of 'bad'")
print(f"ok: identical greedy text on {len(prompts)} prompts; counters {c}")
PY
rc=$?
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; tail -30 "$tmp/run.log"; fi
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
