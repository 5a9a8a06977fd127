#!/usr/bin/env bash
# runtime.retention with real processes and real SQLite files: a sessions
# store and a feedback database holding back-dated rows (a caller's words,
# weeks old) and recent ones. A runtime without runtime.retention keeps
# them all; one with it purges the old ones as it starts - from the files
# and their WALs, while it runs - and keeps the recent ones.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init retention
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
port=$(it_ports 1)
run=$tmp/run
mkdir -m 700 "$run"
write_config() {   # write_config RETENTION_YAML
    cat > "$tmp/rt.yaml" <<YAML
runtime:
  dir: $run
  http: 127.0.0.1:$port
  drain_ms: 2000
$1
models:
  tiny: { gguf: $DATA/tiny-llama-spm-Q4_K_M.gguf, threads: 1, ctx: 512, max_tokens: 8 }
pipelines:
  conv:
    conversation: { ttl_s: 600 }
    stages:
      - { name: say, kind: tool, command: ["/bin/echo", "noted"] }
YAML
}

# Old rows: 40 days (sessions) and 10 days (feedback); recent: a minute.
# The old session does not expire for a year: only retention removes it.
python3 - "$run" <<'PY'
import os, sqlite3, sys, time
run, now, day = sys.argv[1], time.time(), 86400
def db(name):
    p = os.path.join(run, name)
    os.close(os.open(p, os.O_CREAT | os.O_RDWR, 0o600))
    c = sqlite3.connect(p)
    c.execute("PRAGMA journal_mode=WAL")
    return c
s = db("sessions.sqlite")
s.executescript("""
CREATE TABLE sessions (id TEXT PRIMARY KEY, owner TEXT NOT NULL, pipeline TEXT NOT NULL,
 created REAL NOT NULL, updated REAL NOT NULL, expires REAL NOT NULL,
 turns INTEGER NOT NULL, failures INTEGER NOT NULL, bytes INTEGER NOT NULL,
 intent TEXT, slots TEXT NOT NULL, awaiting TEXT, stage INTEGER NOT NULL, done INTEGER NOT NULL);
CREATE TABLE turns (session TEXT NOT NULL, n INTEGER NOT NULL, at REAL NOT NULL, caller TEXT NOT NULL,
 reply TEXT NOT NULL, PRIMARY KEY (session, n)) WITHOUT ROWID;""")
for sid, at, words in (("a" * 32, now - 40 * day, "my ID is 11010519491231002X"),
                       ("b" * 32, now - 60, "call me on 13912345678")):
    s.execute("INSERT INTO sessions VALUES (?, 'default', 'conv', ?, ?, ?, 1, 0, 10, NULL, '{}', NULL, -1, 1)",
              (sid, at, at, now + 365 * day))
    s.execute("INSERT INTO turns VALUES (?, 1, ?, ?, 'noted')", (sid, at, words))
s.commit()
f = db("feedback.sqlite")
f.execute("CREATE TABLE feedback (call_id TEXT PRIMARY KEY, time INTEGER NOT NULL, pipeline TEXT NOT NULL,"
          " predicted TEXT, intent TEXT NOT NULL, utterance TEXT NOT NULL)")
f.execute("INSERT INTO feedback VALUES ('call-old', ?, 'conv', 'a', 'b', 'card 6222020200112233445 charged twice')",
          (int(now - 10 * day),))
f.execute("INSERT INTO feedback VALUES ('call-new', ?, 'conv', 'a', 'b', 'meter 13700001111 reads wrong')",
          (int(now - 60),))
f.commit()
PY

holds() {   # holds STRING: in any file of the runtime dir (databases and WALs)?
    grep -rqaF -- "$1" "$run"
}
start() {   # start LOG
    "$SB" run -c "$tmp/rt.yaml" > "$1" 2>&1 &
    sup=$!; it_pids+=($sup)
    it_wait_ready "$1" 60 "$sup" || { bad "the runtime did not start: $(tail -5 "$1")"; exit 1; }
}
stop() {   # stop LOG
    it_stop "$sup" runtime || fails=$((fails + 1))
    it_san_check "$1" runtime || fails=$((fails + 1))
}

# ---- without runtime.retention: nothing is purged
write_config ""
start "$tmp/keep.log"
sleep 0.5
for v in 11010519491231002X 6222020200112233445 13912345678 13700001111; do
    holds "$v" && ok "no retention: $v kept" || bad "no retention: $v is gone"
done
stop "$tmp/keep.log"

# ---- with it: the old rows go at start, from the files and the WALs
write_config "  retention: { traces_days: 1, sessions_days: 30, feedback_days: 7 }"
start "$tmp/purge.log"
for _ in $(seq 1 50); do grep -q "feedback mark(s) older" "$tmp/purge.log" && break; sleep 0.1; done
grep -q "retention: 1 session(s) not updated for 30 day(s) deleted" "$tmp/purge.log" &&
    ok "the purge of sessions is logged" || bad "no session purge in the log: $(grep retention "$tmp/purge.log")"
grep -q "retention: 1 feedback mark(s) older than 7 day(s) deleted" "$tmp/purge.log" &&
    ok "the purge of feedback is logged" || bad "no feedback purge in the log: $(grep retention "$tmp/purge.log")"
for v in 11010519491231002X 6222020200112233445; do
    holds "$v" && bad "retention: $v still in $(grep -rlaF -- "$v" "$run")" || ok "retention: $v gone while running"
done
for v in 13912345678 13700001111; do
    holds "$v" && ok "retention: recent $v kept" || bad "retention: recent $v is gone"
done
grep -qF 11010519491231002X "$tmp/purge.log" && bad "the log names a purged value" || ok "the log names no value"
stop "$tmp/purge.log"
holds 11010519491231002X || holds 6222020200112233445 && bad "a purged value is back after stop" ||
    ok "purged values stay gone after stop"

[ "$fails" = 0 ] && echo "it_retention: all passed" || { echo "it_retention: $fails failed"; exit 1; }
