#!/usr/bin/env bash
# curl against the gateway of a running `switchboard run -c configs/demo.yaml`.
#   examples/curl.sh [BASE_URL]        (default http://127.0.0.1:8080)
# With runtime.api_key_env set, export SB_API_KEY=... first.
set -eu
BASE=${1:-http://127.0.0.1:8080}
AUTH=()
[ -n "${SB_API_KEY:-}" ] && AUTH=(-H "Authorization: Bearer $SB_API_KEY")
say() { printf '\n== %s\n' "$*"; }

say "health (no key needed)"
curl -s "$BASE/health"; echo
say "models and pipelines"
curl -s "${AUTH[@]}" "$BASE/v1/models"; echo
say "chat completion (one JSON answer)"
curl -s "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "composer", "max_tokens": 48, "temperature": 0,
  "messages": [{"role": "system", "content": "You are a helpful hotline agent."},
               {"role": "user", "content": "How do I pay my water bill?"}]}'; echo
say "streaming (Server-Sent Events; -N turns off curl's buffering)"
curl -sN "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "composer", "max_tokens": 32, "stream": true,
  "messages": [{"role": "user", "content": "Say hello in Chinese."}]}'
say "the hotline pipeline: intent, probabilities, every stage's output and time"
curl -s -i "${AUTH[@]}" "$BASE/v1/pipelines/hotline" -H 'Content-Type: application/json' \
     -d '{"input": "我要查社保缴费记录"}'; echo
say "only the routing stage"
curl -s "${AUTH[@]}" "$BASE/v1/pipelines/hotline" -d '{"input": "my water bill is wrong", "until": "route"}'; echo
say "the pipeline as an OpenAI model, streamed"
curl -sN "${AUTH[@]}" "$BASE/v1/chat/completions" -d '{
  "model": "pipeline:hotline", "stream": true,
  "messages": [{"role": "user", "content": "How do I withdraw my housing fund?"}]}'
say "metrics (Prometheus text)"
curl -s "$BASE/metrics" | grep -E '^switchboard_(http_requests_total|model_tokens_per_second|cache_requests_total)'
