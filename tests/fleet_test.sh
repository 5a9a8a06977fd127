#!/usr/bin/env bash
# `make fleet-test`: two boxes of one site behind HAProxy, their sessions in
# one PostgreSQL (docs/operations.md, "A fleet"). Everything is real and
# started here: a PostgreSQL cluster (initdb/pg_ctl in a temp dir) reached
# over TLS (sslmode=verify-full, a CA made here by openssl) with a login and
# password per box; two `switchboard run` supervisors with the tiny fixture
# model; HAProxy in HTTP mode, round-robin. tests/fleet_http.py drives
# conversations through HAProxy: their turns alternate between the boxes
# and complete, and with one box killed (-9, the whole box) mid-call the
# other finishes the call. The boxes start before the database is up, as
# a site's may after a power cut: each keeps trying to open its store.
# Needs postgresql, haproxy, openssl (tools/deps.sh fleet installs them).
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init fleet
fail() { echo "fleet_test: FAIL $*"; for f in "$tmp"/*.log "$tmp"/pg/log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }

PGBIN=
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && PGBIN=$d; done
[ -n "$PGBIN" ] || fail "PostgreSQL is not installed (tools/deps.sh fleet installs it)"
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || fail "haproxy is not installed (tools/deps.sh fleet)"
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
command -v openssl >/dev/null || fail "openssl is not installed (tools/deps.sh fleet)"
read -r pg_port port_a port_b port_lb < <(it_ports 4)

# ---- the site's database: TLS only, one login per box
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/ca.key" -out "$tmp/ca.pem" -days 2 -subj "/CN=sb-fleet-ca" \
    2>/dev/null || fail "openssl: the test CA"
openssl req -newkey rsa:2048 -nodes -keyout "$tmp/srv.key" -out "$tmp/srv.csr" -subj "/CN=127.0.0.1" 2>/dev/null &&
openssl x509 -req -in "$tmp/srv.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial -days 2 \
    -out "$tmp/srv.pem" -extfile <(printf 'subjectAltName=IP:127.0.0.1\n') 2>/dev/null || fail "openssl: the server's cert"
mkdir -p "$tmp/pg"
cat > "$tmp/pg/hba.conf" <<HBA
local   all       postgres              trust
hostssl sessions  box_a     127.0.0.1/32 scram-sha-256
hostssl sessions  box_b     127.0.0.1/32 scram-sha-256
HBA
pgrun=()
if [ "$(id -u)" -eq 0 ]; then
    ru=$(it_runuser) || exit 1
    chmod 755 "$tmp"; chown -R postgres: "$tmp/pg"; chown postgres: "$tmp/srv.key" "$tmp/srv.pem"
    pgrun=("$ru" -u postgres --)
fi
chmod 600 "$tmp/srv.key"
"${pgrun[@]}" "$PGBIN/initdb" -D "$tmp/pg/data" -A trust -U postgres --no-sync >"$tmp/initdb.log" 2>&1 ||
    fail "initdb"
it_cleanup_more() { "${pgrun[@]}" "$PGBIN/pg_ctl" -D "$tmp/pg/data" -m immediate -w stop >/dev/null 2>&1; }
pg_start() {
    "${pgrun[@]}" "$PGBIN/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/log" -w -o "-k $tmp/pg -p $pg_port \
-c listen_addresses=127.0.0.1 -c hba_file=$tmp/pg/hba.conf -c ssl=on -c ssl_cert_file=$tmp/srv.pem \
-c ssl_key_file=$tmp/srv.key -c fsync=off" start >/dev/null || fail "pg_ctl start"
}
psql() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$tmp/pg" -p "$pg_port" -U postgres "$@"; }

# ---- two boxes
box() {  # NAME PORT: its config and passfile; starts it
    local name=$1 port=$2 dir=$tmp/$1
    mkdir -p "$dir"
    printf '127.0.0.1:%s:sessions:box_%s:pw-%s-%s\n' "$pg_port" "$name" "$name" "$$" > "$dir/pgpass"
    chmod 600 "$dir/pgpass"
    cat > "$dir/box.yaml" <<YAML
runtime:
  dir: $dir/run
  http: 127.0.0.1:$port
  drain_ms: 1000
  secret_key_file: $tmp/seal.key
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
cache:
  path: $dir/cache.sqlite
sessions:
  sweep_s: 1
  store: "host=127.0.0.1 port=$pg_port dbname=sessions user=box_$name passfile=$dir/pgpass sslmode=verify-full sslrootcert=$tmp/ca.pem connect_timeout=2 options='-c role=sb_boxes'"
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
          account: { en: "What is your account number?" }
          name: { en: "And your name, please?" }
      - { name: say, kind: tool, command: ["/bin/echo", "account {{stages.extract.json.account}} for {{stages.extract.json.name}}"] }
  private:
    privacy: { mode: pseudonymize }
    conversation: { ttl_s: 600 }
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
      - { name: say, kind: tool, command: ["/bin/echo", "we will call {{stages.extract.json.phone}} and write to {{stages.extract.json.email}}"] }
  slow:
    conversation: { ttl_s: 600, max_turns: 100 }
    stages:
      - { name: say, kind: tool, command: ["/bin/sh", "-c", "sleep 1.5; echo heard \"\$0\"", "{{input}}"] }
YAML
    "$SB" run -c "$dir/box.yaml" > "$tmp/$name.log" 2>&1 &
    it_pids+=($!)
    eval "pid_$name=$!"
}
# One key for the site's boxes: a session's values are sealed by whichever
# box took the turn and opened by the next.
openssl rand -hex 32 > "$tmp/seal.key"
chmod 600 "$tmp/seal.key"
box a "$port_a"
box b "$port_b"
it_wait_ready "$tmp/a.log" 120 "$pid_a" || fail "box a did not come up"
it_wait_ready "$tmp/b.log" 120 "$pid_b" || fail "box b did not come up"
grep -q "sessions disabled" "$tmp/a.log" || fail "box a opened a store before the database was up"
# Now the database: each box opens its store at its next try (sweep_s).
pg_start
# The boxes log in as themselves and own the tables together through a
# role neither logs in as (conninfo options '-c role=sb_boxes').
psql -d postgres -c "CREATE ROLE sb_boxes NOLOGIN" \
     -c "CREATE ROLE box_a LOGIN PASSWORD 'pw-a-$$' IN ROLE sb_boxes" \
     -c "CREATE ROLE box_b LOGIN PASSWORD 'pw-b-$$' IN ROLE sb_boxes" \
     -c "CREATE DATABASE sessions OWNER sb_boxes" || fail "creating the roles"
for port in "$port_a" "$port_b"; do   # 503 sessions_unavailable until then, 404 (no such session) after
    for _ in $(seq 1 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/sessions/$(printf '0%.0s' $(seq 32))")" = 404 ] && break
        sleep 0.1
    done
done

# ---- HAProxy: round-robin over both, a box that stops answering /health is out
# A caller's values under a privacy policy, across the boxes: the mobile
# said on box b and the e-mail on box a come back together in box a's
# reply (each box sealing what it added, the other opening it), and the
# database holds neither value, as text or as hex.
private_turn() {  # PORT TEXT [SESSION] -> the answer's JSON on stdout
    local body
    body=$(python3 -c 'import json,sys; d={"input": sys.argv[1]}; d.update({"session": sys.argv[2]} if len(sys.argv) > 2 else {}); print(json.dumps(d))' "${@:2}")
    curl -s -m 60 -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$1/v1/pipelines/private"
}
field() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1], {}, {"j": j}))' "$1"; }
j=$(private_turn "$port_a" "I need to update my contact details")
sid=$(printf '%s' "$j" | field 'j.get("session")')
[ "$(printf '%s' "$j" | field 'j.get("awaiting")')" = "{'kind': 'slot', 'slot': 'phone'}" ] ||
    fail "private turn 1 on box a: $j"
j=$(private_turn "$port_b" "13800138000" "$sid")
[ "$(printf '%s' "$j" | field 'j.get("awaiting")')" = "{'kind': 'slot', 'slot': 'email'}" ] ||
    fail "private turn 2 on box b: $j"
j=$(private_turn "$port_a" "zhang.san@example.com" "$sid")
[ "$(printf '%s' "$j" | field 'j.get("reply")')" = "we will call 13800138000 and write to zhang.san@example.com" ] ||
    fail "private turn 3 on box a: $j"
echo "ok   privacy across boxes: the mobile said on box b and the e-mail on box a are both in box a's reply"
for v in 13800138000 3133383030313338303030 zhang.san 7a68616e672e73616e; do
    n=$(psql -d sessions -tA -c "SELECT (SELECT count(*) FROM sb_sessions x WHERE strpos(x::text, '$v') > 0)
        + (SELECT count(*) FROM sb_session_turns x WHERE strpos(x::text, '$v') > 0)
        + (SELECT count(*) FROM sb_handoff_outbox x WHERE strpos(x::text, '$v') > 0)") || fail "psql"
    [ "$n" = 0 ] || fail "the sessions database holds '$v' in $n row(s)"
done
n=$(psql -d sessions -tA -c "SELECT count(*) FROM sb_sessions WHERE id = '$sid' AND values_box IS NOT NULL") || fail "psql"
[ "$n" = 1 ] || fail "session $sid has no sealed values in the database"
echo "ok   the sessions database holds neither value (as text or hex), the session's values sealed"

cat > "$tmp/haproxy.cfg" <<CFG
global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 2
    option redispatch
frontend site
    bind 127.0.0.1:$port_lb
    default_backend boxes
backend boxes
    balance roundrobin
    option httpchk GET /health
    http-response set-header X-Box %[srv_name]
    server a 127.0.0.1:$port_a check inter 300 fall 1 rise 2
    server b 127.0.0.1:$port_b check inter 300 fall 1 rise 2
CFG
"$HAPROXY" -c -f "$tmp/haproxy.cfg" >/dev/null 2>"$tmp/haproxy.log" || fail "haproxy -c"
"$HAPROXY" -db -f "$tmp/haproxy.cfg" >>"$tmp/haproxy.log" 2>&1 &
it_pids+=($!)
it_wait_http "http://127.0.0.1:$port_lb/health" || fail "haproxy does not answer"

rc=0
python3 tests/fleet_http.py "http://127.0.0.1:$port_lb" "$pid_a" "$tmp/a/run" "http://127.0.0.1:$port_a" \
    "$pid_b" "$tmp/b/run" "http://127.0.0.1:$port_b" || rc=1
# Both boxes spoke TLS to the database, each as itself.
n=$(psql -d postgres -tA -c "SELECT count(DISTINCT usename) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
                             WHERE ssl AND usename IN ('box_a', 'box_b')") || n=0
# Box a was killed: its connections are gone; b's (router and hand-off
# thread) remain, over TLS.
if [ "$n" -ge 1 ]; then echo "ok   the surviving box's connections to PostgreSQL are TLS, as box_b"
else echo "FAIL no TLS connection of a box in pg_stat_ssl"; rc=1; fi
it_stop "$pid_b" "box b" || rc=1
it_san_check "$tmp/b.log" "box b's log" || rc=1
[ $rc -eq 0 ] || { for f in a b haproxy; do echo "--- $f.log (tail)"; tail -20 "$tmp/$f.log"; done; }
echo "fleet_test: $([ $rc -eq 0 ] && echo ok || echo FAIL)"
exit $rc
