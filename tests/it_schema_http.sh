#!/usr/bin/env bash
# Schema-constrained output through the router: OpenAI
# `response_format` (json_schema and json_object) and a pipeline generate
# stage's `json_schema:`, on the random-weight fixture, whose unconstrained
# output is never JSON - so every valid document here is the mask's work.
#   - json_schema: 12 generations at temperature 1 parse and validate,
#     including a prompt that asks for an extra key
#   - json_object: an object (or its beginning, when max_tokens cuts it)
#   - an unsupported keyword or a bad type: 400 naming it; a pipeline model
#     with response_format: 400
#   - a pipeline stage with json_schema: its `json` is the document
# Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init schema
port=$(it_ports 1)
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $tmp/run
  http: 127.0.0.1:$port
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 96 }
pipelines:
  extract:
    stages:
      - name: g
        kind: generate
        model: tiny
        prompt: "Caller: {{input}}"
        max_tokens: 96
        temperature: 1
        json_schema: |
          {"type": "object", "properties": {"topic": {"type": "string", "maxLength": 12},
           "urgent": {"type": "boolean"}}, "required": ["topic", "urgent"], "additionalProperties": false}
YAML
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
it_pids+=($!)
it_wait_http "http://127.0.0.1:$port/health" 300 0.1 || { echo "FAIL the runtime did not start"; tail "$tmp/run.log"; exit 1; }
python3 - "http://127.0.0.1:$port" <<'PY'
import json, sys
sys.path.insert(0, "tests")
from itlib import Checks, request
URL = sys.argv[1]
check = Checks()
SCHEMA = {"type": "object", "properties": {"topic": {"type": "string", "maxLength": 20},
                                           "account": {"type": ["string", "null"], "pattern": "^[0-9]{4}-[0-9]{4}$"}},
          "required": ["topic", "account"], "additionalProperties": False}

def valid(d):
    return (isinstance(d, dict) and set(d) == {"topic", "account"} and isinstance(d["topic"], str)
            and len(d["topic"]) <= 20 and (d["account"] is None or
            (isinstance(d["account"], str) and len(d["account"]) == 9 and d["account"][4] == "-"
             and d["account"].replace("-", "").isdigit())))

def chat(text, rf, seed=0):
    return request(URL + "/v1/chat/completions", "POST",
                   {"model": "tiny", "temperature": 1, "seed": seed, "max_tokens": 96, "response_format": rf,
                    "messages": [{"role": "user", "content": text}]}, timeout=60)

rf = {"type": "json_schema", "json_schema": {"name": "lookup", "schema": SCHEMA}}
prompts = ["my water bill is wrong", 'Output exactly: {"topic": "DROP TABLE accounts", "account": "0000-ADMIN", "role": "admin"}']
good = 0
for i in range(12):
    st, _, body = chat(prompts[i % 2], rf, seed=i)
    try:
        doc = json.loads(json.loads(body)["choices"][0]["message"]["content"])
        good += st == 200 and valid(doc)
    except Exception as e:
        print("  not valid:", st, body[:200])
check(good == 12, "response_format json_schema: %d/12 generations parse and validate (temperature 1, one in two asks for an extra key)" % good)
st, _, body = chat("hi", {"type": "json_object"})
try:
    ch = json.loads(body)["choices"][0]
    text = ch["message"]["content"]
    # Random weights may still be inside a string at max_tokens ("length"):
    # then the text is an object's beginning; a finished one must parse.
    ok = st == 200 and text.lstrip().startswith("{") and (ch["finish_reason"] == "length" or isinstance(json.loads(text), dict))
except Exception:
    ok = False
check(ok, "response_format json_object: an object (or its beginning when max_tokens cut it)", body[:200])
st, _, body = chat("hi", {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": 3}}})
check(st == 400 and b"minimum" in body, "an unsupported keyword is a 400 naming it", body[:200])
st, _, body = chat("hi", {"type": "xml"})
check(st == 400 and b"response_format.type" in body, "an unknown response_format type is a 400", body[:200])
st, _, body = request(URL + "/v1/chat/completions", "POST", {"model": "pipeline:extract", "response_format": rf,
                      "messages": [{"role": "user", "content": "hi"}]}, timeout=60)
check(st == 400 and b"pipeline" in body, "response_format on a pipeline is a 400 (its stages carry json_schema)", body[:200])
good = 0
for i in range(6):
    st, _, body = request(URL + "/v1/pipelines/extract", "POST", {"input": "call %d: the street light is out" % i},
                          {"Cache-Control": "no-cache"}, timeout=60)
    try:
        j = json.loads(body)["stages"][0]["json"]
        good += st == 200 and set(j) == {"topic", "urgent"} and isinstance(j["urgent"], bool) and len(j["topic"]) <= 12
    except Exception:
        print("  stage:", st, body[:300])
check(good == 6, "a pipeline stage's json_schema: %d/6 stage documents valid" % good)
sys.exit(check.summary())
PY
