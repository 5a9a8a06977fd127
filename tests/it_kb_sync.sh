#!/usr/bin/env bash
# Knowledge-base sync with real processes: a `switchboard
# cloud` on a throwaway PostgreSQL serving what `kb publish` wrote into its
# kb_dir, an edge pulling it with `kb pull` (credentials from the edge's
# cache.sync) and an edge runtime whose retrieve stage answers from the
# pulled base. Checked: a new version is pulled and served by the running
# router; a snapshot that is not the published one (bytes changed on the
# cloud's disk) and a manifest altered in transit (bad MAC, through a
# tampering proxy) are refused and the old base keeps answering; kill -9 at
# many points of a pull leaves a whole base (old or new, never a mix).
# The router pulls a base marked `pull: true` at start. Skipped, saying so,
# without PostgreSQL. Set SB_BIN to test another binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init kbsync
fail() { echo "it_kb_sync: FAIL: $*" >&2; tail -5 "$tmp/cloud.log" "$tmp/run.log" >&2 2>/dev/null; exit 1; }
PGBIN=""; PGUSER_RUN=""
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && PGBIN=$d; done
if [ -z "$PGBIN" ]; then echo "it_kb_sync: SKIP: PostgreSQL is not installed (make deps installs it)"; exit 0; fi
it_cleanup_more() { $PGUSER_RUN "$PGBIN/pg_ctl" -D "$tmp/pg/data" -m immediate -w stop >/dev/null 2>&1; }
mkdir -p "$tmp/pg" "$tmp/kbdir" "$tmp/edge"
if [ "$(id -u)" -eq 0 ]; then chown postgres: "$tmp/pg"; chmod 755 "$tmp"; ru=$(it_runuser) || fail "no runuser"; PGUSER_RUN="$ru -u postgres --"; fi
$PGUSER_RUN "$PGBIN/initdb" -D "$tmp/pg/data" -A trust -U postgres --no-sync >"$tmp/initdb.log" 2>&1 || fail "initdb"
$PGUSER_RUN "$PGBIN/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/log" -w \
    -o "-k $tmp/pg -c listen_addresses='' -c fsync=off" start >/dev/null || fail "pg_ctl start"
python3 tests/e5_tiny.py --model-only "$SB" "$tmp" > /dev/null

cat > "$tmp/cloud.yaml" <<EOF
listen: 127.0.0.1:0
database: "host=$tmp/pg port=5432 user=postgres dbname=postgres"
kb_dir: $tmp/kbdir
edges:
  e1: s3cret
EOF
"$SB" cloud -c "$tmp/cloud.yaml" --port-file "$tmp/port" 2>"$tmp/cloud.log" &
it_pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || fail "the cloud did not start"
CLOUD=http://127.0.0.1:$(cat "$tmp/port")

# The cloud side's base (its own config), and the edge's: same name, same
# encoder file, the edge's base starts empty.
cat > "$tmp/pub.yaml" <<EOF
models: { e5: { gguf: $tmp/tiny-q8_0.gguf, threads: 1 } }
knowledge: { pol: { path: $tmp/pub.sqlite, embed_model: e5, chunk_tokens: 64, overlap: 8 } }
EOF
echo s3cret > "$tmp/secret"
read -r port proxy < <(it_ports 2)
edge_cfg() {    # URL
    cat <<EOF
runtime: { dir: $tmp/run, http: 127.0.0.1:$port }
models: { e5: { gguf: $tmp/tiny-q8_0.gguf, threads: 1 } }
knowledge: { pol: { path: $tmp/edge/pol.sqlite, embed_model: e5, chunk_tokens: 64, overlap: 8, pull: true } }
cache: { sync: { url: "$1", edge_id: e1, secret_file: $tmp/secret, interval_s: 3600 } }
pipelines:
  ask:
    cache: false
    stages:
      - { name: docs, kind: retrieve, kb: pol, mode: bm25, top_k: 1 }
EOF
}
edge_cfg "$CLOUD" > "$tmp/edge.yaml"
edge_cfg "http://127.0.0.1:$proxy" > "$tmp/mitm.yaml"
publish() {     # TEXT: the rent note says TEXT; publish it
    printf '# Rent\n\nBring the lease. %s\n' "$1" > "$tmp/rent.md"
    "$SB" kb add -c "$tmp/pub.yaml" --quiet "$tmp/rent.md" || fail "kb add"
    "$SB" kb publish -c "$tmp/pub.yaml" --dir "$tmp/kbdir" > "$tmp/pub.out" || fail "kb publish: $(cat "$tmp/pub.out")"
}
pull() { "$SB" kb pull -c "$tmp/${1:-edge}.yaml" > "$tmp/pull.out" 2> "$tmp/pull.err"; }
ask() { curl -s -m 10 "http://127.0.0.1:$port/v1/pipelines/ask" -d '{"input": "lease"}'; }

it_expect 2 "--dir DIR is required" "$SB" kb publish -c "$tmp/pub.yaml"
publish "Money arrives within five days."
# Only the cloud's edges get it: unsigned requests are refused.
[ "$(curl -s -o /dev/null -w '%{http_code}' "$CLOUD/v1/kb/pol/snapshot")" = 401 ] || fail "an unsigned GET was served"
it_expect 1 "answered 401" "$SB" kb pull -c "$tmp/edge.yaml" --edge-id nobody
grep -q "^published pol: version" "$tmp/pub.out" || fail "publish: $(cat "$tmp/pub.out")"
[ "$(stat -c %a "$tmp/kbdir/pol.sqlite")" = 600 ] || fail "the published snapshot is not 0600"
# The edge runtime (knowledge.pol.pull: true) pulls the base when it starts.
"$SB" run -c "$tmp/edge.yaml" > "$tmp/run.log" 2>&1 &
it_pids+=($!)
it_wait_http "http://127.0.0.1:$port/health" 200 0.05 || fail "the edge runtime did not come up"
for _ in $(seq 100); do ask | grep -q "five days" && break; sleep 0.05; done
ask | grep -q "five days" || fail "the edge does not answer from the base it pulled at start: $(ask)"
grep -q "knowledge base 'pol': pulled version" "$tmp/run.log" || fail "the router did not log its pull"
pull && grep -q "up to date" "$tmp/pull.out" || fail "kb pull after the router's is not up to date: $(cat "$tmp/pull.out")"
[ "$(stat -c %a "$tmp/edge/pol.sqlite")" = 600 ] || fail "the edge's base is not 0600"
python3 -c 'import sys; h = open(sys.argv[1], "rb").read(20); sys.exit(h[18] != 2)' "$tmp/edge/pol.sqlite" ||
    fail "the pulled base is no longer in WAL mode"

# A snapshot that is not the published one: refused, the old base answers.
publish "Money arrives within two days."
python3 - "$tmp/kbdir/pol.sqlite" <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-100] ^= 0xFF; open(p, "wb").write(b)
EOF
pull && fail "a tampered snapshot was accepted"
grep -q "is not the one the manifest names" "$tmp/pull.err" || fail "tampered snapshot: $(cat "$tmp/pull.err")"
ask | grep -q "five days" || fail "after a refused pull the edge lost its base: $(ask)"
[ ! -e "$tmp/edge/pol.sqlite.pull" ] || fail "the refused download was left behind"

# A manifest altered in transit (the version claims another snapshot): the
# MAC does not match, refused.
publish "Money arrives within two days!"
python3 - "$proxy" "$CLOUD" > "$tmp/proxy.log" 2>&1 <<'EOF' &
import http.server, sys, urllib.request
up = sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        req = urllib.request.Request(up + self.path, headers={k: v for k, v in self.headers.items()
                                                               if k.lower().startswith("x-")})
        try:
            body = urllib.request.urlopen(req, timeout=5).read()
        except urllib.error.HTTPError as e:
            self.send_response(e.code); self.end_headers(); self.wfile.write(e.read()); return
        if "/manifest" in self.path:
            i = body.index(b'"version":"') + 11
            body = body[:i] + (b"0" if body[i:i + 1] != b"0" else b"1") + body[i + 1:]
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
it_pids+=($!)
it_wait_http "http://127.0.0.1:$proxy/v1/health" 100 0.05 || true
pull mitm && fail "a manifest altered in transit was accepted"
grep -q "MAC does not match" "$tmp/pull.err" || fail "altered manifest: $(cat "$tmp/pull.err")"
ask | grep -q "five days" || fail "after a refused manifest the edge lost its base: $(ask)"

# The real new version: pulled, and the running router serves it (it holds
# the base open; the swap is one SQLite transaction it sees at its next query).
pull || fail "pull of the new version: $(cat "$tmp/pull.err")"
ask | grep -q "two days!" || fail "the router does not serve the new version: $(ask)"

# kill -9 at many points of a pull: the base is always whole, old or new.
publish "Money arrives within ten days."
for d in 0 0.005 0.01 0.02 0.04; do
    "$SB" kb pull -c "$tmp/edge.yaml" > /dev/null 2>&1 &
    p=$!
    sleep "$d"; kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true
    python3 - "$tmp/edge/pol.sqlite" <<'EOF' || fail "after kill -9 at ${d}s the base is damaged"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
texts = [r[0] for r in c.execute("SELECT text FROM chunks")]
assert len(texts) == 1 and ("two days!" in texts[0] or "ten days" in texts[0]), texts
EOF
    out=$(ask)
    echo "$out" | grep -qE "two days!|ten days" || fail "after kill -9 at ${d}s the router answers: $out"
done
pull || fail "pull after the kills: $(cat "$tmp/pull.err")"
ask | grep -q "ten days" || fail "the router does not serve the last version: $(ask)"
it_san_check "$tmp/run.log" "the edge runtime's log" || exit 1
echo "it_kb_sync: ok"
