#!/usr/bin/env bash
# it_upstream_body.sh - the OpenAI bodies the router sends an upstream model
# (router/backend/upstream.c encodes them from the typed request, sb_backend.h): chat
# and completions, whole and streamed, every sampling parameter and none,
# content parts, "developer", a pipeline's chat and raw (chat: false)
# stages whose operator text holds special-token spellings. A fake upstream
# (tests/fake_openai.py) logs each body; each must be exactly the expected
# one, key order included. A negative OpenAI seed reaches the upstream as
# that integer (it once went out as 1.8446744073709552e+19, the seed's
# unsigned form on the worker's wire). Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init upstream-body
python3 tests/fake_openai.py "$tmp/port" "$tmp/req.log" & it_pids+=($!)
for _ in $(seq 100); do [ -f "$tmp/port" ] && break; sleep 0.05; done
fport=$(cat "$tmp/port")
read -r hport < <(it_ports 1)
cat > "$tmp/c.yaml" <<YAML
runtime: { dir: $tmp/run, http: 127.0.0.1:$hport, drain_ms: 500 }
models:
  up: { upstream: "http://127.0.0.1:$fport/v1", model: m, timeout_ms: 5000 }
pipelines:
  chatp:
    stages:
      - name: answer
        kind: generate
        model: up
        system: "You are <|im_start|> helpful. {{input}}"
        prompt: "Caller said: {{input}}"
        temperature: 0.3
        top_p: 0.9
        top_k: 40
        min_p: 0.05
        repeat_penalty: 1.1
        seed: 7
        max_tokens: 12
        stop: ["\n\n", "END"]
  rawp:
    stages:
      - { name: answer, kind: generate, model: up, chat: false, system: "SYS {{input}}", prompt: "Q: {{input}} A:", max_tokens: 5 }
YAML
"$SB" run -c "$tmp/c.yaml" > "$tmp/sb.log" 2>&1 & it_pids+=($!)
it_wait_http "http://127.0.0.1:$hport/health" 200 || { echo "it_upstream_body: FAIL router not up"; tail "$tmp/sb.log"; exit 1; }
post() { curl -s -m 10 -H 'Content-Type: application/json' -d "$2" "http://127.0.0.1:$hport$1" > /dev/null; }
# One request at a time, so the log's order is the requests' order.
post /v1/chat/completions '{"model":"up","messages":[{"role":"developer","content":"be brief"},{"role":"user","content":"hi \u00e9 \"q\""},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"user","content":"x"}],"max_tokens":9,"temperature":0.5,"top_p":0.25,"seed":-3,"stop":["a","b\n"]}'
post /v1/chat/completions '{"model":"up","messages":[{"role":"user","content":"stream me"}],"stream":true}'
post /v1/chat/completions '{"model":"up","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"top_k":3,"min_p":0.125,"repeat_penalty":1.5,"max_completion_tokens":4,"temperature":0,"stop":"one"}'
post /v1/completions '{"model":"up","prompt":"once upon","max_tokens":3,"temperature":1.25,"seed":12345678901}'
post /v1/completions '{"model":"up","prompt":["arr"],"stream":true}'
post /v1/pipelines/chatp '{"input":"my bill <|im_end|> is wrong"}'
post /v1/chat/completions '{"model":"pipeline:chatp","messages":[{"role":"user","content":"stream it"}],"stream":true}'
post /v1/pipelines/rawp '{"input":"raw one"}'
cat > "$tmp/want" <<'WANT'
{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi é \"q\""},{"role":"assistant","content":"ab"},{"role":"user","content":"x"}],"max_tokens":9,"temperature":0.5,"top_p":0.25,"seed":-3,"stop":["a","b\n"],"stream":false}
{"model":"m","messages":[{"role":"user","content":"stream me"}],"stream":true}
{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"max_tokens":4,"temperature":0,"top_k":3,"min_p":0.125,"repeat_penalty":1.5,"stop":["one"],"stream":false}
{"model":"m","prompt":"once upon","max_tokens":3,"temperature":1.25,"seed":12345678901,"stream":false}
{"model":"m","prompt":"arr","stream":true}
{"model":"m","messages":[{"role":"system","content":"You are <|im_start|> helpful. my bill <|im_end|> is wrong"},{"role":"user","content":"Caller said: my bill <|im_end|> is wrong"}],"max_tokens":12,"temperature":0.3,"top_p":0.9,"top_k":40,"min_p":0.05,"repeat_penalty":1.1,"seed":7,"stop":["\n\n","END"],"stream":false}
{"model":"m","messages":[{"role":"system","content":"You are <|im_start|> helpful. stream it"},{"role":"user","content":"Caller said: stream it"}],"max_tokens":12,"temperature":0.3,"top_p":0.9,"top_k":40,"min_p":0.05,"repeat_penalty":1.1,"seed":7,"stop":["\n\n","END"],"stream":true}
{"model":"m","prompt":"SYS raw oneQ: raw one A:","max_tokens":5,"temperature":0,"stream":false}
WANT
rc=0
diff "$tmp/want" "$tmp/req.log" > "$tmp/diff" || { echo "FAIL the upstream bodies differ (want / sent):"; cat "$tmp/diff"; rc=1; }
it_stop "${it_pids[1]}" "supervisor" || rc=1
it_san_check "$tmp/sb.log" "the router's log" || rc=1
[ $rc -eq 0 ] && echo "it_upstream_body: ok" || echo "it_upstream_body: FAIL"
exit $rc
