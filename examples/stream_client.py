#!/usr/bin/env python3
"""A streaming client with nothing but the standard library: it reads the
Server-Sent Events of /v1/chat/completions and prints tokens as they arrive.

    python3 examples/stream_client.py "question" [--model M] [--url BASE]

Every event is a line "data: {json chunk}" and a blank line; the stream ends
with "data: [DONE]". (With the openai package: stream=True does the same.)
"""
import argparse
import http.client
import json
import os
import sys
import time
import urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("question")
ap.add_argument("--model", default="pipeline:hotline")
ap.add_argument("--url", default="http://127.0.0.1:8080")
ap.add_argument("--max-tokens", type=int, default=128)
a = ap.parse_args()

u = urllib.parse.urlparse(a.url)
conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
headers = {"Content-Type": "application/json"}
if os.environ.get("SB_API_KEY"):
    headers["Authorization"] = "Bearer " + os.environ["SB_API_KEY"]
body = {"model": a.model, "stream": True, "max_tokens": a.max_tokens,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": a.question}]}
t0 = time.time()
conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
resp = conn.getresponse()
if resp.status != 200:
    print(resp.status, resp.read().decode(), file=sys.stderr)
    sys.exit(1)
first = None
for raw in resp:
    line = raw.decode().rstrip("\n")
    if not line.startswith("data: "):
        continue
    data = line[6:]
    if data == "[DONE]":
        break
    chunk = json.loads(data)
    if "error" in chunk:
        print("\nerror:", chunk["error"]["message"], file=sys.stderr)
        sys.exit(1)
    for choice in chunk.get("choices", []):
        piece = choice.get("delta", {}).get("content")
        if piece:
            first = first or time.time() - t0
            print(piece, end="", flush=True)
    if chunk.get("usage"):
        u = chunk["usage"]
        print(f"\n[{u['completion_tokens']} tokens, first after {first or 0:.2f} s, "
              f"all in {time.time() - t0:.2f} s, X-Cache: {resp.getheader('X-Cache')}]")
