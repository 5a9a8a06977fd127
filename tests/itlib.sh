# tests/itlib.sh - what the tests/it_*.sh scripts that start the runtime share.
# Sourced (not run: tests/run.sh runs every it_*.sh, hence the name) from the
# repository root, after the script's `cd "$(dirname "$0")/.."`:
#   . tests/itlib.sh
#   it_init NAME        SB, DATA, tmp (/tmp/sb-NAME-XXXXXX), cleanup on exit
#   read -r a b < <(it_ports 2)
#   "$SB" run ... 2> "$tmp/run.log" & it_pids+=($!)
#   it_wait_ready "$tmp/run.log"   # up: GET /health answers 200
#   for level in $(it_kernel_levels); do ...   # kernel levels to check numerics at
#   it_tiny_e5 || fail ...   # $tmp/e5.gguf: the tiny e5-shaped encoder
# Every process in it_pids is stopped on exit (SIGTERM, then SIGKILL after
# 5 s); a script that defines it_cleanup_more has it called before the wait.

# SB, DATA and a private tmp dir removed with everything it_pids holds on exit.
it_init() {
    SB=$(realpath "${SB_BIN:-bin/switchboard}")
    DATA=$(realpath tests/data)
    tmp=$(mktemp -d "/tmp/sb-$1-XXXXXX")
    it_pids=()
    trap it_cleanup EXIT
}

# The tiny multilingual-e5-shaped encoder of tests/e5_tiny.py, converted by
# the binary under test to $tmp/e5.gguf.
it_tiny_e5() {
    python3 -c 'import sys; sys.path.insert(0, "tests"); import e5_tiny; e5_tiny.make_model(sys.argv[1])' \
        "$tmp/tiny.e5s1" && "$SB" convert-e5 "$tmp/tiny.e5s1" "$tmp/e5.gguf" > /dev/null
}

it_cleanup() {
    # Runs as the EXIT trap, also of scripts under set -e: a pid that has
    # already exited (kill fails) must not turn a passed run into exit 1.
    set +e
    local p
    for p in "${it_pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${it_pids[@]}"; do
        for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    if declare -F it_cleanup_more > /dev/null; then it_cleanup_more; fi
    wait 2>/dev/null
    rm -rf "$tmp"
}

# Drop PID from it_pids (it has exited: its number may be reused).
it_forget() {
    local p keep=()
    for p in "${it_pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    it_pids=("${keep[@]}")
}

# N free TCP ports on 127.0.0.1, on one line. One process holds them all
# while it picks: picked one at a time, the kernel may hand the same
# just-freed port out twice (a CI run failed that way).
it_ports() {
    python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))' "$1"
}

# Poll URL until it answers 2xx, every STEP (0.05) s, for TRIES (100) tries
# but never less than 60 s of wall time: what is waited for here is a server
# starting, which a sanitized build on a loaded box does in seconds, not the
# usual tenth; only a broken start waits that long. Each try gets 2 s (a
# listener that accepts and never answers is not ready).
it_wait_http() {
    local url=$1 tries=${2:-100} step=${3:-0.05} end
    end=$(( $(date +%s) + 60 ))
    while :; do
        curl -sf -m 2 "$url" > /dev/null 2>&1 && return 0
        tries=$((tries - 1))
        [ "$tries" -gt 0 ] || [ "$(date +%s)" -lt "$end" ] || return 1
        sleep "$step"
    done
}

# `switchboard run`'s one "ready" line (docs/operations.md, "Ready"): every
# child is up and GET /health answers 200.
it_ready_re='^[^ ]+ supervisor\[[0-9]+\] info: ready: '

# it_wait_ready LOG [SECS] [PID]: wait for that line in LOG (the runtime's
# stderr) up to SECS (60: a sanitized runtime on a loaded box starts in
# seconds, not the usual tenth). Fails at the deadline, or as soon as PID
# (the supervisor) has exited.
it_wait_ready() {
    local log=$1 secs=${2:-60} pid=${3:-} end
    end=$(( $(date +%s) + secs ))
    while :; do
        grep -qE "$it_ready_re" "$log" 2>/dev/null && return 0
        [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
        [ "$(date +%s)" -lt "$end" ] || return 1
        sleep 0.02
    done
}

# it_runuser: print the path of runuser (util-linux), with which tests run
# as root start PostgreSQL as the postgres user (or a client as nobody). By
# full path: root's PATH on Debian has /usr/sbin, a test runner's may not.
# Fails with a message naming it when it is missing.
it_runuser() {
    local r=/usr/sbin/runuser
    [ -x "$r" ] || r=$(command -v runuser) || {
        echo "FAIL runuser is missing (/usr/sbin/runuser, util-linux; tools/deps.sh installs it):" \
             "as root, tests start PostgreSQL as the postgres user with it" >&2
        return 1
    }
    echo "$r"
}

# SIGTERM PID and give it 30 s to exit (an idle runtime takes a tenth; a
# sanitized one on a loaded box, with its leak checks at exit, seconds);
# forgotten either way. Prints "FAIL the WHAT did not stop on SIGTERM" and
# fails if it is still there.
it_stop() {
    local pid=$1 what=$2 end
    end=$(( $(date +%s) + 30 ))
    kill "$pid"
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 0.05; done
    it_forget "$pid"
    if kill -0 "$pid" 2>/dev/null; then echo "FAIL the $what did not stop on SIGTERM"; return 1; fi
}

# Fails (printing the report) if LOG holds a sanitizer report: under SAN=1
# leaks at exit and UBSan errors land in the runtime's log. WHAT names it.
it_san_check() {
    local log=$1 what=$2
    grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$log" || return 0
    echo "FAIL sanitizer report in $what:"
    grep -A30 -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$log" | head -60
    return 1
}

# The kernel levels a numerics check runs at, one per line: "default" (what
# the environment asks for), and "avx2" too on a CPU with AVX-512 VNNI,
# where the default is AVX-512 and the AVX2 kernels would go unchecked (CI
# runs on such a machine). Run a level as: env SB_KERNELS=avx2 CMD...
it_kernel_levels() {
    echo default
    grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null && echo avx2
    return 0
}

# it_expect EXIT_CODE STDERR_SUBSTRING CMD...: CMD exits with EXIT_CODE and
# its stderr holds the substring (output in $tmp/out and $tmp/err); else the
# script fails, naming itself.
it_expect() {
    local want="$1" msg="$2" rc=0; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    if [[ "$rc" != "$want" ]]; then
        echo "${0##*/}: FAIL: $* exited $rc, want $want ($(head -c 300 "$tmp/err"))" >&2; exit 1
    fi
    if ! grep -qF -- "$msg" "$tmp/err"; then
        echo "${0##*/}: FAIL: $*: stderr lacks '$msg': $(head -c 300 "$tmp/err")" >&2; exit 1
    fi
}

# it_pg_start: a throwaway PostgreSQL cluster in $tmp/pg, on a Unix socket
# there only (no TCP port to collide with); as root it runs as the postgres
# user. Sets PGBIN, PGRUN (the prefix that runs a command as that user) and
# PG_DSN. Returns 2 when PostgreSQL is not installed (the caller skips,
# saying so: tools/deps.sh fleet installs it), 1 when it would not start.
# it_pg_stop in it_cleanup_more stops it; it_pg_dump prints pg_dump's SQL.
it_pg_start() {
    PGBIN="" PGRUN=""
    local d ru
    for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && PGBIN=$d; done
    [ -n "$PGBIN" ] || return 2
    mkdir -p "$tmp/pg"
    if [ "$(id -u)" -eq 0 ]; then
        ru=$(it_runuser) || return 1
        chown postgres: "$tmp/pg" && chmod 755 "$tmp" || return 1
        PGRUN="$ru -u postgres --"
    fi
    $PGRUN "$PGBIN/initdb" -D "$tmp/pg/data" -A trust -U postgres --no-sync > "$tmp/initdb.log" 2>&1 || return 1
    $PGRUN "$PGBIN/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/log" -w \
        -o "-k $tmp/pg -c listen_addresses='' -c fsync=off" start > /dev/null || return 1
    PG_DSN="host=$tmp/pg port=5432 user=postgres dbname=postgres"
}
it_pg_stop() { [ -z "${PGBIN:-}" ] || $PGRUN "$PGBIN/pg_ctl" -D "$tmp/pg/data" -m immediate -w stop > /dev/null 2>&1; }
it_pg_dump() { $PGRUN "$PGBIN/pg_dump" -h "$tmp/pg" -U postgres postgres; }

# it_cloud_start CONFIG LOG: `switchboard cloud -c CONFIG` on the port it
# picks, its stderr in LOG, in it_pids; sets CLOUD to its URL and
# CLOUD_PID.
it_cloud_start() {
    "$SB" cloud -c "$1" --port-file "$tmp/cloud.port" 2> "$2" &
    CLOUD_PID=$!
    it_pids+=($!)
    for _ in $(seq 100); do [ -s "$tmp/cloud.port" ] && break; sleep 0.1; done
    [ -s "$tmp/cloud.port" ] || return 1
    CLOUD=http://127.0.0.1:$(cat "$tmp/cloud.port")
}
