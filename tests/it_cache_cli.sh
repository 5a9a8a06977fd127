#!/usr/bin/env bash
# it_cache_cli.sh - `switchboard cache ...` and `switchboard cloud` through
# the real binary: key, import, stats, list, get, export, purge, vacuum,
# check, and a sync between two edge files through a cloud on a throwaway
# PostgreSQL (that part is skipped, saying so, when PostgreSQL is missing).
set -u
[ -n "${IT_DEBUG:-}" ] && set -x
cd "$(dirname "$0")/.."
. tests/itlib.sh          # it_ports, it_wait_http (not it_init: its own cleanup)
SB=${SB_BIN:-bin/switchboard}
T=$(mktemp -d /tmp/sb-it-cache.XXXXXX)
PGBIN=""; PGUSER_RUN=""; CLOUD_PID=""; ROUTER_PID=""; WORKER_PID=""
cleanup() {
    for p in $ROUTER_PID $WORKER_PID; do kill -9 "$p" 2>/dev/null; done
    [ -n "$CLOUD_PID" ] && kill "$CLOUD_PID" 2>/dev/null && wait "$CLOUD_PID" 2>/dev/null
    [ -n "$PGBIN" ] && $PGUSER_RUN "$PGBIN/pg_ctl" -D "$T/pg/data" -m immediate -w stop >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "it_cache_cli: FAIL: $*" >&2; exit 1; }

# The committed NFKC tables are what tools/gen_nfkc.py makes from this Python
# (only comparable when its Unicode version is the one the tables record).
want=$(sed -n 's/.*sb_nfkc_unicode_version\[\] = "\(.*\)";/\1/p' cache/nfkc_data.c)
if [ "$(python3 -c 'import unicodedata; print(unicodedata.unidata_version)' 2>/dev/null)" = "$want" ]; then
    python3 tools/gen_nfkc.py --check || fail "cache/nfkc_data.c is not what tools/gen_nfkc.py generates"
fi

for cmd in "" stats list get purge export import vacuum check key sync; do
    "$SB" cache $cmd --help >/dev/null || fail "cache $cmd --help"
done
"$SB" cloud --help | grep -q "/v1/sync" || fail "cloud --help"
"$SB" cache stats >/dev/null 2>&1 && fail "stats without --db must fail"
"$SB" cache frobnicate --db "$T/a.sqlite" >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown command must exit 2"

# Entries go in through import; their keys come from `cache key`.
line() {  # question answer_base64
    local k; k=$("$SB" cache key --ns hotline --fingerprint fp1 --params t=0 "$1") || fail "key"
    local norm; norm=$("$SB" cache key --json --ns hotline --fingerprint fp1 --params t=0 "$1" | sed -n 's/^input //p')
    printf '{"key":"%s","namespace":"hotline","fingerprint":"fp1","input":"%s","params":"t=0","response_b64":"%s"}\n' "$k" "$norm" "$2"
}
{ line "Hello  WORLD" "aGk="; line "我要查社保缴费记录" "5p+l6K+i"; line "water bill" "d2F0ZXI="; } >"$T/in.jsonl"
k0=$("$SB" cache key --ns hotline --fingerprint fp1 --params t=0 "hello world")   # case is not folded
grep -q "\"key\":\"$k0\"" "$T/in.jsonl" && fail "a key folded case"
k1=$("$SB" cache key --ns hotline --fingerprint fp1 --params t=0 "  Hello   WORLD ")
grep -q "\"key\":\"$k1\"" "$T/in.jsonl" || fail "normalised keys differ"
"$SB" cache import --db "$T/a.sqlite" "$T/in.jsonl" | grep -q "imported 3 entries" || fail "import"
"$SB" cache stats --db "$T/a.sqlite" --json | grep -q '"entries":3' || fail "stats"
[ "$("$SB" cache get --db "$T/a.sqlite" "$k1")" = "hi" ] || fail "get by key"
[ "$("$SB" cache get --db "$T/a.sqlite" "${k1:0:16}")" = "hi" ] || fail "get by prefix"
"$SB" cache list --db "$T/a.sqlite" | grep -q "社保" || fail "list"
[ "$("$SB" cache list --db "$T/a.sqlite" --match 'water*' --json | wc -l)" -eq 1 ] || fail "list --match"
"$SB" cache export --db "$T/a.sqlite" -o "$T/out.jsonl" 2>/dev/null || fail "export"
[ "$(wc -l <"$T/out.jsonl")" -eq 3 ] || fail "export count"
# Callers' text: the export and the database files are owner-only.
for f in "$T/out.jsonl" "$T/a.sqlite"; do
    [ "$(stat -c %a "$f")" = 600 ] || fail "$f is mode $(stat -c %a "$f"), want 600"
done
"$SB" cache import --db "$T/b.sqlite" - <"$T/out.jsonl" >/dev/null || fail "import from stdin"
"$SB" cache purge --db "$T/b.sqlite" >/dev/null 2>&1 && fail "purge without a selection must fail"
"$SB" cache purge --db "$T/b.sqlite" --match 'water*' | grep -q "purged 1" || fail "purge --match"
"$SB" cache purge --db "$T/b.sqlite" "$k1" >/dev/null || fail "purge key"
"$SB" cache get --db "$T/b.sqlite" "$k1" >/dev/null 2>&1 && fail "purged key still there"
"$SB" cache vacuum --db "$T/b.sqlite" >/dev/null || fail "vacuum"
"$SB" cache check --db "$T/b.sqlite" | grep -q '^ok$' || fail "check"
head -c 8192 /dev/urandom >"$T/junk.sqlite"
"$SB" cache stats --db "$T/junk.sqlite" 2>&1 | grep -q corrupt || fail "corrupt file not reported"

# ---- sync through a cloud on PostgreSQL
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && PGBIN=$d; done
if [ -z "$PGBIN" ]; then
    echo "it_cache_cli: SKIP sync part: PostgreSQL is not installed (make deps installs it)"
    echo "it_cache_cli: ok"
    exit 0
fi
mkdir -p "$T/pg"
if [ "$(id -u)" -eq 0 ]; then chown postgres: "$T/pg"; chmod 755 "$T"; ru=$(it_runuser) || fail "no runuser"; PGUSER_RUN="$ru -u postgres --"; fi
$PGUSER_RUN "$PGBIN/initdb" -D "$T/pg/data" -A trust -U postgres --no-sync >"$T/initdb.log" 2>&1 || fail "initdb (see log)"
$PGUSER_RUN "$PGBIN/pg_ctl" -D "$T/pg/data" -l "$T/pg/log" -w -o "-k $T/pg -c listen_addresses='' -c fsync=off" start >/dev/null || fail "pg_ctl start"
cat >"$T/cloud.yaml" <<EOF
listen: 127.0.0.1:0
database: "host=$T/pg port=5432 user=postgres dbname=postgres"
admin_token: tok
push_threshold: 0
edges:
  a: sa
  b: sb
EOF
"$SB" cloud -c "$T/cloud.yaml" --port-file "$T/port" 2>"$T/cloud.log" &
CLOUD_PID=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || fail "cloud did not start: $(cat "$T/cloud.log")"
URL=http://127.0.0.1:$(cat "$T/port")
"$SB" cache sync --db "$T/a.sqlite" --url "$URL" --edge-id a --secret wrong 2>&1 | grep -q 401 || fail "bad secret accepted"
"$SB" cache sync --db "$T/a.sqlite" --url "$URL" --edge-id a --secret sa | tee "$T/sync_a.out" | grep -q "sent 0 deltas and 3 entries" || fail "sync a: $(cat "$T/sync_a.out")"
echo sb >"$T/secret"
"$SB" cache sync --db "$T/c.sqlite" --url "$URL" --edge-id b --secret-file "$T/secret" | grep -q "received 3 entries" || fail "sync c"
[ "$("$SB" cache get --db "$T/c.sqlite" "$k1")" = "hi" ] || fail "entry did not reach edge b"
SB_ADMIN_TOKEN=tok "$SB" cache purge --cloud "$URL" "$k1" | grep -q '^200' || fail "cloud purge"
SB_EDGE_SECRET=sb "$SB" cache sync --db "$T/c.sqlite" --url "$URL" --edge-id b | grep -q "1 deletions" || fail "deletion not delivered"
"$SB" cache get --db "$T/c.sqlite" "$k1" >/dev/null 2>&1 && fail "purged entry still at edge b"
# ---- the router syncs on its own (cache.sync): an answer asked through
# edge a's HTTP gateway reaches edge b without anyone running `cache sync` at a
DATA=$(realpath tests/data)
mkdir -m 0700 "$T/run"
echo sa >"$T/secret_a"
HPORT=$(it_ports 1)
cat >"$T/edge.yaml" <<EOF
runtime: { dir: $T/run, http: 127.0.0.1:$HPORT }
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 256, max_tokens: 8 }
cache:
  path: $T/run/edge.sqlite
  sync: { url: "$URL", edge_id: a, secret_file: $T/secret_a, interval_s: 5 }
pipelines: {}
EOF
"$SB" worker --name tiny --model "$DATA/tiny-llama-spm-Q4_K_M.gguf" --socket "$T/run/tiny.sock" -t 1 -c 256 2>"$T/worker.log" &
WORKER_PID=$!
"$SB" router -c "$T/edge.yaml" 2>"$T/router.log" &
ROUTER_PID=$!
it_wait_http "http://127.0.0.1:$HPORT/health" 100 0.1
Q='{"model":"tiny","temperature":0,"max_tokens":3,"messages":[{"role":"user","content":"how do I withdraw my housing fund?"}]}'
for i in 1 2 3; do curl -s -o /dev/null "http://127.0.0.1:$HPORT/v1/chat/completions" -d "$Q" || fail "ask $i"; done
for _ in $(seq 80); do grep -q "cache sync with .*sent" "$T/router.log" && break; sleep 0.25; done
grep -q "cache sync with .*sent" "$T/router.log" || fail "the router did not sync: $(tail -3 "$T/router.log")"
kill "$ROUTER_PID" "$WORKER_PID"; wait "$ROUTER_PID" "$WORKER_PID" 2>/dev/null
"$SB" cache sync --db "$T/c.sqlite" --url "$URL" --edge-id b --secret-file "$T/secret" | tee "$T/sync_c2.out" | grep -q "received 1 entries" ||
    fail "edge b did not receive the answer edge a's router synced: $(cat "$T/sync_c2.out")"
kill "$CLOUD_PID"; wait "$CLOUD_PID"; rc=$?; CLOUD_PID=""
[ $rc -eq 0 ] || fail "cloud exited with $rc on SIGTERM"
echo "it_cache_cli: ok"
