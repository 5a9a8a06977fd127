#!/usr/bin/env bash
# `switchboard test`: scripted conversations (tests/data/convtest/) against
# a real runtime on the tiny fixture - one the command starts itself from
# the config, then one already running (--url): passing scripts, a wrong
# expectation named by its turn, malformed scripts named by FILE:LINE,
# --min-success, --json, and a runtime that is not there.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init convtest
run=$tmp/run
port=$(it_ports 1)
S=tests/data/convtest
# The tiny random E5 fixture (as it_clarify builds it): with 1nn an exact
# example is its own nearest, so the desk pipeline routes its scripts' words.
it_tiny_e5 || { echo "FAIL convert-e5"; exit 1; }
cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  api_key_env: SB_TEST_API_KEY
  drain_ms: 2000
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
  e5: { gguf: $tmp/e5.gguf, threads: 1, max_queue: 8 }
pipelines:
  ask:
    conversation: { ttl_s: 600 }
    stages:
      - name: extract
        kind: generate
        model: tiny
        json: true
        prompt: "Extract the account and the name from: {{input}}"
        max_tokens: 4
        ask:
          account: { zh: "请问您的账号是多少？", en: "What is your account number?" }
          name: { en: "And your name, please?" }
      - { name: say, kind: tool, command: ["/bin/echo", "account {{stages.extract.json.account}} for {{stages.extract.json.name}}"] }
  short:
    conversation: { ttl_s: 600, max_turns: 2 }
    stages:
      - { name: say, kind: tool, command: ["/bin/echo", "you said {{input}}"] }
  route:
    conversation: { ttl_s: 600 }
    stages:
      - name: route
        kind: intent
        model: tiny
        labels:
          billing: { description: "bills" }
          human: { description: "asks for a person" }
        min_confidence: 1
        fallback: human
      - { name: say, kind: tool, command: ["/bin/echo", "{{intent}}: {{input}}"] }
  desk:
    conversation: { ttl_s: 600, topic_switch: 0.1 }
    stages:
      - name: route
        kind: intent
        model: e5
        classifier: 1nn
        labels:
          billing: { examples: ["my bill is wrong", "电费不对"] }
          # The last example of each is there to be routed: were a refusal or a
          # plain yes routed, it would switch topic (topic.yaml checks it is not).
          tax: { examples: ["my income tax return", "个税怎么申报了", "I'd rather not say"] }
          human: { examples: ["operator", "转人工", "uh huh"] }
          # What the line does not handle: an answer routed here misses the
          # question, it is not a request to refuse (topic.yaml).
          out_of_scope: { examples: ["what is the weather", "the grey box by the door"] }
      - name: extract
        kind: generate
        model: tiny
        when: { intent: [billing] }
        json: true
        prompt: "The account in: {{input}}"
        max_tokens: 4
        ask:
          account:
            question: { zh: "请问您的账号是多少？", en: "What is your account number?" }
            pattern: "^[0-9]{7}$"
      - name: taxid
        kind: generate
        model: tiny
        when: { intent: [tax] }
        json: true
        prompt: "The account and year in: {{input}}"
        max_tokens: 4
        ask:
          account: { question: { en: "What is your account number?" }, pattern: "^[0-9]{7}$" }
          year: { question: { zh: "哪一年的？", en: "For which year?" }, pattern: "^20[0-9][0-9]$" }
      - name: open_case
        kind: tool
        when: { intent: [billing] }
        command: ["/bin/echo", "case opened for {{stages.extract.json.account}}"]
        confirm: true
        readback:
          zh: "将为账号 {{stages.extract.json.account}} 登记，可以吗？"
          en: "I will open a case for account {{stages.extract.json.account}}. Shall I go ahead?"
      - { name: file_tax, kind: tool, when: { intent: [tax] },
          command: ["/bin/echo", "tax return {{stages.taxid.json.year}} for {{stages.taxid.json.account}}"] }
      - { name: say, kind: tool, when: { intent: [human] }, command: ["/bin/echo", "{{intent}}: {{input}}"] }
  chat:
    conversation: { ttl_s: 600, history_turns: 2 }
    stages:
      - { name: say, kind: tool, command: ["/bin/echo", "heard: {{input}} | {{history}}"] }
  brief:
    conversation: { ttl_s: 600, history_turns: 50, history_tokens: 16 }
    stages:
      - { name: say, kind: tool, command: ["printf", "%s", "{{history}}"] }
  # The demo's shape: a confirmed tool, then a composer. The tool's reply
  # is the answer after the yes (reply.yaml), not the composer's words.
  case:
    conversation: { ttl_s: 600 }
    stages:
      - name: extract
        kind: generate
        model: tiny
        json: true
        prompt: "The account in: {{input}}"
        max_tokens: 4
        ask:
          account:
            question: { zh: "请问您的账号是多少？", en: "What is your account number?" }
            pattern: "^[0-9]{7}$"
      # A stand-in for a case system: a case number; a failure for an
      # account that starts with 0; an answer without a case for one
      # that starts with 9.
      - name: open_case
        kind: tool
        command: ["/bin/sh", "-c", "case \"\$1\" in 0*) echo 'case system down' >&2; exit 3;; 9*) echo '{\"status\": \"queued\"}'; exit 0;; esac; printf '{\"case\": \"BC-%s\"}' \"\$1\"",
                  "sh", "{{stages.extract.json.account}}"]
        confirm: true
        readback:
          zh: "将为账号 {{stages.extract.json.account}} 登记，可以吗？"
          en: "I will open a case for account {{stages.extract.json.account}}. Shall I go ahead?"
        reply:
          zh: "已为账号 {{stages.extract.json.account}} 登记，案件号 {{stages.open_case.json.case}}。"
          en: "Case {{stages.open_case.json.case}} is open for account {{stages.extract.json.account}}."
        handoff: { zh: "登记没有成功，正在为您转接人工服务。", en: "That did not go through; a colleague will take your call." }
      - { name: answer, kind: generate, model: tiny, prompt: "Answer the caller: {{input}}", max_tokens: 8 }
YAML
export SB_TEST_API_KEY="convtest-key-$$"
fail() { echo "FAIL $*"; echo "--- stdout"; head -40 "$tmp/out"; echo "--- stderr"; head -20 "$tmp/err"; exit 1; }
# t RC CMD...: run switchboard test, want exit RC (output in $tmp/out, $tmp/err)
t() {
    local want=$1 rc=0; shift
    "$SB" test "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" = "$want" ] || fail "switchboard test $* exited $rc, want $want"
}
has() { grep -qF -- "$2" "$tmp/$1" || fail "$1 lacks '$2'"; }

# Bad usage and bad scripts: exit 2 before any runtime is started.
t 0 --help; has out "--min-success X"
t 2 -c "$tmp/rt.yaml"; has err "no SCRIPT.yaml"
t 2 -c "$tmp/rt.yaml" --min-success 95 $S/pass.yaml; has err "fraction in [0, 1]"
t 2 -c "$tmp/rt.yaml" $S/bad_key.yaml
has err "$S/bad_key.yaml:6:9: conversations[0].turns[0]: unknown key 'reply_contain'"
t 2 -c "$tmp/rt.yaml" $S/bad_hangup.yaml
has err "$S/bad_hangup.yaml:5:9: conversations[0].turns[0]: a hang-up ends the conversation"
t 2 -c "$tmp/rt.yaml" $S/pass.yaml $S/bad_pipeline.yaml $S/bad_key.yaml
has err "$S/bad_pipeline.yaml:3:15: conversations[0].pipeline: 'nosuch' is not a pipeline of the config (it has: ask, short, route, desk, chat, brief, case)"
has err "bad_key.yaml:6:9"      # every bad script is named, not only the first
[ -s "$tmp/out" ] && fail "a bad script ran conversations"
ls "$run" >/dev/null 2>&1 && fail "a bad script started the runtime"
echo "ok   usage and malformed scripts: exit 2, FILE:LINE:COL and the key"

# The demo's starter set cannot run on the fixture (it neither routes nor
# extracts), but its format is kept valid.
t 0 --check examples/conversations/*.yaml
has out "ok    examples/conversations/human.yaml: 3 conversations, 6 turns"
t 2 --check $S/bad_key.yaml; has err "bad_key.yaml:6:9"
echo "ok   --check: the shipped examples/conversations/ scripts are well-formed"

# The runtime started by the command itself, and stopped at the end.
t 0 -c "$tmp/rt.yaml" $S/pass.yaml
has out "PASS  $S/pass.yaml: the account and the name asked for, in English (4 turns)"
has out "conversations 4, passed 4: task success 100.0 %"
has out "turns per call: mean 2.2, max 4"
has out "latency per turn (HTTP): p50"
has out "by language: en 3/3, zh 1/1"
curl -s -o /dev/null "http://127.0.0.1:$port/health" && fail "the started runtime still answers after the run"
grep -qF "did not stop cleanly" "$tmp/err" && fail "the started runtime did not stop cleanly"
echo "ok   a runtime started from the config: every conversation passes, then it is stopped"

"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
it_wait_ready "$tmp/run.log" 90 "$sup" || { echo "FAIL the runtime did not come up"; tail -30 "$tmp/run.log"; exit 1; }
url=http://127.0.0.1:$port

t 3 -c "$tmp/rt.yaml" $S/pass.yaml; has err "something already answers at $url"
echo "ok   a port already taken is not mistaken for the started runtime (exit 3)"

t 0 -c "$tmp/rt.yaml" --url "$url" $S/pass.yaml
has out "conversations 4, passed 4"
echo "ok   --url: the same scripts pass against a running runtime"

t 0 -c "$tmp/rt.yaml" --url "$url" $S/confirm.yaml $S/topic.yaml
has out "conversations 14, passed 14"
has out "by language: en 10/10, zh 4/4"
echo "ok   confirm before acting and topic changes: the readback, yes/no/corrections, a new topic keeping its slots, {{history}}"

t 0 -c "$tmp/rt.yaml" --url "$url" $S/reply.yaml
has out "conversations 4, passed 4"
echo "ok   a confirmed tool's reply: the case number its JSON returned, not the composer after it; a failed tool, or one without a case, hands off"

# Callers at once: every conversation, three times over, by 8 callers in
# parallel; the sessions must not cross (each run passes alone), nothing is
# lost, and the turns no model generated for are reported apart.
t 0 -c "$tmp/rt.yaml" --url "$url" --callers 8 --repeat 3 $S/pass.yaml $S/confirm.yaml $S/topic.yaml
has out "conversations 54, passed 54"
has out "callers 8: "
has out ", 0 conversations lost to HTTP errors"
has out "turns no model generated for: p50"
t 0 -c "$tmp/rt.yaml" --url "$url" --callers 4 --json $S/pass.yaml $S/confirm.yaml
python3 - "$tmp/out" <<'PY' || fail "--callers --json report"
import json, sys
r = json.load(open(sys.argv[1]))
lat = r["latency_ms"]
assert r["ok"] and r["callers"] == 4 and r["lost"] == 0 and r["wall_s"] > 0, r
assert 0 < lat["not_generated"]["turns"] < lat["turns"], lat     # extract turns generate, readbacks and tools do not
PY
t 2 -c "$tmp/rt.yaml" --callers 0 $S/pass.yaml; has err "--callers"
echo "ok   --callers/--repeat: 8 callers at once, 54 conversations pass, none lost; non-generated turns apart"

# {{history}}'s limits: the last history_turns turns, and the oldest
# dropped first until the estimate fits history_tokens (here 16: a turn of
# ten Chinese characters and 17 ASCII bytes is 15, the next one more).
python3 - "$url" "$SB_TEST_API_KEY" <<'PY' || fail "{{history}} limits"
import json, sys, urllib.request
url, key = sys.argv[1], sys.argv[2]
def turns(pipe, words):
    sid, out = None, []
    for w in words:
        body = {"input": w, **({"session": sid} if sid else {})}
        r = urllib.request.Request(f"{url}/v1/pipelines/{pipe}", json.dumps(body).encode(),
                                   {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        j = json.load(urllib.request.urlopen(r))
        sid = j["session"]
        out.append(j["reply"])
    return out
r = turns("chat", ["one", "two", "three", "four"])
assert r[3].startswith("heard: four | Caller: two\nAgent: heard: two | "), r
assert r[3].count("\nCaller: three\nAgent: heard: three | ") == 1, r
r = turns("brief", ["一二三四五六七八九十", "hi", "yo"])
assert r == ["", "Caller: 一二三四五六七八九十\nAgent:", ""], r
PY
echo "ok   {{history}}: the last history_turns turns, the oldest dropped first past history_tokens"

t 1 -c "$tmp/rt.yaml" --url "$url" $S/fail.yaml
has out "PASS  $S/fail.yaml: passes"
has out "FAIL  $S/fail.yaml: expects the wrong account: turn 2 ($S/fail.yaml:14): slots.account: expected 9999999, got \"4410032\""
has out "conversations 2, passed 1: task success 50.0 %"
echo "ok   a wrong expectation fails the run (exit 1), naming the turn, its line, expected and got"

t 0 -c "$tmp/rt.yaml" --url "$url" --min-success 0.8 $S/pass.yaml $S/fail.yaml
has out "conversations 6, passed 5: task success 83.3 %"
has out "the bar (--min-success) 80.0 %: met"
t 1 -c "$tmp/rt.yaml" --url "$url" --min-success 0.9 $S/pass.yaml $S/fail.yaml
has out "the bar (--min-success) 90.0 %: NOT met"
echo "ok   --min-success: 5 of 6 meet 0.8 (exit 0), not 0.9 (exit 1)"

t 1 -c "$tmp/rt.yaml" --url "$url" --json $S/fail.yaml
python3 - "$tmp/out" <<'PY' || fail "--json report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ok"] is False and r["conversations"] == 2 and r["passed"] == 1 and r["task_success"] == 0.5, r
c = r["scripts"][0]["conversations"]
assert c[0]["passed"] and c[0]["failure"] is None and len(c[0]["latency_ms"]) == 1, c[0]
assert c[1]["failure"]["turn"] == 2 and c[1]["failure"]["line"] == 14, c[1]
assert "slots.account" in c[1]["failure"]["message"], c[1]
assert r["latency_ms"]["turns"] == 3 and r["latency_ms"]["p95"] >= r["latency_ms"]["p50"] > 0, r
assert r["turns_per_call"] == {"mean": 1.5, "max": 2}, r
PY
echo "ok   --json: the same report, machine-readable"

SB_OTHER_KEY=wrong-key t 1 --url "$url" --api-key-env SB_OTHER_KEY $S/fail.yaml
has out "HTTP 401"
echo "ok   --api-key-env: the key sent is the named variable's (a wrong one is refused)"

rc=0
it_stop "$sup" runtime || rc=1
t 3 -c "$tmp/rt.yaml" --url "$url" $S/pass.yaml; has err "does not answer 200"
echo "ok   a runtime that is not there: exit 3"
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
exit $rc
