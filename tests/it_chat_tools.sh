#!/usr/bin/env bash
# it_chat_tools.sh - tools, tool calls and tool results in chat prompts
# (worker/engine/chat_tools.c) byte for byte against the templates rendered
# by Python's jinja2 as transformers does (tests/chat_tools_check.py):
# Qwen2.5's own template (hermes), Llama-3.1's (llama31), and templates
# without tools, where our documented generic text goes into the template's
# own messages. The llama-2 files are left out: our llama2 spacing follows
# llama.cpp's formatter, not their Jinja (tests/test_chat.c).
set -u
cd "$(dirname "$0")/.."
SB=$(realpath "${SB_BIN:-bin/switchboard}")
if ! python3 -c "import jinja2" 2>/dev/null; then
    echo "it_chat_tools: FAIL: python3 has no jinja2 (tools/deps.sh check installs it)"; exit 1
fi
t=tests/data/templates
python3 tests/chat_tools_check.py "$SB" $t/qwen2.5-instruct.jinja $t/qwen2.5-coder-1.5b-instruct.jinja \
    $t/llama-3.1-8b-instruct.jinja \
    $t/smollm2-135m-instruct.jinja $t/tiny-llama3.jinja $t/tiny-llama-spm.jinja $t/tiny-phi3.jinja ||
    { echo "it_chat_tools: FAIL"; exit 1; }
# The command's own errors: a request it cannot render says why, exit 2.
out=$(echo '{"messages": [{"role": "user", "content": "hi"}], "tools": {"not": "a list"}}' |
      "$SB" chat-prompt --template $t/qwen2.5-instruct.jinja 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "tools: expected a JSON array" <<< "$out" || { echo "it_chat_tools: FAIL: bad tools: rc $rc: $out"; exit 1; }
out=$(echo '{"messages": [{"role": "system", "content": "s"}], "tools": []}' |
      "$SB" chat-prompt --template $t/llama-3.1-8b-instruct.jinja 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "first user message" <<< "$out" || { echo "it_chat_tools: FAIL: no user message: rc $rc: $out"; exit 1; }
echo "it_chat_tools: ok"
