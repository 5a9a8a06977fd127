#!/usr/bin/env bash
# `switchboard ask --url` against a scripted OpenAI-compatible endpoint
# (tests/fake_openai.py): SSE over chunked encoding split at awkward places,
# \u escapes and surrogate pairs, a non-streamed answer, an error body, a
# stream cut before [DONE], the pipeline model name, --raw, and the request
# body ask sends. (Against the real router: the router's own tests.)
set -u
cd "$(dirname "$0")/.."
SB=$(realpath "${SB_BIN:-bin/switchboard}")
tmp=$(mktemp -d /tmp/sb-http-XXXXXX)
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
python3 tests/fake_openai.py "$tmp/port" "$tmp/requests.log" &
srv=$!
trap 'kill $srv 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
for i in $(seq 200); do [ -s "$tmp/port" ] && break; sleep 0.02; done
url=http://127.0.0.1:$(cat "$tmp/port")
want=$(printf '\xe4\xbd\xa0\xe5\xa5\xbd, world \xf0\x9f\x98\x80')

out=$("$SB" ask --url "$url" --temp 0 --max-tokens 7 "Hi there" 2> "$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ "$out" = "$want" ] && ok "streamed SSE answer decoded ($out)" || bad "stream: rc $rc out '$out' err $(cat "$tmp/err")"
last=$(tail -1 "$tmp/requests.log")
python3 - "$last" <<'EOF' && ok "request body: messages, stream, max_tokens, temperature" || bad "request body: $last"
import json, sys
r = json.loads(sys.argv[1])
assert r["messages"] == [{"role": "user", "content": "Hi there"}], r
assert r["stream"] is True and r["max_tokens"] == 7 and r["temperature"] == 0, r
assert "model" not in r, r
EOF

out=$("$SB" ask --url "$url/v1" --no-stream --model m --system 'Be "brief"' "Hi" 2> "$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ "$out" = "$want" ] && ok "non-streamed answer (base URL ending in /v1)" || bad "no-stream: rc $rc out '$out' err $(cat "$tmp/err")"
python3 - "$(tail -1 "$tmp/requests.log")" <<'EOF' && ok "system message and model sent, quotes escaped" || bad "system/model body"
import json, sys
r = json.loads(sys.argv[1])
assert r["model"] == "m" and r["stream"] is False, r
assert r["messages"][0] == {"role": "system", "content": 'Be "brief"'}, r
EOF

out=$("$SB" ask --url "$url" --model bad "Hi" 2> "$tmp/err"); rc=$?
[ $rc -eq 1 ] && grep -q "HTTP 400: unknown model 'bad'" "$tmp/err" && ok "an error body is reported, exit 1" || bad "error: rc $rc err $(cat "$tmp/err")"

out=$("$SB" ask --url "$url" --model cut "Hi" 2> "$tmp/err"); rc=$?
[ $rc -eq 1 ] && grep -q "ask:" "$tmp/err" && ok "a stream cut before [DONE] fails ($(head -1 "$tmp/err"))" || bad "cut: rc $rc err $(cat "$tmp/err")"

# A hostile or broken server cannot make ask grow without bound.
out=$("$SB" ask --url "$url" --model endless "Hi" 2> "$tmp/err"); rc=$?
[ $rc -eq 1 ] && grep -q "SSE line longer than" "$tmp/err" && ok "an SSE line without end is refused ($(head -1 "$tmp/err"))" || bad "endless: rc $rc err $(head -c 300 "$tmp/err")"
out=$("$SB" ask --url "$url" --model flood "Hi" 2> "$tmp/err" >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "answer longer than" "$tmp/err" && ok "an answer streamed without end is cut ($(head -1 "$tmp/err"))" || bad "flood: rc $rc err $(head -c 300 "$tmp/err")"
out=$("$SB" ask --url "$url" --no-stream --model notchunked "Hi" 2> "$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ "$out" = "plain" ] && ok "'chunked' in another header does not make the body chunked" || bad "notchunked: rc $rc out '$out' err $(cat "$tmp/err")"

out=$("$SB" ask --url "$url" --pipeline hotline "my water bill is wrong" 2> "$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ "$out" = "pipeline hotline" ] &&
    python3 -c 'import json,sys; assert json.loads(sys.argv[1])["model"] == "pipeline:hotline"' "$(tail -1 "$tmp/requests.log")" &&
    ok "--pipeline sends model pipeline:NAME" || bad "pipeline: rc $rc out '$out'"

out=$("$SB" ask --url "$url" --raw --no-stream "Once upon" 2> "$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ "$out" = "raw:Once upon" ] && ok "--raw uses /v1/completions with a prompt" || bad "raw: rc $rc out '$out' err $(cat "$tmp/err")"

# Text that is not UTF-8 (a file of another encoding on stdin, a stray
# byte): the request body is still valid JSON, each bad byte U+FFFD. (ask's
# own escaper used to copy such bytes through, and the server got invalid JSON.)
out=$("$SB" ask --url "$url" --no-stream --system $'sys\xfe' $'bad \xff\xe4\xbd byte' 2> "$tmp/err"); rc=$?
python3 - "$(tail -1 "$tmp/requests.log")" <<'EOF' && [ $rc -eq 0 ] && ok "invalid UTF-8 in the text: the body is valid JSON, U+FFFD" || bad "invalid UTF-8 body: rc $rc $(tail -1 "$tmp/requests.log")"
import json, sys
r = json.loads(sys.argv[1])
assert r["messages"] == [{"role": "system", "content": "sys\ufffd"},
                         {"role": "user", "content": "bad \ufffd\ufffd\ufffd byte"}], r
EOF

out=$("$SB" ask --url "$url" --json "Hi" 2> "$tmp/err"); rc=$?
python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d['ok'] and d['text']==sys.argv[2] and d['finish_reason']=='stop'" "$out" "$want" &&
    ok "--json on a stream prints one JSON object" || bad "json: rc $rc out '$out'"

"$SB" ask --url https://example.com "Hi" 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "https is not supported" "$tmp/err" && ok "https is refused as usage" || bad "https: rc $rc"
"$SB" ask --url "http://127.0.0.1:1" --wait-ms 0 "Hi" 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "onnection refused" "$tmp/err" && ok "nothing listening: exit 1" || bad "refused: rc $rc $(cat "$tmp/err")"
"$SB" ask --url "http://[::1]:1/v1" --wait-ms 0 "Hi" 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "connect ::1:1" "$tmp/err" && ok "an [IPv6]:port URL is parsed (then refused: exit 1)" || bad "ipv6: rc $rc $(cat "$tmp/err")"
for u in "http://127.0.0.1:" "http://127.0.0.1:99999" "http://127.0.0.1:x/v1" "ftp://127.0.0.1/" "http://u@127.0.0.1:1/"; do
    "$SB" ask --url "$u" "Hi" 2> "$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -q "expects http://HOST" "$tmp/err" && ok "bad URL $u: usage, exit 2" || bad "bad URL $u: rc $rc $(cat "$tmp/err")"
done
"$SB" ask "Hi" 2> /dev/null; rc=$?
[ $rc -eq 2 ] && ok "no --socket/--url: usage, exit 2" || bad "usage: rc $rc"
"$SB" ask --socket /nonexistent.sock --wait-ms 0 "Hi" 2> "$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q "nonexistent.sock" "$tmp/err" && ok "a missing socket: exit 1, named" || bad "missing socket: rc $rc"

echo "ask http: $pass passed, $fail failed"
[ $fail -eq 0 ]
