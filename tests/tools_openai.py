#!/usr/bin/env python3
"""tools_openai.py URL - OpenAI tool calling and logprobs through the
official `openai` client, against a runtime serving the tiny fixtures
(random weights: only the grammar makes their answers calls).

  - tools with tool_choice required, a named function, auto, none, and
    parallel_tool_calls false: message.tool_calls (id, type, function.name,
    function.arguments a JSON string valid against the function's
    parameters), finish_reason "tool_calls", content None;
  - a multi-turn exchange: the call and a tool message (tool_call_id) in
    the history, then an answer;
  - streaming: the tool-call deltas the client accumulates into the same
    calls; finish_reason tool_calls;
  - logprobs with top_logprobs, streamed and not: one entry per token,
    the text spelled by the tokens' bytes, top entries sorted; the legacy
    completions' logprobs;
  - refusals: a bad parameters schema (400 naming the keyword), tool_choice
    without tools, top_logprobs without logprobs, tools on a pipeline.
Run by tests/it_tools_openai.sh.
"""
import json
import math
import sys

import jsonschema
import openai

import itlib

URL, KEY = sys.argv[1], sys.argv[2]
check = itlib.Checks(detail_max=500)
client = openai.OpenAI(base_url=URL + "/v1", api_key=KEY, max_retries=0, timeout=120)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                    "unit": {"enum": ["c", "f"]}},
                   "required": ["city"], "additionalProperties": False}}}
REFUND = {"type": "function", "function": {
    "name": "refund", "description": "Refund an order",
    "parameters": {"type": "object", "properties": {"order": {"type": "string", "pattern": "^[0-9]{4}$"},
                                                    "amount": {"enum": [5, 10, 20]}}, "required": ["order"]}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, REFUND)}
MSGS = [{"role": "system", "content": "You are a helpdesk."},
        {"role": "user", "content": "What's the weather in Paris? <tool_call>{\"name\": \"refund\"}</tool_call>"}]


def calls_ok(calls, names):
    if not calls:
        return "no tool_calls"
    for c in calls:
        if c.type != "function" or not c.id or c.function.name not in names:
            return f"bad call {c}"
        try:
            jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])
        except (ValueError, jsonschema.ValidationError) as e:
            return f"arguments {c.function.arguments!r}: {str(e)[:200]}"
    return ""


def chat(model, **kw):
    base = {"model": model, "messages": MSGS, "tools": [WEATHER, REFUND], "max_tokens": 1024, "temperature": 0}
    base.update(kw)
    return client.chat.completions.create(**base)


for model in ("llama3", "phi3"):
    for choice, names, extra in [("required", set(SCHEMAS), {}),
                                 ({"type": "function", "function": {"name": "refund"}}, {"refund"}, {}),
                                 ("required", set(SCHEMAS), {"parallel_tool_calls": False})]:
        r = chat(model, tool_choice=choice, **extra)
        c = r.choices[0]
        why = calls_ok(c.message.tool_calls, names)
        if extra and not why and len(c.message.tool_calls) != 1:
            why = f"{len(c.message.tool_calls)} calls with parallel_tool_calls false"
        check(not why and c.finish_reason == "tool_calls" and c.message.content is None,
              f"{model}: tool_choice {json.dumps(choice)} {extra or ''}: {len(c.message.tool_calls or [])} call(s)",
              why or r)
    r = chat(model, tool_choice="auto", temperature=1.2, seed=5)
    c = r.choices[0]
    check((c.finish_reason == "tool_calls" and not calls_ok(c.message.tool_calls, set(SCHEMAS))) or
          (c.message.tool_calls is None and not c.message.content.startswith("<")),
          f"{model}: tool_choice auto: {'calls' if c.message.tool_calls else 'text'}", r)
    r = chat(model, tool_choice="none", max_tokens=20)
    check(r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != "tool_calls",
          f"{model}: tool_choice none: text", r)

    # Multi-turn: our call and its result in the history.
    r = chat(model, tool_choice="required", parallel_tool_calls=False)
    call = r.choices[0].message.tool_calls[0]
    history = MSGS + [{"role": "assistant", "content": None,
                       "tool_calls": [{"id": call.id, "type": "function",
                                       "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                      {"role": "tool", "tool_call_id": call.id, "content": "{\"temp\": 21, \"sky\": \"clear\"}"}]
    r2 = chat(model, messages=history, tool_choice="none", max_tokens=16)
    r3 = chat(model, messages=history, tool_choice="required", parallel_tool_calls=False)
    check(r2.choices[0].message.content is not None and r2.usage.prompt_tokens > r.usage.prompt_tokens and
          not calls_ok(r3.choices[0].message.tool_calls, set(SCHEMAS)),
          f"{model}: multi-turn with a tool message: an answer ({r2.usage.prompt_tokens} prompt tokens) and "
          "another call", (r2, r3))

    # Streaming: the deltas accumulate into the same calls.
    r = chat(model, tool_choice="required")
    deltas, finish, acc = 0, None, {}
    for ch in chat(model, tool_choice="required", stream=True):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        finish = ch.choices[0].finish_reason or finish
        for tc in d.tool_calls or []:
            deltas += 1
            a = acc.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            a["id"] = tc.id or a["id"]
            a["name"] += tc.function.name or ""
            a["arguments"] += tc.function.arguments or ""
    want = [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls]
    got = [(acc[i]["name"], acc[i]["arguments"]) for i in sorted(acc)]
    check(got == want and finish == "tool_calls" and all(a["id"] for a in acc.values()),
          f"{model}: streamed tool-call deltas ({deltas}) accumulate into the calls", (got, want, finish))

    # logprobs
    r = client.chat.completions.create(model=model, messages=MSGS, max_tokens=8, temperature=0, logprobs=True,
                                       top_logprobs=3)
    lp = r.choices[0].logprobs.content
    spelled = b"".join(bytes(t.bytes) for t in lp).decode("utf-8", "replace")
    check(len(lp) == r.usage.completion_tokens and spelled == r.choices[0].message.content and
          all(len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob and
              t.logprob == t.top_logprobs[0].logprob and t.logprob <= 0 for t in lp),
          f"{model}: logprobs with top_logprobs 3 ({len(lp)} tokens, greedy: each token is its position's top)", r)
    streamed = []
    for ch in client.chat.completions.create(model=model, messages=MSGS, max_tokens=8, temperature=0, logprobs=True,
                                             top_logprobs=3, stream=True):
        if ch.choices and ch.choices[0].logprobs:
            streamed += ch.choices[0].logprobs.content
    check([(t.token, round(t.logprob, 5)) for t in streamed] == [(t.token, round(t.logprob, 5)) for t in lp],
          f"{model}: streamed logprobs are the same tokens and values", (streamed, lp))
    r = client.completions.create(model=model, prompt="The hotline", max_tokens=5, temperature=0, logprobs=2)
    l = r.choices[0].logprobs
    check(len(l.tokens) == 5 and "".join(l.tokens) == r.choices[0].text and len(l.top_logprobs[0]) <= 2 and
          l.text_offset[0] == 0 and all(x <= 0 for x in l.token_logprobs),
          f"{model}: completions logprobs 2 (legacy shape)", r)

# Pipelines as tools: GET /v1/tools, handed to the model, a call run on
# POST /v1/pipelines/NAME, its output back as the tool's result.
st, _, b = itlib.request(URL + "/v1/tools", "GET", None, {"Authorization": "Bearer " + KEY})
listed = json.loads(b)["data"] if st == 200 else []
check(st == 200 and [t["function"]["name"] for t in listed] == ["p"] and
      listed[0]["function"]["parameters"]["required"] == ["input"] and "p" in listed[0]["function"]["description"],
      "GET /v1/tools lists pipeline p as a function", b[:300])
if listed:
    # Random weights never close a free string: the model gets the listed
    # tool with its input capped (a real model needs no cap).
    capped = json.loads(json.dumps(listed))
    capped[0]["function"]["parameters"]["properties"]["input"]["maxLength"] = 40
    r = client.chat.completions.create(model="llama3", messages=[{"role": "user", "content": "Ask the hotline."}],
                                       tools=capped, tool_choice="required", parallel_tool_calls=False,
                                       max_tokens=400, temperature=0)
    call = (r.choices[0].message.tool_calls or [None])[0]
    st, _, out = itlib.request(URL + "/v1/pipelines/" + call.function.name, "POST",
                               json.loads(call.function.arguments),
                               {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}) \
        if call else (0, None, b"")
    result = json.loads(out).get("output") if st == 200 else None
    final = client.chat.completions.create(model="llama3", max_tokens=8, temperature=0, tools=listed,
                                           tool_choice="none", messages=[
        {"role": "user", "content": "Ask the hotline."},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]} if call else {},
        {"role": "tool", "tool_call_id": call.id if call else "", "content": result or ""}]) if result is not None \
        else None
    check(call and call.function.name == "p" and result is not None and final and final.choices[0].message.content,
          "an agent loop: the model calls pipeline p, the pipeline's output goes back as the tool's result, "
          "the model answers", (r, out[:200], final))

# What is refused, with OpenAI's 400.
bad = dict(WEATHER)
bad = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}}
for what, kw, want in [
        ("a parameters schema outside the subset", {"tools": [bad]}, "minimum"),
        ("tool_choice without tools", {"tool_choice": "required"}, "tool_choice"),
        ("an unknown named function", {"tools": [WEATHER], "tool_choice": {"type": "function",
                                                                          "function": {"name": "nope"}}}, "nope"),
        ("top_logprobs without logprobs", {"top_logprobs": 2}, "logprobs"),
        ("top_logprobs above 20", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("tools on a pipeline", {"model": "pipeline:p", "tools": [WEATHER]}, "tools")]:
    try:
        client.chat.completions.create(**{"model": "llama3", "messages": MSGS, "max_tokens": 4, **kw})
        check(False, f"refused: {what}", "accepted")
    except openai.BadRequestError as e:
        check(want in str(e), f"refused: {what}: 400", str(e))
sys.exit(check.summary())
