#!/usr/bin/env python3
"""demo_talk.py - one conversation of `make demo` (tools/demo.sh): turns of
one call through POST /v1/pipelines/PIPELINE, the session carried from the
first answer to the next turn.

    demo_talk.py [--last-reply-has TEXT] URL PIPELINE FIRST_AWAITS FINAL_INTENT WORDS [WORDS ...]

FIRST_AWAITS is what the first answer must await: slot, clarify or none.
FINAL_INTENT is the intent the last answer must have; with --last-reply-has,
its reply must contain TEXT (what a tool returned, say). Prints each turn:
the caller's words, the reply, what the pipeline awaits and the intent.
Exit status 0 when the conversation went as expected and ended awaiting
nothing, 1 otherwise (with the reason). Standard library only.
"""
import json
import sys
import time
import urllib.error
import urllib.request
import textwrap

WIDTH = 100


def say(label, text, indent=16):
    lines = textwrap.wrap(text, WIDTH - indent) or [""]
    print(f"    {label:<{indent - 4}}{lines[0]}")
    for line in lines[1:]:
        print(" " * indent + line)


def turn(url, pipeline, words, session):
    body = {"input": words}
    if session:
        body["session"] = session
    req = urllib.request.Request(f"{url}/v1/pipelines/{pipeline}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.load(r), time.monotonic() - t
    except urllib.error.HTTPError as e:
        raise SystemExit(f"    HTTP {e.code}: {e.read()[:300]!r}")


def main():
    args = sys.argv[1:]
    must_have = None
    if args[:1] == ["--last-reply-has"] and len(args) > 1:
        must_have, args = args[1], args[2:]
    if len(args) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    url, pipeline, first_awaits, final_intent = args[:4]
    session = None
    d = {}
    for i, words in enumerate(args[4:]):
        print(f"  caller: {words}")
        d, secs = turn(url, pipeline, words, session)
        session = d.get("session")
        awaiting = d.get("awaiting")
        say("reply", d.get("reply") or "")
        state = d.get("state") or {}
        say("intent", f"{d.get('intent')}  slots {json.dumps(state.get('slots') or {}, ensure_ascii=False)}")
        say("awaiting", f"{json.dumps(awaiting, ensure_ascii=False)}  ({secs:.1f} s, turn {state.get('turn')})")
        if i == 0:
            kind = (awaiting or {}).get("kind", "none")
            if kind != first_awaits:
                print(f"demo_talk: the first answer awaits {kind}, expected {first_awaits}")
                return 1
    if d.get("awaiting") is not None:
        print("demo_talk: the call still awaits an answer after its last turn")
        return 1
    if d.get("intent") != final_intent:
        print(f"demo_talk: the call ended at intent {d.get('intent')}, expected {final_intent}")
        return 1
    if not (d.get("reply") or "").strip():
        print("demo_talk: the last answer has no reply")
        return 1
    if must_have is not None and must_have not in d.get("reply"):
        print(f"demo_talk: the last reply does not contain {must_have!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
