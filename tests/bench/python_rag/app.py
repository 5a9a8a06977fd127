"""app.py - the Python RAG baseline served by FastAPI + uvicorn, with our
router's two doors for a pipeline:

    POST /v1/pipelines/NAME   {"input": str, "until"?: stage} -> the reply of ours'
                              pipeline door ({"debug": true} adds the prompt
                              and its token ids)
    POST /v1/chat/completions {"model": "pipeline:NAME", "messages": [...],
                               "stream": bool} -> OpenAI JSON, or SSE chunks
    GET  /health

Started by tools/rag_bench.sh as

    RAG_CONFIG=tests/bench/rag_bench.yaml RAG_PIPELINE=rag RAG_STORE=DIR [RAG_THREADS=N] [RAG_EMBED_THREADS=N] \
        uvicorn app:app --app-dir tests/bench/python_rag --workers W --port P

after ingest.py filled RAG_STORE. A call's work runs on Starlette's thread
pool (run_in_threadpool, or a sync generator for a stream), so a call
waiting for a model does not block the event loop, and the two models run
side by side (rag.py).
"""
import json
import os
import time
import uuid

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.concurrency import run_in_threadpool  # starlette's, re-exported by the package we pin

from rag import Rag

app = FastAPI(title="python-rag-baseline")

def _env_int(name):
    return int(os.environ[name]) if os.environ.get(name) else None


rag = Rag(os.environ["RAG_CONFIG"], os.environ.get("RAG_PIPELINE", "rag"), os.environ["RAG_STORE"],
          threads=_env_int("RAG_THREADS"), embed_threads=_env_int("RAG_EMBED_THREADS"))


def _check_pipeline(name):
    if name != rag.pipe.name:
        raise HTTPException(404, {"type": "not_found", "message": "no pipeline named '%s'" % name})


def _json_body(raw):
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise HTTPException(400, {"type": "invalid_request", "message": "body is not JSON: %s" % e})
    if not isinstance(body, dict):
        raise HTTPException(400, {"type": "invalid_request", "message": "body must be a JSON object"})
    return body


@app.get("/health")
def health():
    return {"status": "ok", "pid": os.getpid()}


@app.post("/v1/pipelines/{name}")
async def pipeline(name: str, request: Request):
    _check_pipeline(name)
    body = _json_body(await request.body())      # with or without a JSON Content-Type, as ours
    text = body.get("input")
    if not isinstance(text, str) or not text:
        raise HTTPException(400, {"type": "invalid_request", "message": "'input': expected a non-empty string"})
    until = body.get("until")
    if until is not None and until not in (rag.pipe.retrieve["name"], rag.pipe.generate["name"]):
        raise HTTPException(400, {"type": "invalid_value", "message": "'until': no stage named '%s'" % until})
    return JSONResponse(await run_in_threadpool(rag.run, text, bool(body.get("debug")), until))


def _chunk(cid, created, model, delta, finish=None):
    return "data: " + json.dumps({
        "id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]},
        ensure_ascii=False) + "\n\n"


def _stream(question, model):
    """The retrieve stage, then the answer's tokens as they come."""
    cid, created = "chatcmpl-" + uuid.uuid4().hex[:14], int(time.time())
    _, text, _ = rag.retrieve(question)
    yield _chunk(cid, created, model, {"role": "assistant", "content": ""})
    finish = "stop"
    for c in rag.generate_stream(rag.messages(question, text)):
        ch = c["choices"][0]
        piece = ch["delta"].get("content")
        if piece:
            yield _chunk(cid, created, model, {"content": piece})
        finish = ch.get("finish_reason") or finish
    yield _chunk(cid, created, model, {}, finish)
    yield "data: [DONE]\n\n"


@app.post("/v1/chat/completions")
async def chat(request: Request):
    body = _json_body(await request.body())
    model = body.get("model", "")
    if not isinstance(model, str) or not model.startswith("pipeline:"):
        raise HTTPException(400, {"type": "invalid_request", "message": "'model': only pipeline:NAME is served here"})
    _check_pipeline(model[len("pipeline:"):])
    users = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    question = users[-1].get("content") if users else None
    if not isinstance(question, str) or not question:
        raise HTTPException(400, {"type": "invalid_request", "message": "'messages': no user message with text"})
    if body.get("stream"):
        # A sync generator: Starlette pulls it on the thread pool.
        return StreamingResponse(_stream(question, model), media_type="text/event-stream")
    r = await run_in_threadpool(rag.run, question)
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:14], "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": r["output"]},
                                         "finish_reason": "stop"}],
            "usage": dict(r["usage"], total_tokens=sum(r["usage"].values()))}
