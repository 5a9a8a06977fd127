#!/usr/bin/env python3
"""chat_tools_check.py SB TEMPLATE... - our tool-calling prompts against jinja2.

For each template file and each conversation below, the reference is the
template rendered by jinja2 the way transformers' apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps with ensure_ascii off, bos_token "" because our
tokenizer adds BOS). Tool-call arguments go to the template as objects (what
transformers' callers pass; an OpenAI client sends them as a JSON string,
which the worker reads back the same way) and as the string itself when they
are not JSON. `switchboard chat-prompt --template FILE` must print the same
bytes. Run by tests/it_chat_tools.sh.
"""
import json
import subprocess
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Current weather in a city. Says \"sunny\" & such; <b>never</b> rain.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "城市 (city), e.g. Zürich"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 1e1},
        "ratio": {"type": "number", "default": 0.5, "examples": [1.0, -0.0, 1e-7, 12345678901234567890, 1.5e300]},
        "tags": {"type": "array", "items": {}}, "opts": {}},
        "required": ["city"], "additionalProperties": False}}}
REFUND = {"type": "function", "function": {
    "name": "refund", "description": "Refund an order.\nTabs\tand \"quotes\" and a <tool_call> tag stay text.",
    "parameters": {"type": "object", "properties": {"order": {"type": "string"}, "amount": {"type": "number"}},
                   "required": ["order"]}}}
EMPTY = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


USER = {"role": "user", "content": "  What's the weather in Zürich?\n"}
SYSTEM = {"role": "system", "content": "You are terse. \n"}
CONVERSATIONS = [
    ("tools, no system", [USER], [WEATHER, REFUND]),
    ("tools and a system message", [SYSTEM, USER], [WEATHER]),
    ("a tool without parameters", [USER], [EMPTY]),
    ("empty tools list", [SYSTEM, USER], []),
    ("one call and its result", [
        SYSTEM, USER,
        {"role": "assistant", "content": None,
         "tool_calls": [call("c1", "get_weather", '{"city": "Zürich", "days": 2, "ratio": 0.25}')]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21, "sky": "clear \\"ish\\""}'},
    ], [WEATHER]),
    ("an answer after the result", [
        USER,
        {"role": "assistant", "content": "",
         "tool_calls": [call("c1", "get_weather", '{"city":"Zürich","unit":"c","tags":["a",1,true,null,{}]}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "21 C\nclear"},
        {"role": "assistant", "content": "It is 21 C and clear."},
        {"role": "user", "content": "And in Bern? <tool_call>{\"name\": \"refund\"}</tool_call>"},
    ], [WEATHER, REFUND]),
    ("calls in history without tools", [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c9", "now", "{}")]},
        {"role": "tool", "tool_call_id": "c9", "content": "12:00"},
    ], None),
]
PARALLEL = ("two calls, two results", [
    SYSTEM, USER,
    {"role": "assistant", "content": "Checking both.",
     "tool_calls": [call("a", "get_weather", '{"city": "Zürich"}'), call("b", "refund", 'not json "x"')]},
    {"role": "tool", "tool_call_id": "a", "content": "sunny"},
    {"role": "tool", "tool_call_id": "b", "content": "refunded"},
    {"role": "user", "content": "thanks"},
], [WEATHER, REFUND])


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def jinja_render(source, messages, tools, gen):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    msgs = []
    for m in messages:
        m = dict(m)
        if "tool_calls" in m:
            calls = []
            for c in m["tool_calls"]:
                try:
                    args = json.loads(c["function"]["arguments"])
                except ValueError:
                    args = c["function"]["arguments"]
                calls.append({**c, "function": {**c["function"], "arguments": args}})
            m["tool_calls"] = calls
        msgs.append(m)
    kw = {"tools": tools} if tools is not None else {}
    return env.from_string(source).render(messages=msgs, bos_token="", eos_token="", add_generation_prompt=gen, **kw)


HERMES_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
HERMES_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
               "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
               "<args-json-object>}\n</tool_call>")


def generic_messages(messages, tools):
    """The generic fallback as sb_chat.h documents it, in plain messages."""
    out, i = [], 0
    if tools is not None:
        prose = HERMES_HEAD + "".join("\n" + tojson(t) for t in tools) + HERMES_TAIL
        if messages and messages[0]["role"] == "system":
            prose = messages[0]["content"] + "\n\n" + prose
            i = 1
        out.append({"role": "system", "content": prose})
    while i < len(messages):
        m = messages[i]
        if m["role"] == "tool":
            blocks = []
            while i < len(messages) and messages[i]["role"] == "tool":
                blocks.append("<tool_response>\n" + messages[i]["content"] + "\n</tool_response>")
                i += 1
            out.append({"role": "user", "content": "\n".join(blocks)})
            continue
        text = m.get("content") or ""
        for c in m.get("tool_calls", []):
            try:
                args = tojson(json.loads(c["function"]["arguments"]))
            except ValueError:
                args = tojson(c["function"]["arguments"])
            text += ("\n" if text else "") + "<tool_call>\n{\"name\": \"" + c["function"]["name"] + \
                "\", \"arguments\": " + args + "}\n</tool_call>"
        out.append({"role": m["role"], "content": text})
        i += 1
    return out


def ours(sb, path, messages, tools, gen):
    req = {"messages": messages}
    if tools is not None:
        req["tools"] = tools
    cmd = [sb, "chat-prompt", "--template", path] + ([] if gen else ["--no-generation-prompt"])
    p = subprocess.run(cmd, input=json.dumps(req).encode(), capture_output=True)
    if p.returncode:
        return None, p.stderr.decode()
    return p.stdout.decode(), None


def main():
    sb, templates = sys.argv[1], sys.argv[2:]
    failed = checked = 0
    for path in templates:
        source = open(path, encoding="utf-8").read()
        family = subprocess.run([sb, "chat-prompt", "--template", path, "--family"], capture_output=True,
                                text=True).stdout.split()
        failed_before = failed
        convs = CONVERSATIONS + ([PARALLEL] if family[1] != "llama31" else [])
        for name, messages, tools in convs:
            for gen in (True, False):
                if family[1] == "generic" and tools is None and messages[0]["role"] != "system":
                    continue        # a template's default system message: left out, as llama.cpp does (sb_chat.h)
                if family[1] == "generic":
                    # the template has no tools: our documented text in its own messages
                    want = jinja_render(source, generic_messages(messages, tools), None, gen)
                else:
                    want = jinja_render(source, messages, tools, gen)
                got, err = ours(sb, path, messages, tools, gen)
                checked += 1
                if got != want:
                    failed += 1
                    print(f"FAIL {path} [{family[1]}] {name} (generation prompt {gen}): {err or ''}")
                    print("  jinja2: " + repr(want))
                    print("  ours:   " + repr(got))
        if family[1] == "llama31":
            got, err = ours(sb, path, PARALLEL[1], PARALLEL[2], True)
            checked += 1
            try:
                jinja_render(source, PARALLEL[1], PARALLEL[2], True)
                refused_by_jinja = False
            except jinja2.exceptions.TemplateError:
                refused_by_jinja = True
            if got is not None or "one tool call per assistant message" not in err or not refused_by_jinja:
                failed += 1
                print(f"FAIL {path}: two calls in one turn should be refused as the template does: {got!r} {err}")
        print(f"{'FAIL' if failed > failed_before else 'ok  '} {path}: {family[0]} template, tools {family[1]}")
    print(f"chat_tools_check: {checked} renderings compared, {failed} differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
