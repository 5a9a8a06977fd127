#!/usr/bin/env python3
"""Tool calling and logprobs through an upstream model (tests/it_upstream_tools.sh).

  upstream_tools_check.py BASE_URL REQ_LOG

BASE_URL is the router; its models "up" and "nt" are tests/fake_openai.py's
"tools" and "notools". REQ_LOG is the fake's log of the bodies it received,
one JSON per line, in order (one request at a time here).
"""
import json
import sys

import openai

sys.path.insert(0, sys.path[0])
from fake_openai import CALLS, LEGACY_LOGPROBS, LOGPROBS  # noqa: E402

base, log = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
fails = []
seen = 0

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}},
         {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]


def check(what, got, want):
    if got != want:
        fails.append("%s:\n  got  %r\n  want %r" % (what, got, want))


def last_body():
    """The body the fake received for the latest request."""
    global seen
    with open(log) as f:
        lines = f.read().splitlines()
    check("one upstream request per call", len(lines), seen + 1)
    seen = len(lines)
    return json.loads(lines[-1])


def our_lp(content):
    """The door writes a token whose bytes are part of a character with the
    incomplete character replaced; the bytes, logprob and order are the
    upstream's. Every other token is compared whole."""
    out = json.loads(json.dumps(content))
    for e in [t for x in out for t in [x] + x.get("top_logprobs", [])]:
        if e["bytes"] == [228]:
            e["token"] = "\\xe4"
    return out


msgs = [{"role": "user", "content": "weather in Zürich?"}]
# 1. A named tool_choice, parallel_tool_calls and logprobs: the body carries
#    them as sent; the answer's calls and logprobs are the upstream's.
r = client.chat.completions.create(model="up", messages=msgs, tools=TOOLS, parallel_tool_calls=False, logprobs=True,
                                   top_logprobs=2, tool_choice={"type": "function", "function": {"name": "get_weather"}})
b = last_body()
check("body tools", b.get("tools"), TOOLS)
check("body tool_choice", b.get("tool_choice"), {"type": "function", "function": {"name": "get_weather"}})
check("body parallel_tool_calls", b.get("parallel_tool_calls"), False)
check("body logprobs", (b.get("logprobs"), b.get("top_logprobs")), (True, 2))
c = r.choices[0]
check("finish_reason", c.finish_reason, "tool_calls")
check("tool_calls", [t.model_dump() for t in c.message.tool_calls], CALLS)
check("logprobs", our_lp([t.model_dump() for t in c.logprobs.content]), LOGPROBS["content"])
check("usage", (r.usage.prompt_tokens, r.usage.completion_tokens), (11, 3))

# 2. "required" and "auto" as strings; no parallel_tool_calls, no logprobs: not sent.
for choice in ("required", "auto", "none"):
    client.chat.completions.create(model="up", messages=msgs, tools=TOOLS, tool_choice=choice)
    b = last_body()
    check("body tool_choice " + choice, b.get("tool_choice"), choice)
    check("nothing not asked for (" + choice + ")", [k for k in ("parallel_tool_calls", "logprobs", "top_logprobs") if k in b], [])

# 3. History: an assistant's tool calls and the tool's answer go out in OpenAI's shape.
hist = msgs + [{"role": "assistant", "content": None, "tool_calls": CALLS},
               {"role": "tool", "tool_call_id": "call_up_A7", "content": "12 C"},
               {"role": "tool", "tool_call_id": "call_up_B8", "content": "ZX-4471"}]
r = client.chat.completions.create(model="up", messages=hist, tools=TOOLS)
b = last_body()
check("body history", b.get("messages"), hist)

# 4. Text with logprobs, whole.
r = client.chat.completions.create(model="up", messages=msgs, logprobs=True, top_logprobs=2)
last_body()
check("text", r.choices[0].message.content, "Hi\u00e9")
check("text logprobs", our_lp([t.model_dump() for t in r.choices[0].logprobs.content]), LOGPROBS["content"])

# 5. Streamed calls: the fragments, interleaved by index, put back together.
calls = {}
finish = None
for ch in client.chat.completions.create(model="up", messages=msgs, tools=TOOLS, tool_choice="required", stream=True):
    if not ch.choices:
        continue
    finish = ch.choices[0].finish_reason or finish
    for d in ch.choices[0].delta.tool_calls or []:
        t = calls.setdefault(d.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        t["id"] += d.id or ""
        t["function"]["name"] += (d.function.name or "") if d.function else ""
        t["function"]["arguments"] += (d.function.arguments or "") if d.function else ""
check("body stream", last_body().get("stream"), True)
check("streamed tool_calls", [calls[k] for k in sorted(calls)], CALLS)
check("streamed finish_reason", finish, "tool_calls")

# 6. Streamed logprobs: every entry, the half character's too.
got, text = [], ""
for ch in client.chat.completions.create(model="up", messages=msgs, logprobs=True, top_logprobs=2, stream=True):
    if ch.choices and ch.choices[0].logprobs:
        got += [t.model_dump() for t in ch.choices[0].logprobs.content]
    if ch.choices:
        text += ch.choices[0].delta.content or ""
last_body()
check("streamed text", text, "Hi\u00e9")
check("streamed logprobs", our_lp(got), LOGPROBS["content"])

# 7. Legacy completions: logprobs as the number of top tokens, answered in the legacy shape.
r = client.completions.create(model="up", prompt="p", logprobs=2)
check("completions body logprobs", last_body().get("logprobs"), 2)
check("completions logprobs", r.choices[0].logprobs.model_dump(), LEGACY_LOGPROBS)

# 8. An upstream without tools: its own error, as a 400.
try:
    client.chat.completions.create(model="nt", messages=msgs, tools=TOOLS)
    fails.append("notools: no error")
except openai.BadRequestError as e:
    if "does not support tools" not in str(e):
        fails.append("notools: the upstream's message is missing: %s" % e)
last_body()

for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
