#!/usr/bin/env bash
# At rest: every file the runtime creates is 0600 and every directory 0700,
# whatever the umask; and a configured path the runtime writes whose
# existing file is open to other users (also behind a symlink), or is a
# directory, is refused at load, as runtime.dir already is - by `run --check`
# and by `run` itself (exit 2, the message naming the key, the path, the
# mode and the fix). runtime.secret_key_file too: owner-only and a key.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init at-rest
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
port=$(it_ports 1)
write_config() {   # write_config FILE RUN_DIR
    cat > "$1" <<YAML
runtime: { dir: $2, http: 127.0.0.1:$port, drain_ms: 2000 }
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
cache:
  path: $tmp/data/cache.sqlite
console:
  feedback_path: $tmp/data/feedback.sqlite
  otel_file: $tmp/data/otel.jsonl
knowledge:
  kb: { path: $tmp/data/kb.sqlite, embed_model: tiny }
pipelines:
  p:
    stages:
      - name: route
        kind: intent
        model: tiny
        labels:
          billing: { description: "bills", examples: ["the meter reading is off"] }
          human_agent: { description: "a person", examples: ["operator"] }
      - { name: answer, kind: generate, model: tiny, prompt: "Caller: {{input}}", max_tokens: 2 }
YAML
}

# ---- (a) what the runtime creates, with a umask that would allow anything
mkdir -p "$tmp/data" && chmod 700 "$tmp/data"
run=$tmp/a/b/run                     # a and b do not exist yet
write_config "$tmp/rt.yaml" "$run"
sed -i '/^knowledge:/,/^  kb:/d' "$tmp/rt.yaml"   # a knowledge base needs an encoder; its file is checked in (b)
(umask 000; exec "$SB" run -c "$tmp/rt.yaml") > "$tmp/run.log" 2>&1 &
sup=$!; it_pids+=($sup)
if it_wait_ready "$tmp/run.log" 60 "$sup"; then
    url=http://127.0.0.1:$port
    for i in 1 2 3; do
        curl -sf -H "X-Call-Id: rest-$i" -d "{\"input\": \"call $i about my bill\"}" "$url/v1/pipelines/p" > /dev/null ||
            bad "call $i"
    done
    curl -sf -d '{"intent": "billing"}' "$url/v1/calls/rest-1/feedback" > /dev/null || bad "feedback mark"
    out=$(python3 - "$tmp/a" "$tmp/data" <<'PY'
import os, stat, sys
seen, wrong = 0, []
for top in sys.argv[1:]:
    for root, dirs, files in os.walk(top):
        for name in [root] + [os.path.join(root, f) for f in files]:
            st = os.lstat(name)
            want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            seen += 1
            if stat.S_IMODE(st.st_mode) != want:
                wrong.append("%s %04o (want %04o)" % (name, stat.S_IMODE(st.st_mode), want))
print(seen, "; ".join(wrong))
PY
)
    n=${out%% *}; wrong=${out#* }
    kinds=$(cd "$tmp" && ls a a/b a/b/run data | tr '\n' ' ')
    [ -z "$wrong" ] && [ "$n" -ge 8 ] && ok "umask 000: all $n files and directories created are 0600 / 0700 ($kinds)" ||
        bad "modes under umask 000: $wrong"
    it_stop "$sup" runtime || fails=$((fails + 1))
else
    bad "the runtime did not start"; tail -20 "$tmp/run.log"
fi

# ---- (b) an existing configured file open to others is refused at load
write_config "$tmp/c.yaml" "$tmp/run2"
expect_refused() {   # expect_refused WHAT KEY PATH: --check and run both exit 2 naming KEY and PATH
    local what=$1 key=$2 path=$3
    "$SB" run -c "$tmp/c.yaml" --check > "$tmp/out" 2> "$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -qF "$key $path" "$tmp/err" && ok "--check refuses $what: $(head -1 "$tmp/err")" ||
        bad "--check on $what: rc $rc: $(cat "$tmp/err")"
    timeout 20 "$SB" run -c "$tmp/c.yaml" > "$tmp/out" 2> "$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -qF "$key $path" "$tmp/err" && ok "run refuses $what" || bad "run on $what: rc $rc: $(tail -3 "$tmp/err")"
}
rm -rf "$tmp/data"; mkdir -m 700 "$tmp/data"
for f in cache.sqlite cache.sqlite-wal feedback.sqlite feedback.sqlite-shm otel.jsonl kb.sqlite; do
    case $f in cache*) key=cache.path ;; feedback*) key=console.feedback_path ;; otel*) key=console.otel_file ;;
        kb*) key=knowledge.kb.path ;; esac
    for mode in 644 640 606; do
        : > "$tmp/data/$f"; chmod $mode "$tmp/data/$f"
        expect_refused "$f at 0$mode" "$key" "$tmp/data/$f"
        grep -qF "has mode 0$mode" "$tmp/err" && grep -qF "chmod 600" "$tmp/err" || bad "the message names mode and fix: $(cat "$tmp/err")"
    done
    chmod 600 "$tmp/data/$f"
done
"$SB" run -c "$tmp/c.yaml" --check > "$tmp/out" 2> "$tmp/err" && ok "every file at 0600: --check passes" ||
    bad "--check with private files: $(cat "$tmp/err")"
install -m 644 /dev/null "$tmp/data/wide"; ln -s "$tmp/data/wide" "$tmp/data/otel-link"
sed -i "s|otel_file: .*|otel_file: $tmp/data/otel-link|" "$tmp/c.yaml"
expect_refused "a symlink to a 0644 file" console.otel_file "$tmp/data/otel-link"
sed -i "s|otel_file: .*|otel_file: $tmp/data|" "$tmp/c.yaml"
expect_refused "a directory" console.otel_file "$tmp/data"
sed -i "s|otel_file: .*|otel_file: /dev/null|" "$tmp/c.yaml"
"$SB" run -c "$tmp/c.yaml" --check > "$tmp/out" 2> "$tmp/err" && ok "otel_file /dev/null (nothing at rest) passes" ||
    bad "--check with otel_file /dev/null: $(cat "$tmp/err")"
sed -i "s|otel_file: .*|otel_file: $tmp/data/otel.jsonl|" "$tmp/c.yaml"
# runtime.secret_key_file: read and checked at load.
sed -i "s|^runtime: { dir: \(.*\), http|runtime: { secret_key_file: $tmp/data/key, dir: \1, http|" "$tmp/c.yaml"
for k in "wide 644 $(printf 'ab%.0s' $(seq 32))" "short 600 abcdef"; do
    set -- $k
    printf '%s\n' "$3" > "$tmp/data/key"; chmod "$2" "$tmp/data/key"
    "$SB" run -c "$tmp/c.yaml" --check > "$tmp/out" 2> "$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -qF "secret_key_file $tmp/data/key" "$tmp/err" && ok "secret_key_file $1 is refused: $(cat "$tmp/err")" ||
        bad "secret_key_file $1: rc $rc: $(cat "$tmp/err")"
done
openssl rand -hex 32 > "$tmp/data/key" 2>/dev/null || python3 -c 'import os; print(os.urandom(32).hex())' > "$tmp/data/key"
chmod 600 "$tmp/data/key"
"$SB" run -c "$tmp/c.yaml" --check > "$tmp/out" 2> "$tmp/err" && ok "a 0600 file of 64 hex digits is a key" ||
    bad "a good secret_key_file: $(cat "$tmp/err")"
mkdir -m 755 "$tmp/run2"
"$SB" run -c "$tmp/c.yaml" --check > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -qF "runtime.dir $tmp/run2 has mode 0755" "$tmp/err" && ok "runtime.dir at 0755 is refused as before" ||
    bad "runtime.dir 0755: rc $rc: $(cat "$tmp/err")"

echo "$fails failed"
[ $fails -eq 0 ]
