#!/usr/bin/env bash
# `switchboard bench --profile` and `--membw` (docs/PERFORMANCE.md, "AVX-512
# decode"): every op kind gets a row, the rows add up to the runs' wall
# time, and the interleaved bandwidth fields are there and sane. On a tiny
# fixture, so it takes a second or two; the numbers are not checked.
set -u
cd "$(dirname "$0")/.."
SB=${SB_BIN:-bin/switchboard}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }
model=tests/data/tiny-phi3-Q4_K_M.gguf

if "$SB" bench -m $model -p 16 -n 20 -t 2 -r 2 --profile > "$tmp/prof" 2> "$tmp/err"; then
    python3 - "$tmp/prof" <<'PY' && ok "bench --profile: 17 op rows, profiled time = wall" || bad "bench --profile: $(cat "$tmp/prof")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
i = next(k for k, l in enumerate(lines) if l.startswith("op "))
rows = lines[i + 1:i + 18]
names = [re.split(r"\s{2,}", r)[0] for r in rows]
assert len(names) == 17 and names[0] == "embed + rope cache" and names[-1] == "pool barrier wait", names
total = lines[i + 18]
assert total.startswith("profiled / wall"), total
tg_pct, pp_pct = [float(x) for x in re.findall(r"([\d.]+)%", total)]
# the marks cover the passes; what is outside them (the timing calls) is tiny
assert 90 <= tg_pct <= 100.5 and 90 <= pp_pct <= 100.5, total
vals = [float(re.findall(r"([\d.]+)%", r)[0]) for r in rows]
assert abs(sum(vals) - 100) < 1, sum(vals)
PY
else
    bad "bench --profile exited $?: $(head -c 300 "$tmp/err")"
fi

if "$SB" bench -m $model -p 0 -n 40 -t 2 -r 1 --membw --json > "$tmp/bw.json" 2> "$tmp/err"; then
    python3 - "$tmp/bw.json" <<'PY' && ok "bench --membw: 3 windows, bandwidth, bytes per token, fraction" || bad "bench --membw: $(cat "$tmp/bw.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["bw_windows"] == 3, o          # 40 tokens: 16 + 16 + 8
assert 0 < o["bw_gbs_min"] <= o["bw_gbs"] <= o["bw_gbs_max"], o
assert abs(o["bytes_per_token"] - o["weight_bytes"] - o["kv_bytes_per_token"]) <= 1 and o["kv_bytes_per_token"] > 0, o
assert 0 < o["tg_bw_frac_min"] <= o["tg_bw_frac"] <= o["tg_bw_frac_max"], o
assert o["tg_tps"] > 0, o
PY
else
    bad "bench --membw exited $?: $(head -c 300 "$tmp/err")"
fi

echo "bench: $pass passed, $fail failed"
[ $fail -eq 0 ]
