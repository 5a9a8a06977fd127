#!/usr/bin/env bash
# it_upstream_tools.sh - tool calling and logprobs through an upstream model:
# tools, tool_choice, parallel_tool_calls, logprobs and top_logprobs reach
# the remote server as the caller sent them (an assistant's tool_calls and a
# tool message's tool_call_id too), and its message.tool_calls (ids
# included), streamed call fragments and logprobs (chat's and the legacy
# completions' shape, whole and streamed) come back to the official `openai`
# client as the upstream wrote them; an upstream that refuses tools has its
# error returned. The upstream is tests/fake_openai.py ("tools",
# "notools"); tests/upstream_tools_check.py drives it. Set SB_BIN to test
# another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init upstream-tools
python3 tests/fake_openai.py "$tmp/port" "$tmp/req.log" & it_pids+=($!)
for _ in $(seq 100); do [ -f "$tmp/port" ] && break; sleep 0.05; done
fport=$(cat "$tmp/port")
read -r hport < <(it_ports 1)
cat > "$tmp/c.yaml" <<YAML
runtime: { dir: $tmp/run, http: 127.0.0.1:$hport, drain_ms: 500 }
models:
  up: { upstream: "http://127.0.0.1:$fport/v1", model: tools, timeout_ms: 5000 }
  nt: { upstream: "http://127.0.0.1:$fport/v1", model: notools, timeout_ms: 5000 }
YAML
"$SB" run -c "$tmp/c.yaml" > "$tmp/sb.log" 2>&1 & it_pids+=($!)
it_wait_http "http://127.0.0.1:$hport/health" 200 || { echo "it_upstream_tools: FAIL router not up"; tail "$tmp/sb.log"; exit 1; }
rc=0
python3 tests/upstream_tools_check.py "http://127.0.0.1:$hport" "$tmp/req.log" || rc=1
it_stop "${it_pids[1]}" "supervisor" || rc=1
it_san_check "$tmp/sb.log" "the router's log" || rc=1
[ $rc -eq 0 ] && echo "it_upstream_tools: ok" || echo "it_upstream_tools: FAIL"
exit $rc
