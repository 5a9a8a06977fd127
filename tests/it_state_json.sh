#!/usr/bin/env bash
# DIR/state.json stays valid JSON when a path in it is not UTF-8: the config
# lives in a directory whose name holds the byte 0xFF, so the config path,
# the default runtime.dir (next to the config), the sockets and the model's
# gguf path all carry it. The supervisor's own escaper used to copy such
# bytes through (one JSON writer, invalid bytes become U+FFFD).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init state
port=$(it_ports 1)
d=$tmp/$'cfg\xff'
mkdir "$d"
ln -s "$DATA/tiny-llama-spm-Q2_K.gguf" "$d/m.gguf"
cat > "$d/c.yaml" <<YAML
runtime:
  http: 127.0.0.1:$port
models:
  tiny: { gguf: m.gguf, threads: 1, ctx: 256 }
YAML
"$SB" run -c "$d/c.yaml" > "$tmp/sup.log" 2>&1 & sup=$!; it_pids+=($sup)
state=$d/run/state.json
# Wait for the worker itself: the router is in the file too, and when it was
# ready first a grep for any "ready" read the worker still `starting` (a
# sanitized worker on a busy box loads slower than the router). Up to 60 s.
rc=0
python3 tests/rt_state.py wait "$d/run" tiny ready 60 > /dev/null || rc=1
cp "$state" "$tmp/state.json" 2>/dev/null
python3 - "$tmp/state.json" <<'EOF' || rc=1
import json, sys
s = json.load(open(sys.argv[1], "rb"))      # bytes: json decodes UTF-8 or fails
assert s["config"].endswith("cfg\ufffd/c.yaml"), s["config"]
t = s["models"]["tiny"]
assert t["state"] == "ready", t
assert "cfg\ufffd/run/" in t["socket"] and t["gguf"].endswith("cfg\ufffd/m.gguf"), t
EOF
it_stop "$sup" supervisor || rc=1
it_san_check "$tmp/sup.log" "the supervisor's log" || rc=1
if [ $rc -ne 0 ]; then
    echo "FAIL state.json with a non-UTF-8 path: $(head -c 300 "$tmp/state.json" 2>/dev/null)"
    tail -5 "$tmp/sup.log"
    exit 1
fi
echo "it_state_json: ok (state.json valid JSON, bytes that are not UTF-8 as U+FFFD)"
