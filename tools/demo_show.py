#!/usr/bin/env python3
"""demo_show.py - print one hotline call of `make demo` (tools/demo.sh).

    demo_show.py N TOTAL EXPECTED BODY.json HEADERS.txt STATUS SECONDS

BODY.json is what POST /v1/pipelines/hotline answered, HEADERS.txt its
response headers (curl -D), STATUS the HTTP status and SECONDS curl's
time_total. Prints the caller's words, the routed intent and its
probability, the structured output of the tool model (extract) and of the
lookup tool, the composed reply and the timings. Exit status: 0 when the
call succeeded and produced a reply, 1 otherwise (with the error).
The last line on stdout is machine-readable for demo.sh:
    RESULT <intent> <as_expected 0|1> <x-cache> <seconds>
"""
import json
import sys
import textwrap

WIDTH = 100


def wrap(label, text, indent=16):
    lines = textwrap.wrap(text, WIDTH - indent) or [""]
    out = [f"    {label:<{indent - 4}}{lines[0]}"]
    out += [" " * indent + line for line in lines[1:]]
    return "\n".join(out)


def header(headers, name):
    for line in headers.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return "-"


def main():
    n, total, expected, body_path, headers_path, status, seconds = sys.argv[1:8]
    seconds = float(seconds)
    raw = open(body_path, encoding="utf-8", errors="replace").read()
    headers = open(headers_path, encoding="utf-8", errors="replace").read()
    try:
        d = json.loads(raw)
    except ValueError:
        print(f"    HTTP {status}, not JSON: {raw[:300]!r}")
        return 1
    if status != "200":
        err = d.get("error", {}) if isinstance(d, dict) else {}
        print(f"    HTTP {status}: {err.get('message', raw[:300])}")
        return 1
    stages = {s["name"]: s for s in d.get("stages", [])}
    intent, p = d.get("intent"), d.get("confidence") or 0.0
    mark = "" if intent == expected else f"   (expected {expected})"
    print(wrap("intent", f"{intent}  p={p:.2f}{mark}"))
    extract = stages.get("extract", {})
    if extract.get("status") == "ok":
        print(wrap("tool model", json.dumps(extract.get("json"), ensure_ascii=False)))
    elif extract.get("status") == "error":
        print(wrap("tool model", f"error: {extract.get('error')}  (output: {extract.get('output')!r})"))
    lookup = stages.get("lookup", {})
    facts = lookup.get("json") or {}
    if lookup.get("status") == "ok" and facts.get("found"):
        print(wrap("lookup", json.dumps({k: facts[k] for k in ("intent", "hotline", "hours", "account")
                                         if k in facts}, ensure_ascii=False)))
    elif lookup.get("status") == "error":
        print(wrap("lookup", f"error: {lookup.get('error')}"))
    docs = stages.get("docs", {})
    found = docs.get("json") or {}
    if docs.get("status") == "ok":
        print(wrap("docs", f"{found.get('cite')} (best cosine {found['passages'][0]['score']:.3f})"
                   if found.get("found") else "nothing in the policy base above min_score"))
    elif docs.get("status") == "error":
        print(wrap("docs", f"error: {docs.get('error')}"))
    reply = d.get("output") or ""
    print(wrap("reply", reply))
    timing = ", ".join(f"{s['name']} {s['ms'] / 1000:.1f}" for s in d.get("stages", [])
                       if s.get("status") in ("ok", "error"))
    xcache = header(headers, "X-Cache")
    if xcache == "hit":
        print(wrap("time", f"{seconds * 1000:.1f} ms  (X-Cache: hit: the stored answer; computing it took "
                           f"{timing} s)"))
    else:
        print(wrap("time", f"{seconds:.1f} s  ({timing} s; X-Cache: {xcache})"))
    print(f"RESULT {intent} {int(intent == expected)} {header(headers, 'X-Cache')} {seconds:.3f}")
    return 0 if reply.strip() and intent else 1


if __name__ == "__main__":
    sys.exit(main())
