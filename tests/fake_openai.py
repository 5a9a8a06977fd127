#!/usr/bin/env python3
"""A scripted OpenAI-compatible endpoint for tests/it_ask_http.sh.

  fake_openai.py PORTFILE LOGFILE

Listens on 127.0.0.1 (a free port, written to PORTFILE), appends every
request body it receives to LOGFILE (one JSON per line) and answers by the
"model" field:
  (none) / "m"   the answer "你好, world 😀" (streamed as SSE in awkward chunk
                 splits with \\u escapes and comments, or as one JSON)
  "bad"          400 with an OpenAI error body
  "cut"          a stream that stops before [DONE] and closes
  "pipeline:P"   the answer "pipeline P"
  "endless"      an SSE line that never ends (20 MiB without a newline)
  "flood"        SSE events without end, 1 MiB of content each
  "notchunked"   Content-Length framing, with "chunked" in a later header
  "echo"         "echo: " and the last message's content (what the caller's
                 words became on the way), streamed in 3-byte pieces
  "tools"        with "tools" in the request: CALLS (streamed as fragments:
                 id and name first, the arguments in pieces, two calls
                 interleaved by index); with "logprobs": LOGPROBS on the
                 answer (streamed: one entry per chunk), or LEGACY_LOGPROBS
                 on /v1/completions
  "notools"      400 with an OpenAI error body when the request has "tools"
/v1/completions answers choices[0].text. Stops after 60 s idle.
"""
import json
import socket
import sys
import threading

ANSWER = ["\u4f60", "\u597d", ", world ", "\U0001F600"]
ESCAPE = [True, False, True, True]     # piece 1 as raw UTF-8, the emoji as a surrogate pair


# What "tools" answers with: two calls, one's arguments with non-ASCII.
CALLS = [{"id": "call_up_A7", "type": "function",
          "function": {"name": "get_weather", "arguments": '{"city": "Z\u00fcrich", "unit": "c"}'}},
         {"id": "call_up_B8", "type": "function",
          "function": {"name": "lookup", "arguments": '{"code": 4471, "tags": ["x", "\u4f60"]}'}}]
# Tokens: one whose bytes are half a UTF-8 character (its "token" text
# cannot hold them), and a non-ASCII one.
LOGPROBS = {"content": [
    {"token": "Hi", "logprob": -0.125, "bytes": [72, 105],
     "top_logprobs": [{"token": "Hi", "logprob": -0.125, "bytes": [72, 105]},
                      {"token": "Hello", "logprob": -2.5, "bytes": [72, 101, 108, 108, 111]}]},
    {"token": "\\xe4", "logprob": -1.0e-06, "bytes": [228],
     "top_logprobs": [{"token": "\\xe4", "logprob": -1.0e-06, "bytes": [228]},
                      {"token": "!", "logprob": -14.25, "bytes": [33]}]},
    {"token": "\u00e9", "logprob": -3.0517578125e-05, "bytes": [195, 169],
     "top_logprobs": [{"token": "\u00e9", "logprob": -3.0517578125e-05, "bytes": [195, 169]},
                      {"token": " ", "logprob": -10.5, "bytes": [32]}]}], "refusal": None}
LEGACY_LOGPROBS = {"tokens": ["raw", ":", "x"], "token_logprobs": [-0.5, -0.25, -4.0],
                   "top_logprobs": [{"raw": -0.5, "ra": -1.5}, {":": -0.25}, {"x": -4.0, "y": -4.5}],
                   "text_offset": [0, 3, 4]}


def tool_chunks(req):
    """A "tools" stream: calls as fragments, or text with logprobs per chunk."""
    def ev(delta, finish=None, lp=None):
        ch = {"index": 0, "delta": delta, "finish_reason": finish}
        if lp is not None:
            ch["logprobs"] = lp
        return "data: " + json.dumps({"choices": [ch]}) + "\n\n"
    out = []
    if req.get("tools"):
        a0, a1 = CALLS[0]["function"]["arguments"], CALLS[1]["function"]["arguments"]
        out.append(ev({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": CALLS[0]["id"], "type": "function",
             "function": {"name": CALLS[0]["function"]["name"], "arguments": ""}}]}))
        out.append(ev({"tool_calls": [{"index": 0, "function": {"arguments": a0[:7]}}]}))
        out.append(ev({"tool_calls": [{"index": 1, "id": CALLS[1]["id"], "type": "function",
                                       "function": {"name": CALLS[1]["function"]["name"], "arguments": a1[:5]}}]}))
        out.append(ev({"tool_calls": [{"index": 0, "function": {"arguments": a0[7:]}}]}))
        out.append(ev({"tool_calls": [{"index": 1, "function": {"arguments": a1[5:]}}]}))
        out.append(ev({}, "tool_calls"))
    else:
        texts = ["Hi", "", "\u00e9"]       # the half character's chunk carries no text yet
        for t, e in zip(texts, LOGPROBS["content"]):
            lp = {"content": [e], "refusal": None} if req.get("logprobs") else None
            out.append(ev({"content": t} if t else {}, None, lp))
        out.append(ev({}, "stop"))
    out.append("data: [DONE]\n\n")
    return [e.encode() for e in out]


def tools_answer(req, chat):
    """A "tools" answer as one JSON."""
    if not chat:
        choice = {"index": 0, "text": "raw:x", "finish_reason": "stop",
                  "logprobs": LEGACY_LOGPROBS if req.get("logprobs") is not None else None}
        return {"id": "x", "object": "text_completion", "choices": [choice]}
    if req.get("tools"):
        msg, finish = {"role": "assistant", "content": None, "tool_calls": CALLS}, "tool_calls"
    else:
        msg, finish = {"role": "assistant", "content": "Hi\u00e9"}, "stop"
    choice = {"index": 0, "message": msg, "finish_reason": finish,
              "logprobs": LOGPROBS if req.get("logprobs") else None}
    return {"id": "x", "object": "chat.completion", "choices": [choice],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}}


def sse_chunks(pieces, done=True):
    events = [": keep-alive comment\n\n"]
    for i, p in enumerate(pieces):
        delta = json.dumps({"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]},
                           ensure_ascii=ESCAPE[i % len(ESCAPE)])
        nl = "\r\n" if i % 2 else "\n"          # both line endings are legal
        events.append("data: " + delta + nl + nl)
    if done:
        events.append("data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + "\n\n")
        events.append("data: [DONE]\n\n")
    blob = "".join(events).encode()
    # Split at awkward places: inside "data:", inside a UTF-8 sequence, inside an escape.
    cuts, out, pos = [3, 17, 40, 41, 90, 91, 92, 150], [], 0
    for c in cuts + [len(blob)]:
        if c > pos and c <= len(blob):
            out.append(blob[pos:c])
            pos = c
    return out


def handle(conn, log):
    f = conn.makefile("rb")
    line = f.readline().decode()
    method, path, _ = line.split(" ", 2)
    headers = {}
    while True:
        h = f.readline().decode()
        if h in ("\r\n", "\n", ""):
            break
        k, v = h.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers.get("content-length", "0")))
    with open(log, "a") as lf:
        # backslashreplace: a body that is not UTF-8 is logged (as \\xNN,
        # which no JSON parser takes) instead of killing the handler
        lf.write(body.decode("utf-8", "backslashreplace") + "\n")
    req = json.loads(body)
    model = req.get("model", "m")
    stream = req.get("stream", False)
    if model == "bad":
        b = json.dumps({"error": {"message": "unknown model 'bad'", "type": "invalid_request_error"}}).encode()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
        return
    if model == "notools" and req.get("tools"):
        b = json.dumps({"error": {"message": "this model does not support tools", "type": "invalid_request_error"}}).encode()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
        return
    if model == "tools":
        chat = path.endswith("/chat/completions")
        if stream and chat:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for c in tool_chunks(req):
                conn.sendall(b"%x\r\n" % len(c) + c + b"\r\n")
            conn.sendall(b"0\r\n\r\n")
            return
        b = json.dumps(tools_answer(req, chat)).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
        return
    if model in ("endless", "flood"):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        big = json.dumps({"choices": [{"index": 0, "delta": {"content": "x" * (1 << 20)}}]}).encode()
        try:
            if model == "endless":
                conn.sendall(b"data: ")
                for _ in range(20):
                    conn.sendall(b"y" * (1 << 20))
            else:
                for _ in range(64):
                    conn.sendall(b"data: " + big + b"\n\n")
        except OSError:
            pass                    # the client gave up, as it should
        return
    if model == "notchunked":
        b = json.dumps({"choices": [{"index": 0, "message": {"content": "plain"}, "finish_reason": "stop"}]}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: identity\r\n"
                     b"X-Note: not chunked\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
        return
    pieces = ["pipeline " + model[9:]] if model.startswith("pipeline:") else ANSWER
    if model == "echo":
        said = "echo: " + str((req.get("messages") or [{}])[-1].get("content", req.get("prompt", "")))
        pieces = [said[i:i + 3] for i in range(0, len(said), 3)]
    if path.endswith("/completions") and not path.endswith("/chat/completions"):
        pieces = ["raw:" + req.get("prompt", "")]
    if stream:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunks = sse_chunks(pieces, done=model != "cut")
        if model == "cut":
            chunks = chunks[:3]
        for c in chunks:
            conn.sendall(b"%x\r\n" % len(c) + c + b"\r\n")
        if model != "cut":
            conn.sendall(b"0\r\n\r\n")
        return
    text = "".join(pieces)
    if path.endswith("/chat/completions"):
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
    else:
        choice = {"index": 0, "text": text, "finish_reason": "length"}
    b = json.dumps({"id": "x", "object": "chat.completion", "choices": [choice]}, ensure_ascii=True).encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(b) + b)


def main():
    portfile, log = sys.argv[1], sys.argv[2]
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    s.settimeout(60)
    with open(portfile + ".tmp", "w") as pf:
        pf.write(str(s.getsockname()[1]))
    import os
    os.rename(portfile + ".tmp", portfile)
    while True:
        try:
            conn, _ = s.accept()
        except socket.timeout:
            return
        def serve(c=conn):
            try:
                handle(c, log)
            finally:
                c.close()
        threading.Thread(target=serve, daemon=True).start()


if __name__ == "__main__":
    main()
