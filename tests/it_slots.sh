#!/usr/bin/env bash
# Slots asked for and checked, with real processes: `switchboard run`
# starts a tiny fixture worker and the router; tests/slots_http.py talks to
# the gateway over HTTP - answers spoken as Chinese numerals and English
# words, several slots in one answer, a correction, a pattern and a
# resident-ID checksum refusing answers, re-asks until the call is handed
# off, refusals of an optional and of a required slot, the hand-off
# package (intent, slots, transcript, summary, reason), its delivery to a
# receiver that fails its first two attempts (and across a kill -9 of the
# router), a confirmation awaited across a kill -9 (the readback's slots
# and the awaited answer come back from the session), and a call routed to
# a hand-off intent.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init slots
run=$tmp/run
read -r port rport < <(it_ports 2)
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  drain_ms: 2000
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
cache:
  path: $run/cache.sqlite
pipelines:
  slots:
    conversation: { ttl_s: 600, max_turns: 20, handoff_url: "http://127.0.0.1:$rport/handoff" }
    stages:
      - name: extract
        kind: generate
        model: tiny
        json: true
        prompt: "Extract the account, the ID and the name from: {{input}}"
        max_tokens: 4
        ask:
          account:
            question: { zh: "请问您的账号是多少？", en: "What is your account number?" }
            reask: { zh: "账号是七位数字，请再说一遍。", en: "The account number has seven digits. Once more, please?" }
            pattern: "^[0-9]{7}$"
            retries: 1
          id:
            question: { zh: "请问您的身份证号码是多少？", en: "What is your resident ID number?" }
            checksum: resident_id
            optional: true
          name: { zh: "请问您怎么称呼？", en: "And your name?" }
        handoff: { zh: "正在为您转接人工服务，请稍候。", en: "Putting you through to a colleague." }
      - { name: say, kind: tool, command: ["/bin/echo", "account {{stages.extract.json.account}} id {{stages.extract.json.id}} name {{stages.extract.json.name}}"] }
  confirm:
    conversation: { ttl_s: 600 }
    stages:
      - name: extract
        kind: generate
        model: tiny
        json: true
        prompt: "Extract the account from: {{input}}"
        max_tokens: 4
        ask:
          account: { question: { en: "What is your account number?" }, pattern: "^[0-9]{7}$" }
      - name: file
        kind: tool
        command: ["/bin/echo", "filed for {{stages.extract.json.account}}"]
        confirm: true
        readback: { en: "I will file a request for account {{stages.extract.json.account}}. Go ahead?" }
  bytes:
    conversation: { ttl_s: 600, max_bytes: 1024, handoff_url: "http://127.0.0.1:$rport/handoff" }
    stages:
      - { name: say, kind: tool, command: ["/bin/echo", "ok"] }
  agent:
    conversation: { ttl_s: 600, handoff_intents: [human_agent, complaint] }
    stages:
      - name: route
        kind: intent
        model: tiny
        labels:
          human_agent: { description: "the caller asks for a person" }
          complaint: { description: "complaints" }
      - { name: say, kind: tool, command: ["/bin/echo", "a colleague will take your call"] }
YAML
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
rc=0
if ! it_wait_ready "$tmp/run.log" 90 "$sup"; then
    echo "FAIL the runtime did not come up"; tail -30 "$tmp/run.log"; exit 1
fi
python3 tests/slots_http.py "http://127.0.0.1:$port" "$rport" "$run" || rc=1
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; tail -40 "$tmp/run.log"; fi
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
