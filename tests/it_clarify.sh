#!/usr/bin/env bash
# Clarify instead of guess, with real processes: `switchboard run` starts
# the tiny random E5 fixture of tests/e5_tiny.py (built here) and the
# router; tests/clarify_http.py talks to the gateway over HTTP. The intent
# stage's clarify.margin is 2, above any top-2 gap of cosines, so every
# call is asked about: the labels offered (never out of scope), the
# question in the caller's language, answers by name, ordinal, yes/no and
# "neither", a new request routed again, and the hand-off after max. A
# second pipeline checks that a stage's `lexical:` words reach the router's
# routing (LEXICAL=0 shows the test failing without them).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init clarify
run=$tmp/run
port=$(it_ports 1)
it_tiny_e5 || { echo "FAIL convert-e5"; exit 1; }
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  drain_ms: 2000
models:
  e5: { gguf: $tmp/e5.gguf, threads: 1, max_queue: 8 }
pipelines:
  clarify:
    conversation: { ttl_s: 600, max_turns: 20 }
    stages:
      - name: route
        kind: intent
        model: e5
        labels:
          billing:     { display: { zh: "账单", en: "billing" }, examples: ["the meter reading is off", "电表读数不对"] }
          complaint:   { display: { zh: "投诉", en: "a complaint" }, examples: ["I want to complain"] }
          tax:         { display: { zh: "个税", en: "income tax" }, examples: ["my income tax return", "个税怎么申报"] }
          human_agent: { examples: ["operator"] }
        out_of_scope: ["what is the weather like", "明天会下雨吗"]
        classifier: 1nn         # random weights: only an exact example is sure to be nearest
        fallback: human_agent
        clarify: { margin: 2, max: 2 }
      - { name: say, kind: tool, command: ["/bin/echo", "routed to {{intent}}"] }
  lexical:
    stages:
      - name: route
        kind: intent
        model: e5
        labels:
          billing: { examples: ["电费太高了", "电表读数不对", "my gas bill is wrong"] }
          medical: { examples: ["医保怎么报销", "医保卡刷不了", "medical insurance card"] }
        classifier: logreg
        lexical: ${LEXICAL:-10}
      - { name: say, kind: tool, command: ["/bin/echo", "routed to {{intent}}"] }
YAML
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
rc=0
it_wait_http "http://127.0.0.1:$port/health" 200 0.05 || { echo "FAIL the runtime did not come up"; tail -20 "$tmp/run.log"; exit 1; }
python3 tests/clarify_http.py "http://127.0.0.1:$port" || rc=1
# lexical: 10 - the words outweigh the random encoder's vectors, so the
# router's stage (trained on the examples' words, each call's words beside
# its vector) sends each call to the label whose examples share its words.
python3 - "http://127.0.0.1:$port" <<'EOF' || rc=1
import json, sys
sys.path.insert(0, "tests")
import itlib
calls = {"医保卡丢了": "medical", "电费贵得离谱": "billing", "I lost my medical card": "medical",
         "the gas bill is too high": "billing", "电表坏了": "billing", "医保能报吗": "medical"}
bad = 0
for text, want in calls.items():
    status, _, raw = itlib.request(sys.argv[1] + "/v1/pipelines/lexical", "POST", {"input": text},
                                   {"Content-Type": "application/json"}, timeout=60)
    got = json.loads(raw)["state"]["intent"] if status == 200 else "HTTP %d" % status
    print(("ok  " if got == want else "FAIL") + " lexical: %s -> %s (want %s)" % (text, got, want))
    bad += got != want
sys.exit(1 if bad else 0)
EOF
if [ $rc -ne 0 ]; then echo "--- run.log (tail)"; tail -40 "$tmp/run.log"; fi
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
