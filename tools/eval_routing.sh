#!/usr/bin/env bash
# Routing accuracy of the hotline pipeline on the real small model.
#
#   tools/eval_routing.sh                 start configs/demo.yaml on a free port, evaluate, stop
#   tools/eval_routing.sh --url URL       evaluate a gateway that is already running
#   CONFIG=configs/x.yaml tools/eval_routing.sh   another config (its pipelines need "hotline")
#
# Needs models/qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf (make models). Prints
# one line per utterance of tests/data/hotline_utterances.tsv and the accuracy
# (docs/ROUTING.md records it). Extra arguments go to tools/eval_routing.py,
# e.g. another set: tools/eval_routing.sh tests/data/hotline_injection.tsv
set -euo pipefail
cd "$(dirname "$0")/.."
SB=${SB_BIN:-bin/switchboard}
CONFIG=${CONFIG:-configs/demo.yaml}
if [ "${1:-}" = "--url" ]; then
    url=$2; shift 2
    exec python3 tools/eval_routing.py "$url" "$@"
fi
[ -x "$SB" ] || { echo "eval_routing: build first (make), or set SB_BIN" >&2; exit 2; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run=$(mktemp -d /tmp/sb-eval-XXXXXX)
# A copy next to the original, so its relative paths still resolve; only the
# runtime directory and the listen address change.
cfg=$(dirname "$CONFIG")/.eval-$$.yaml
sed -e "s|^  dir: .*|  dir: $run|" -e "s|^  http: .*|  http: 127.0.0.1:$port|" \
    -e "s|^  path: \.\./run/cache.sqlite|  path: $run/cache.sqlite|" "$CONFIG" > "$cfg"
sup=
cleanup() { [ -n "$sup" ] && kill "$sup" 2>/dev/null && wait "$sup" 2>/dev/null; rm -f "$cfg"; rm -rf "$run"; }
trap cleanup EXIT
"$SB" run -c "$cfg" > "$run/run.log" 2>&1 &
sup=$!
for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
    kill -0 "$sup" 2>/dev/null || { cat "$run/run.log" >&2; exit 1; }
    sleep 0.2
done
python3 tools/eval_routing.py "http://127.0.0.1:$port" "$@"
