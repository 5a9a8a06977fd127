#!/usr/bin/env python3
"""params_http.py URL KEY MODEL - the parameter table of docs/router.md,
row by row, against the gateway: each listed parameter is sent (on each door
the row names) with a value its class allows, and, for `limited`, one beyond
the limit; `supported`, `limited` and `ignored` must answer 200, the limit
exceeded and `rejected` 400 with code unsupported_parameter naming the
parameter. A name the table lists and this script has no sample value for
fails, so the table and the test cannot drift apart.
"""
import json
import re
import sys

import itlib

URL, KEY, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
check = itlib.Checks(detail_max=300)
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
# parameter: (allowed value, value beyond the limit or None, extra keys it needs)
SAMPLES = {
    "model": (MODEL, None, {}), "messages": (None, None, {}), "prompt": (None, None, {}),
    "max_tokens": (2, None, {}), "max_completion_tokens": (2, None, {}), "temperature": (0, None, {}),
    "top_p": (0.9, None, {}), "seed": (3, None, {}), "stop": (["zz"], None, {}), "stream": (False, None, {}),
    "stream_options": ({"include_usage": True}, None, {}), "response_format": ({"type": "text"}, None, {}),
    "tools": ([TOOL], None, {"tool_choice": "none"}), "tool_choice": ("none", None, {"tools": [TOOL]}),
    "parallel_tool_calls": (False, None, {}), "logprobs": (True, None, {}),
    "top_logprobs": (2, None, {"logprobs": True}), "top_k": (5, None, {}), "min_p": (0.1, None, {}),
    "repeat_penalty": (1.1, None, {}), "n": (1, 2, {}), "presence_penalty": (0, 0.5, {}),
    "frequency_penalty": (0, 0.5, {}), "echo": (False, True, {}), "best_of": (1, 2, {}),
    "user": ("u-1", None, {}), "metadata": ({"k": "v"}, None, {}), "store": (False, None, {}),
    "service_tier": ("auto", None, {}), "logit_bias": ({"1": 5}, None, {}), "audio": ({"voice": "x"}, None, {}),
    "modalities": (["text"], None, {}), "prediction": ({"type": "content", "content": "x"}, None, {}),
    "functions": ([TOOL["function"]], None, {}), "function_call": ("auto", None, {}),
    "reasoning_effort": ("low", None, {}), "web_search_options": ({}, None, {}), "suffix": ("x", None, {}),
    "anything else": (1, None, {}),
}

rows = []
doc = open("docs/router.md", encoding="utf-8").read()
table = doc[doc.index("#### Parameters"):doc.index("#### Tools")]
for line in table.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 5 or cells[3] not in ("supported", "limited", "ignored", "rejected"):
        continue
    names = re.findall(r"`([a-z_]+)`", cells[0]) or [cells[0]]
    for name in names:
        doors = [d for d, col in (("chat", cells[1]), ("completions", cells[2])) if col.startswith("yes") or
                 (cells[3] == "rejected" and col == "" and name == "anything else")]
        if cells[3] == "rejected" and not doors:
            doors = ["chat", "completions"]
        rows.append((name, doors, cells[3], cells[2]))
check(len(rows) > 30, f"the table has {len(rows)} parameters")


def send(door, body, stream=False):
    path = "/v1/chat/completions" if door == "chat" else "/v1/completions"
    st, hdr, b = itlib.request(URL + path, "POST", json.dumps(body).encode(),
                               {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}, timeout=60)
    return st, b


for name, doors, cls, completions_col in rows:
    if name not in SAMPLES:
        check(False, f"{name}: no sample value in params_http.py")
        continue
    good, beyond, extra = SAMPLES[name]
    for door in doors:
        body = {"model": MODEL, "max_tokens": 2, "temperature": 0}
        body.update({"messages": [{"role": "user", "content": "hi"}]} if door == "chat" else {"prompt": "hi"})
        if name == "anything else":
            name_sent = "zz_not_a_parameter"
        else:
            name_sent = name
        if good is not None:
            body[name_sent] = good
        if name == "logprobs" and door == "completions":
            body[name] = 2
        body.update(extra)
        st, b = send(door, body)
        if cls == "rejected":
            ok = st == 400 and b"unsupported_parameter" in b and name_sent.encode() in b
        else:
            ok = st == 200
        check(ok, f"{door}: {name} ({cls}) -> {st}", b[:200])
        if cls == "limited" and beyond is not None:
            body[name] = beyond
            st, b = send(door, body)
            check(st == 400 and b"unsupported_parameter" in b and name.encode() in b,
                  f"{door}: {name} = {json.dumps(beyond)} beyond its limit -> {st}", b[:200])
    # A parameter of the other door only is refused there.
    for door in {"chat", "completions"} - set(doors):
        if name in ("messages", "prompt", "anything else") or cls == "rejected":
            continue
        body = {"model": MODEL, "max_tokens": 2, name: good}
        body.update({"messages": [{"role": "user", "content": "hi"}]} if door == "chat" else {"prompt": "hi"})
        st, b = send(door, body)
        check(st == 400 and b"unsupported_parameter" in b, f"{door}: {name} is not this door's -> {st}", b[:200])
sys.exit(check.summary())
