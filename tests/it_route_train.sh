#!/usr/bin/env bash
# `switchboard route train` on the tiny random encoder of tests/e5_tiny.py
# (2 layers, dim 64, a 16-token window; built here, no download), and the
# adapter it writes served by a worker:
#  - a few steps lower the contrastive loss, progress lines name step, loss
#    and ETA, and the run is deterministic: the same file from -t 1 and -t 2,
#    another from another seed;
#  - the file is llama.cpp's LoRA layout (general.type adapter, adapter.type
#    lora, adapter.lora.alpha, F32 <base>.lora_a [in, r] / .lora_b [r, out]),
#    read here by an independent GGUF reader;
#  - --norms trains the adapted layers' LayerNorms too, as deterministically;
#    the file then carries them as sb.blk.N.*_norm.weight [H, 2] (names
#    llama.cpp's loader skips), and a worker's per-request adapter applies
#    them (the vector of embed --adapter, not that of the file without them);
#  - --shots caps the examples per label;
#  - the leave-some-out estimate is printed, and the adapter is written only
#    when it is not below the frozen encoder's (exit 3 otherwise; --force);
#  - route eval --adapter and embed --adapter use it; a model entry's
#    adapter: gives POST /v1/embeddings the same vectors as embed --adapter
#    (and not the frozen ones); retrained in place + SIGHUP, the worker
#    restarts with the new one, and an intent stage on that entry
#    re-embeds its texts (the adapter is part of the model's fingerprint,
#    the embedding cache's key);
#  - bad input is a clean exit 2 naming what is wrong, a knowledge base on
#    an adapted entry included.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init routetrain
fail() { echo "it_route_train: FAIL: $*" >&2; exit 1; }
it_tiny_e5 || fail "convert-e5"
port=$(it_ports 1)
{ cat <<YAML
runtime: { dir: $tmp/run, http: 127.0.0.1:$port, drain_ms: 2000 }
models:
  e5:  { gguf: $tmp/e5.gguf, threads: 1 }
YAML
  cat tests/data/route_tiny_pipeline.yaml; } > "$tmp/rt.yaml"
tr() { "$SB" route train -c "$tmp/rt.yaml" --pipeline hotline "$@"; }

# --- training: the loss falls, progress is shown, the file appears
tr --steps 8 --seed 3 --lr 0.01 --force -t 1 -o "$tmp/a1.gguf" > "$tmp/out" 2> "$tmp/err" || fail "route train exited $?: $(tail -3 "$tmp/err")"
grep -q "^route train: 14 texts (3 labels + out_of_scope: 2), rank 8, alpha 16, top 2 layers, 8 steps of 14, seed 3" "$tmp/err" \
    || fail "header: $(head -1 "$tmp/err")"
grep -q "^route train: step 8/8  loss [0-9.]*  lr .* ETA 0s$" "$tmp/err" || fail "progress: $(tail -2 "$tmp/err")"
grep -q "wrote $tmp/a1.gguf" "$tmp/out" || fail "stdout: $(cat "$tmp/out")"
python3 - "$tmp/err" <<'EOF' || fail "the loss did not fall: $(grep step "$tmp/err")"
import re, sys
l = [float(m.group(1)) for m in re.finditer(r"^route train: step \d+/\d+  loss ([0-9.]+)", open(sys.argv[1]).read(), re.M)]
assert len(l) == 8 and l[-1] < l[0] - 0.05, l
EOF
grep -q "^route train: fold 3/3: step 8/8  loss" "$tmp/err" || fail "the estimate's progress: $(grep fold "$tmp/err" | tail -1)"
grep -q "^route train: leave-some-out estimate (3 folds of the 11 examples): frozen 0.[0-9]* ([0-9]*/11), adapted" "$tmp/err" \
    || fail "the estimate: $(grep estimate "$tmp/err")"
tr --steps 8 --seed 3 --lr 0.01 --folds 0 -t 2 -o "$tmp/a2.gguf" 2> /dev/null > /dev/null || fail "route train -t 2"
cmp -s "$tmp/a1.gguf" "$tmp/a2.gguf" || fail "-t 1 and -t 2 wrote different adapters"
tr --steps 8 --seed 4 --lr 0.01 --folds 0 -t 2 -o "$tmp/a3.gguf" 2> /dev/null > /dev/null || fail "route train --seed 4"
cmp -s "$tmp/a1.gguf" "$tmp/a3.gguf" && fail "--seed 4 wrote the same adapter as --seed 3"
tr --steps 8 --seed 3 --lr 0.01 --folds 0 --norms -t 1 -o "$tmp/n1.gguf" 2> "$tmp/err" > /dev/null || fail "--norms: $(tail -1 "$tmp/err")"
grep -q "^route train: 14 texts .*, top 2 layers, their LayerNorms, 8 steps of 14" "$tmp/err" || fail "--norms: $(head -1 "$tmp/err")"
tr --steps 8 --seed 3 --lr 0.01 --folds 0 --norms -t 2 -o "$tmp/n2.gguf" 2> /dev/null > /dev/null || fail "--norms -t 2"
cmp -s "$tmp/n1.gguf" "$tmp/n2.gguf" || fail "--norms: -t 1 and -t 2 wrote different adapters"
# the guard: exit 3 and no file exactly when the adapted estimate is below the frozen one (seed 6 is such a
# run with this CPU's kernels; the bits, hence the estimate, may differ on another kernel level), --force writes
for seed in 3 6; do
    rc=0; tr --steps 6 --lr 0.05 --seed $seed -o "$tmp/g$seed.gguf" > /dev/null 2> "$tmp/err" || rc=$?
    python3 - "$tmp/err" $rc "$tmp/g$seed.gguf" <<'EOF' || fail "guard, seed $seed: $(grep -v step "$tmp/err")"
import os, re, sys
t = open(sys.argv[1]).read()
fz, ad = (int(x) for x in re.search(r"frozen [0-9.]+ \((\d+)/\d+\), adapted [0-9.]+ \((\d+)/", t).groups())
worse = ad < fz
assert int(sys.argv[2]) == (3 if worse else 0), (fz, ad, sys.argv[2])
assert os.path.exists(sys.argv[3]) == (not worse)
assert ("not writing" in t) == worse
EOF
done
tr --steps 6 --lr 0.05 --seed 6 --force -o "$tmp/g6.gguf" > /dev/null 2>&1 && [ -s "$tmp/g6.gguf" ] || fail "--force"
tr --steps 1 --shots 1 --layers 1 --folds 0 --rank 4 --alpha 8 -o "$tmp/s1.gguf" 2> "$tmp/err" > /dev/null || fail "--shots 1"
grep -q "^route train: 8 texts (3 labels + out_of_scope: 2), rank 4, alpha 8, top 1 layers" "$tmp/err" \
    || fail "--shots 1: $(head -1 "$tmp/err")"

# --phrases: each description's phrases are texts of its label too ("bills, the meter; late fees" -> 3 more)
sed 's|description: "bills and the meter"|description: "bills, the meter；late fees"|' "$tmp/rt.yaml" > "$tmp/phr.yaml"
"$SB" route train -c "$tmp/phr.yaml" --pipeline hotline --steps 1 --folds 0 --phrases -o "$tmp/p.gguf" 2> "$tmp/err" > /dev/null \
    || fail "--phrases: $(tail -1 "$tmp/err")"
grep -q "^route train: 19 texts (3 labels" "$tmp/err" || fail "--phrases: $(head -1 "$tmp/err")"

# --- the file: llama.cpp's LoRA adapter layout, by an independent reader
python3 - "$tmp/a1.gguf" "$tmp/s1.gguf" "$tmp/n1.gguf" "$tmp/a2.gguf" <<'EOF' || fail "adapter layout"
import struct, sys
def read(path):
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF", "magic"
    ver, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    off = 24
    def s():
        nonlocal off
        n, = struct.unpack_from("<Q", b, off); off += 8 + n
        return b[off - n:off].decode()
    kv = {}
    for _ in range(nkv):
        k = s(); t, = struct.unpack_from("<I", b, off); off += 4
        if t == 8: kv[k] = s()
        elif t == 6: kv[k], = struct.unpack_from("<f", b, off); off += 4
        else: raise AssertionError(f"{k}: unexpected type {t}")
    ts = {}
    for _ in range(nt):
        name = s(); nd, = struct.unpack_from("<I", b, off); off += 4
        ne = struct.unpack_from(f"<{nd}Q", b, off); off += 8 * nd
        typ, o = struct.unpack_from("<IQ", b, off); off += 12
        ts[name] = (ne, typ)
        offs[name] = o
    start = (off + 31) // 32 * 32
    data = {n: struct.unpack_from(f"<{ne[0] * ne[1]}f", b, start + offs[n]) for n, (ne, _) in ts.items()}
    return ver, kv, ts, data
offs = {}
ver, kv, ts, data = read(sys.argv[1])
assert ver == 3 and kv == {"general.architecture": "bert", "general.type": "adapter", "adapter.type": "lora",
                           "adapter.lora.alpha": 16.0}, kv
mats = {"attn_q": (64, 64), "attn_k": (64, 64), "attn_v": (64, 64), "attn_output": (64, 64),
        "ffn_up": (64, 128), "ffn_down": (128, 64)}          # (in, out)
want = {}
for l in (0, 1):
    for m, (i, o) in mats.items():
        want[f"blk.{l}.{m}.weight.lora_a"] = ((i, 8), 0)
        want[f"blk.{l}.{m}.weight.lora_b"] = ((8, o), 0)
assert ts == want, sorted(set(ts) ^ set(want))
_, kv, ts, _ = read(sys.argv[2])
assert kv["adapter.lora.alpha"] == 8.0 and len(ts) == 12 and all(n.startswith("blk.1.") for n in ts), ts
assert ts["blk.1.ffn_down.weight.lora_a"] == ((128, 4), 0), ts
# --norms: the pairs plus each adapted layer's two norms, weight row then bias row, trained (the same seed without
# --norms starts from the same A; the norms move B and A elsewhere)
_, kv, ts, norms = read(sys.argv[3])
extra = {f"sb.blk.{l}.{n}_norm.weight": ((64, 2), 0) for l in (0, 1) for n in ("attn_output", "layer_output")}
assert ts == {**want, **extra}, sorted(set(ts) ^ set(want) ^ set(extra))
assert all(n.endswith("_norm.weight") for n in extra)      # what llama.cpp's loader skips
_, _, _, plain = read(sys.argv[4])
assert norms["blk.1.attn_q.weight.lora_b"] != plain["blk.1.attn_q.weight.lora_b"]
w = norms["sb.blk.1.layer_output_norm.weight"]
assert all(abs(x) < 10 for x in w) and len(set(w)) > 64, w[:8]
EOF

# --- using it: route eval, embed, and a worker behind POST /v1/embeddings
printf 'billing\tthe meter reading is off\ncomplaint\tI want to complain\n' > "$tmp/calls.tsv"
"$SB" route eval -c "$tmp/rt.yaml" --pipeline hotline --adapter "$tmp/a1.gguf" "$tmp/calls.tsv" > "$tmp/out" 2>&1 \
    || fail "route eval --adapter: $(cat "$tmp/out")"
grep -q "^adapter $tmp/a1.gguf" "$tmp/out" || fail "route eval does not name the adapter: $(head -3 "$tmp/out")"
"$SB" embed -m "$tmp/e5.gguf" "loud music at night" > "$tmp/frozen.json" || fail "embed"
"$SB" embed -m "$tmp/e5.gguf" --adapter "$tmp/a1.gguf" "loud music at night" > "$tmp/adapted.json" || fail "embed --adapter"
"$SB" embed -m "$tmp/e5.gguf" --adapter "$tmp/a3.gguf" "loud music at night" > "$tmp/adapted3.json" || fail "embed a3"
"$SB" embed -m "$tmp/e5.gguf" --adapter "$tmp/n1.gguf" "loud music at night" > "$tmp/normed.json" || fail "embed n1"
cmp -s "$tmp/frozen.json" "$tmp/adapted.json" && fail "embed --adapter gave the frozen vector"

# the same model twice: e5a with the adapter (a path relative to the config)
sed 's|^  e5:  { gguf: \(.*\) }$|&\n  e5a: { gguf: \1, adapter: a1.gguf, adapters: { other: a3.gguf, norms: n1.gguf } }|' "$tmp/rt.yaml" > "$tmp/serve.yaml"
cat >> "$tmp/serve.yaml" <<YAML
  adapted:
    stages:
      - { name: routea, kind: intent, model: e5a, labels: { a: { examples: ["the meter"] }, b: { examples: ["a tax"] } } }
YAML
grep -q "e5a:" "$tmp/serve.yaml" || fail "serve.yaml: $(cat "$tmp/serve.yaml")"
"$SB" run -c "$tmp/serve.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
it_wait_http "http://127.0.0.1:$port/health" 200 0.05 || fail "the runtime did not come up: $(tail -5 "$tmp/run.log")"
python3 - "http://127.0.0.1:$port" "$tmp/frozen.json" "$tmp/adapted.json" "$tmp/adapted3.json" "$tmp/normed.json" <<'EOF' \
    || fail "/v1/embeddings with the adapter"
import json, sys, urllib.error, urllib.request
def emb(model):
    req = urllib.request.Request(sys.argv[1] + "/v1/embeddings", method="POST",
                                 data=json.dumps({"model": model, "input": "loud music at night"}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["data"][0]["embedding"]
frozen, adapted, adapted3, normed = (json.load(open(p)) for p in sys.argv[2:6])
def emb2(model, **extra):
    req = urllib.request.Request(sys.argv[1] + "/v1/embeddings", method="POST",
                                 data=json.dumps(dict(model=model, input=["loud music at night"] * 2, **extra)).encode(),
                                 headers={"Content-Type": "application/json"})
    return [d["embedding"] for d in json.load(urllib.request.urlopen(req, timeout=60))["data"]]
for model, want, other in (("e5a", adapted, frozen), ("e5", frozen, adapted)):
    got = emb(model)
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-6, (model, "differs from embed's vector")
    assert max(abs(a - b) for a, b in zip(got, other)) > 1e-3, (model, "is the other vector")
# per request: "none" the frozen vectors, "other" the named adapter; the entry's own adapter after each
def close(v, w): return max(abs(a - b) for a, b in zip(v, w)) < 1e-6
for model, name, want in (("e5a", "none", frozen), ("e5", "none", frozen), ("e5a", "other", adapted3),
                          ("e5a", "norms", normed)):
    assert all(close(v, want) for v in emb2(model, adapter=name)), (model, name, "not the vector it names")
    assert close(emb("e5a"), adapted), ("the worker's own adapter is not back after", name)
for model, name, known in (("e5a", "nope", "none, other, norms"), ("e5", "other", "none")):
    try:
        emb2(model, adapter=name)
        raise AssertionError(f"adapter {name!r} accepted by {model}")
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        assert e.code == 400 and f"is not one of this worker's: {known}" in body, (model, name, e.code, body)
EOF
grep -q "adapter $tmp/a1.gguf: rank 8, alpha 16" "$tmp/run.log" || fail "the worker does not log its adapter"
# retrained in place (the seed-4 adapter copied over a1: the same size, a new mtime) + SIGHUP: the worker
# restarts with the new adapter, and the frozen entry's worker is left alone
n_loads=$(grep -c "adapter $tmp/a1.gguf: rank 8" "$tmp/run.log")
sleep 0.05; cp "$tmp/a3.gguf" "$tmp/a1.gguf.new" && mv "$tmp/a1.gguf.new" "$tmp/a1.gguf"
kill -HUP "$sup"
for _ in $(seq 1 600); do
    [ "$(grep -c "adapter $tmp/a1.gguf: rank 8" "$tmp/run.log")" -gt "$n_loads" ] && break; sleep 0.1
done
python3 - "http://127.0.0.1:$port" "$tmp/frozen.json" "$tmp/adapted3.json" <<'EOF' || fail "after SIGHUP: $(tail -5 "$tmp/run.log")"
import json, sys, time, urllib.request, urllib.error
def emb(model):
    req = urllib.request.Request(sys.argv[1] + "/v1/embeddings", method="POST",
                                 data=json.dumps({"model": model, "input": "loud music at night"}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["data"][0]["embedding"]
frozen, adapted3 = (json.load(open(p)) for p in sys.argv[2:4])
for _ in range(300):                 # the restarted worker may not be ready at once
    try:
        got = emb("e5a")
        break
    except urllib.error.HTTPError as e:
        if e.code != 503: raise
        time.sleep(0.1)
assert max(abs(a - b) for a, b in zip(got, adapted3)) < 1e-6, "e5a does not serve the retrained adapter"
assert max(abs(a - b) for a, b in zip(emb("e5"), frozen)) < 1e-6
EOF
# the intent stage on e5a re-embedded its texts after the reload: the adapter is part of the model's
# fingerprint, which keys the embedding cache (the same GGUF with another adapter is another model)
for _ in $(seq 1 300); do
    [ "$(grep -c "intent stage 'routea': 2 texts embedded" "$tmp/run.log")" -ge 2 ] && break; sleep 0.1
done
[ "$(grep -c "intent stage 'routea': 2 texts embedded (0 from" "$tmp/run.log")" -ge 2 ] \
    || fail "the adapted stage's vectors came from the cache: $(grep "intent stage 'routea'" "$tmp/run.log")"
it_stop "$sup" runtime || fail "runtime stop"
it_forget "$sup"
it_san_check "$tmp/run.log" "the runtime's log" || exit 1

# --- bad input
expect() {   # expect EXIT_CODE STDERR_SUBSTRING CMD...
    local want="$1" msg="$2" rc=0; shift 2
    "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
    [ "$rc" = "$want" ] || fail "$* exited $rc, want $want ($(head -c 300 "$tmp/err"))"
    grep -qF -- "$msg" "$tmp/err" || fail "$*: stderr lacks '$msg': $(head -c 300 "$tmp/err")"
}
expect 2 "--layers 3: the model has 2" tr --layers 3 -o "$tmp/x.gguf"
expect 2 "give -c CONFIG, --pipeline P and -o ADAPTER.gguf" tr
expect 2 "--lr expects a number" tr --lr fast -o "$tmp/x.gguf"
expect 2 "--folds expects 0 (no estimate) or 2..100" tr --folds 1 -o "$tmp/x.gguf"
expect 2 "not a LoRA adapter" "$SB" route eval -c "$tmp/rt.yaml" --pipeline hotline --adapter "$tmp/e5.gguf" "$tmp/calls.tsv"
expect 2 "not a LoRA adapter" "$SB" embed -m "$tmp/e5.gguf" --adapter "$tmp/e5.gguf" "x"
sed 's/adapter: a1.gguf/adapter: nope.gguf/' "$tmp/serve.yaml" > "$tmp/bad.yaml"
expect 2 "models.e5a.adapter" "$SB" run -c "$tmp/bad.yaml" --check
# a knowledge base's passages are embedded without an adapter: its embed_model may not have one
cat "$tmp/serve.yaml" > "$tmp/kbad.yaml"
printf 'knowledge:\n  docs: { path: %s/kb.sqlite, embed_model: e5a }\n' "$tmp" >> "$tmp/kbad.yaml"
expect 2 "knowledge.docs.embed_model: model 'e5a' has an adapter" "$SB" run -c "$tmp/kbad.yaml" --check
[ -e "$tmp/x.gguf" ] && fail "a refused run left $tmp/x.gguf"
"$SB" route train --help | grep -q -- "--shots K" || fail "route train --help"
"$SB" route --help | grep -q "route train" || fail "route --help does not list train"
echo "it_route_train: ok"
