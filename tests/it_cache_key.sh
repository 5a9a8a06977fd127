#!/usr/bin/env bash
# What the response cache treats as the same request, through real HTTP
# ("XK7Q2B" was served the answer to "xk7q2b"). The router runs on
# the random-weight fixture; only X-Cache is checked, never the text:
#   - chat at temperature 0 and a default pipeline: requests that differ in
#     case or width are misses; NFC-equivalent text and surrounding or
#     repeated spaces are hits; indentation and line breaks count
#   - a completion's prompt gets NFC only (its trailing space matters)
#   - a pipeline with `cache_fold: [case, width]` folds both
#   - `cache_fold` with an unknown value is a config error at its line
# Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init cachekey
port=$(it_ports 1)
write_config() {        # $1: the folded pipeline's cache_fold value
    cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $tmp/run
  http: 127.0.0.1:$port
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
cache:
  path: $tmp/run/cache.sqlite
pipelines:
  plain:
    stages:
      - { name: g, kind: generate, model: tiny, prompt: "Echo: {{input}}", max_tokens: 2 }
  folded:
    cache_fold: $1
    stages:
      - { name: g, kind: generate, model: tiny, prompt: "Echo: {{input}}", max_tokens: 2 }
YAML
}
rc=0
fail() { echo "FAIL $*"; rc=1; }

write_config "[case, colour]"
out=$("$SB" run -c "$tmp/rt.yaml" --check 2>&1)
[ $? -eq 2 ] && grep -q "rt.yaml:13:.*cache_fold: 'colour' is not one of case, width" <<<"$out" \
    || fail "cache_fold: [case, colour] is not refused at its line: $out"

write_config "[case, width]"
"$SB" run -c "$tmp/rt.yaml" > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
it_wait_http "http://127.0.0.1:$port/health" 300 0.1
python3 - "http://127.0.0.1:$port" <<'PY' || rc=1
import json, sys, urllib.request
URL = sys.argv[1]
bad = 0

def post(path, body):
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
        return r.headers.get("X-Cache")

def chat(text):
    return post("/v1/chat/completions", {"model": "tiny", "temperature": 0, "max_tokens": 2,
                                         "messages": [{"role": "user", "content": text}]})

def pipe(name, text):
    return post("/v1/pipelines/" + name, {"input": text})

def expect(what, got, want):
    global bad
    ok = got == want
    bad += not ok
    print("%s %s: X-Cache %s (want %s)" % ("ok  " if ok else "FAIL", what, got, want))

E = "Echo back this token exactly: "
expect("chat, first ask", chat(E + "xk7q2b"), "miss")
expect("chat, the same in capitals", chat(E + "XK7Q2B"), "miss")
expect("chat, full-width", chat(E + "ｘｋ７ｑ２ｂ"), "miss")
expect("chat, the first again", chat(E + "xk7q2b"), "hit")
expect("chat, surrounding and repeated spaces", chat("  Echo back  this token\u3000exactly:  xk7q2b \n"), "hit")
expect("chat, NFC-equivalent (e + U+0301)", chat("caf\u00e9?"), "miss")
expect("chat, NFC-equivalent (e + U+0301)", chat("cafe\u0301?"), "hit")
expect("chat, indented code", chat("fix:\n    a()\n    b()"), "miss")
expect("chat, other indentation", chat("fix:\n    a()\nb()"), "miss")
expect("chat, a line break is not a space", chat("fix: a() b()"), "miss")
def complete(prompt):
    return post("/v1/completions", {"model": "tiny", "temperature": 0, "max_tokens": 2, "prompt": prompt})

expect("completion, first ask", complete("Token: xk7q2b\nEcho:"), "miss")
expect("completion, trailing space (decides the next token)", complete("Token: xk7q2b\nEcho: "), "miss")
expect("completion, NFC-equivalent", complete("caf\u00e9"), "miss")
expect("completion, NFC-equivalent", complete("cafe\u0301"), "hit")
expect("pipeline plain, first ask", pipe("plain", "xk7q2b"), "miss")
expect("pipeline plain, capitals", pipe("plain", "XK7Q2B"), "miss")
expect("pipeline plain, full-width", pipe("plain", "ｘｋ７ｑ２ｂ"), "miss")
expect("pipeline plain, spaces", pipe("plain", " xk7q2b  "), "hit")
expect("pipeline folded, first ask", pipe("folded", "xk7q2b"), "miss")
expect("pipeline folded, capitals", pipe("folded", "XK7Q2B"), "hit")
expect("pipeline folded, full-width capitals", pipe("folded", "ＸＫ７Ｑ２Ｂ"), "hit")
sys.exit(1 if bad else 0)
PY
it_stop "$sup" runtime > /dev/null       # (a stop that hangs is it_router.sh's check)
it_san_check "$tmp/run.log" "the runtime's log" || rc=1
[ $rc -ne 0 ] && { echo "--- run.log (tail)"; tail -20 "$tmp/run.log"; }
exit $rc
