#!/usr/bin/env bash
# A conversation under a privacy policy, with real processes: `switchboard
# run` on the tiny fixtures, a pipeline with both `privacy:` and
# `conversation:` whose generate stage asks for a mobile and an e-mail,
# a `privacy: reveal` tool that records what it was given, and a tool that
# says both back. tests/privacy_session_http.py drives it over HTTP: the
# values said in one turn come back in a later turn's reply and to the
# revealing tool (also across a kill -9 of the router), while no byte of
# any value - in any rendering - is in a file under the runtime dir (the
# session store and its WAL included) or in the transcript; a hand-off
# package carries the real values, waits sealed, and reaches an https
# receiver (its CA the test's own: conversation.handoff_ca_file) with the
# real values, the console saying it was delivered; erase by value and by
# session work; a runtime started with another key refuses the sessions'
# turns with a clear error and keeps running. Also: the load-time checks
# (secret_key_file required, an https handoff_url).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init privsess
run=$tmp/run
read -r port rport < <(it_ports 2)
keys=$tmp/keys.txt
cat > "$keys" <<KEYS
app  app-key-0123456789  client
dpo  dpo-key-0123456789  console,admin
KEYS
chmod 600 "$keys"
openssl rand -hex 32 > "$tmp/key"
chmod 600 "$tmp/key"
# The hand-off receiver's TLS: a CA of the test's own, named by
# conversation.handoff_ca_file, and a certificate for 127.0.0.1.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/ca.key" -out "$tmp/ca.pem" -days 2 -subj "/CN=sb-test-ca" \
    2>/dev/null || { echo "FAIL openssl: cannot make the test CA"; exit 1; }
openssl req -newkey rsa:2048 -nodes -keyout "$tmp/srv.key" -out "$tmp/srv.csr" -subj "/CN=receiver" 2>/dev/null &&
openssl x509 -req -in "$tmp/srv.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial -days 2 -out "$tmp/srv.pem" \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n') 2>/dev/null ||
    { echo "FAIL openssl: cannot make the receiver's certificate"; exit 1; }
# The revealing tool: records what it was given, outside the runtime dir.
printf '%s\n' "printf '%s|%s\\n' \"\$1\" \"\$2\" >> $tmp/revealed.txt; echo looked up" > "$tmp/reveal.sh"
config() {   # config KEYLINE HANDOFF_URL > file
    cat <<YAML
runtime: { dir: $run, http: 127.0.0.1:$port, api_keys_file: $keys, drain_ms: 2000$1 }
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
cache:
  path: $run/cache.sqlite
pipelines:
  private:
    privacy:
      mode: pseudonymize
      patterns: [{ name: MEMBER, regex: "^8[0-9]{15}\$", on: digits, checksum: luhn }]
    conversation: { ttl_s: 600, handoff_url: "$2", handoff_ca_file: $tmp/ca.pem }
    stages:
      - name: extract
        kind: generate
        model: tiny
        json: true
        prompt: "Extract the phone and the e-mail from: {{input}}"
        max_tokens: 4
        ask:
          phone: { question: { en: "Your mobile number, please?" }, pattern: "^1[3-9][0-9]{9}\$" }
          email: { question: { en: "And your e-mail?" }, pattern: "@" }
      - name: lookup
        kind: tool
        privacy: reveal
        command: ["/bin/sh", "$tmp/reveal.sh", "{{stages.extract.json.phone}}", "{{stages.extract.json.email}}"]
      - { name: say, kind: tool, command: ["/bin/echo", "we will call {{stages.extract.json.phone}} and write to {{stages.extract.json.email}}"] }
  tight:
    privacy: { mode: pseudonymize }
    conversation: { max_bytes: 1024 }
    stages: [{ name: say, kind: tool, command: ["/bin/echo", "noted: {{input}}"] }]
YAML
}
rc=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; rc=1; }

# Load-time checks: no key file; an http hand-off url.
config "" "https://127.0.0.1:$rport/handoff" > "$tmp/nokey.yaml"
"$SB" run -c "$tmp/nokey.yaml" --check > /dev/null 2> "$tmp/err"; st=$?
[ $st -eq 2 ] && grep -q "pipelines.private.*runtime.secret_key_file" "$tmp/err" &&
    ok "privacy + conversation without runtime.secret_key_file is refused: $(head -1 "$tmp/err")" ||
    bad "no secret_key_file: rc $st: $(cat "$tmp/err")"
config ", secret_key_file: $tmp/key" "http://127.0.0.1:$rport/handoff" > "$tmp/http.yaml"
"$SB" run -c "$tmp/http.yaml" --check > /dev/null 2> "$tmp/err"; st=$?
[ $st -eq 2 ] && grep -q "pipelines.private.conversation.handoff_url: must be https://" "$tmp/err" &&
    ok "an http:// handoff_url under a privacy policy is refused: $(head -1 "$tmp/err")" ||
    bad "http handoff_url: rc $st: $(cat "$tmp/err")"

config ", secret_key_file: $tmp/key" "https://127.0.0.1:$rport/handoff" > "$tmp/rt.yaml"
"$SB" run -c "$tmp/rt.yaml" --check > /dev/null 2> "$tmp/err" ||
    bad "the config with both is refused: $(cat "$tmp/err")"
# Each start logs to its own file: a second start waiting on the first
# one's log would see its ready line and talk to a runtime not yet up.
start() {
    log=$1
    "$SB" run -c "$tmp/rt.yaml" > "$log" 2>&1 &
    sup=$!; it_pids+=($sup)
    it_wait_ready "$log" 90 "$sup" || { echo "FAIL the runtime did not start"; tail -30 "$log"; exit 1; }
}
start "$tmp/run.log"
SB_ERASE_KEY=dpo-key-0123456789 \
    python3 tests/privacy_session_http.py "http://127.0.0.1:$port" "$run" "$SB" "$tmp/rt.yaml" "$tmp/revealed.txt" \
    "$tmp/state.json" "$rport" "$tmp/srv.pem" "$tmp/srv.key" || rc=1
it_stop "$sup" runtime || rc=1
it_forget "$sup"
it_san_check "$tmp/run.log" runtime || rc=1

# After the stop (the store checkpointed and closed): still no value.
for v in 13800138000 "幺三八" 13912345678 13700001111 13500135000 8000123456789018 zhang.san li.si wang.wu; do
    if grep -rqaF -- "$v" "$run"; then bad "after stop: '$v' in $(grep -rlaF -- "$v" "$run")"; fi
done

# Another key: the kept session's turn is refused, clearly, and the runtime lives on.
openssl rand -hex 32 > "$tmp/key"
start "$tmp/run2.log"
python3 - "http://127.0.0.1:$port" "$tmp/state.json" <<'PY' || rc=1
import json, sys, urllib.request, urllib.error
url, state = sys.argv[1:3]
sid = json.load(open(state))["kept"]
def post(body):
    r = urllib.request.Request(url + "/v1/pipelines/private", json.dumps(body).encode(),
                               {"Authorization": "Bearer app-key-0123456789", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=60) as f:
            return f.status, json.load(f)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
st, j = post({"input": "li.si@example.com", "session": sid})
msg = (j.get("error") or {}).get("message", "")
ok1 = st == 500 and "do not open with runtime.secret_key_file" in msg and "13912345678" not in json.dumps(j)
print(("ok   " if ok1 else "FAIL ") + "a session sealed under another key: %d %s" % (st, msg[:160]))
st, j = post({"input": "a new caller"})
ok2 = st == 200 and j.get("awaiting") == {"kind": "slot", "slot": "phone"}
print(("ok   " if ok2 else "FAIL ") + "the runtime lives on: a new session starts (%d)" % st)
sys.exit(0 if ok1 and ok2 else 1)
PY
it_stop "$sup" runtime || rc=1
it_san_check "$tmp/run2.log" runtime || rc=1
if [ $rc -ne 0 ]; then echo "--- run.log, run2.log (tails)"; tail -40 "$tmp/run.log" "$tmp/run2.log"; fi
[ "$rc" = 0 ] && echo "it_privacy_session: all passed" || echo "it_privacy_session: FAILED"
exit $rc
