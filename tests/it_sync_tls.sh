#!/usr/bin/env bash
# it_sync_tls.sh - the cache-sync client's transport (cache/sync/http.c, libcurl)
# through `switchboard cache sync` against real TLS peers (tests/tls_peer.py)
# with certificates made here by openssl:
#   - https to a peer whose CA the edge was not given: refused (verification)
#   - with --ca-file: the request arrives; a certificate for another host: refused
#   - a peer that drips its reply: the whole request ends at its deadline
#   - a 300 MiB reply: refused as too large, nothing applied
#   - plain http to a non-loopback host: refused by the config loader
set -u
cd "$(dirname "$0")/.."
SB=$(realpath "${SB_BIN:-bin/switchboard}")
T=$(mktemp -d /tmp/sb-it-tls.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "it_sync_tls: FAIL: $*" >&2; exit 1; }
pass=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
command -v openssl >/dev/null || fail "openssl is missing (tools/deps.sh installs it)"

cert() {  # NAME SUBJECT_ALT_NAME CA_PREFIX
    openssl req -newkey rsa:2048 -nodes -keyout "$T/$1.key" -out "$T/$1.csr" -subj "/CN=$1" 2>/dev/null &&
    openssl x509 -req -in "$T/$1.csr" -CA "$T/$3.pem" -CAkey "$T/$3.key" -CAcreateserial -days 2 \
        -out "$T/$1.pem" -extfile <(printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\n' "$2") 2>/dev/null ||
        fail "openssl: cannot make $1"
}
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/ca.key" -out "$T/ca.pem" -days 2 -subj "/CN=sb-test-ca" \
    2>/dev/null || fail "openssl: cannot make the test CA"
cert srv "IP:127.0.0.1" ca
cert other "DNS:other.example" ca

peer() {  # MODE NAME [args]: start tls_peer.py, echo its port
    local mode=$1 name=$2; shift 2
    python3 tests/tls_peer.py "$mode" "$T/$name.port" "$@" >"$T/$name.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do [ -s "$T/$name.port" ] && break; sleep 0.05; done
    cat "$T/$name.port"
}
sync_to() {  # URL [extra args]: one sync; output in $T/sync.out, status returned
    local url=$1; shift
    "$SB" cache sync --db "$T/edge.sqlite" --url "$url" --edge-id e1 --secret s3cret "$@" >"$T/sync.out" 2>&1
}

p=$(peer answer answer --cert "$T/srv.pem" --key "$T/srv.key")
sync_to "https://127.0.0.1:$p" && fail "sync to an unknown CA succeeded"
grep -qi "certificate" "$T/sync.out" || fail "no certificate error: $(cat "$T/sync.out")"
grep -q "POST" "$T/answer.out" && fail "the request was sent to an unverified peer"
ok "https to a peer signed by an unknown CA is refused: $(grep -io 'ssl certificate[^:]*' "$T/sync.out" | head -1)"

sync_to "https://127.0.0.1:$p/" --ca-file "$T/ca.pem"
grep -q "answered 403" "$T/sync.out" || fail "with --ca-file: $(cat "$T/sync.out")"
grep -q "^POST /v1/sync HTTP/1.1" "$T/answer.out" || fail "the peer saw no request: $(cat "$T/answer.out")"
ok "with --ca-file the request goes through TLS (peer saw 'POST /v1/sync', edge reports 403)"

q=$(peer answer other --cert "$T/other.pem" --key "$T/other.key")
sync_to "https://127.0.0.1:$q" --ca-file "$T/ca.pem" && fail "a certificate for another host was accepted"
grep -q "POST" "$T/other.out" && fail "the request went to a peer whose certificate names another host"
ok "a certificate for another host name is refused"

d=$(peer drip drip)
t0=$(date +%s%N)
sync_to "http://127.0.0.1:$d" --timeout-ms 1500 && fail "a dripping reply was accepted"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
grep -qi "timeout\|timed out" "$T/sync.out" || fail "drip: $(cat "$T/sync.out")"
# Timing is the subject: the peer drips for ever, so only the deadline ends
# the request. 6 s is 4 times it: room for a loaded box, far from "never".
[ "$ms" -lt 6000 ] || fail "the deadline did not hold: ${ms} ms for a 1500 ms request"
ok "a reply dripped one byte per 200 ms ends at the 1500 ms deadline (${ms} ms in all)"

h=$(peer huge huge)
sync_to "http://127.0.0.1:$h" && fail "a 300 MiB reply was accepted"
grep -q "reply too large" "$T/sync.out" || fail "huge: $(cat "$T/sync.out")"
ok "a 300 MiB reply is refused: $(grep -o 'reply too large[^"]*' "$T/sync.out")"

mkdir -p "$T/run"; echo s3cret >"$T/secret"
cat >"$T/c.yaml" <<YAML
runtime: { dir: $T/run }
models: { tiny: { gguf: $(realpath tests/data/tiny-llama-spm-Q4_K_M.gguf) } }
cache:
  sync: { url: "http://192.0.2.7:9000", edge_id: e1, secret_file: $T/secret }
YAML
"$SB" run -c "$T/c.yaml" --check >"$T/check.out" 2>&1 && fail "plain http to another host was accepted"
grep -q "unencrypted; use https://" "$T/check.out" || fail "config: $(cat "$T/check.out")"
ok "the config loader refuses plain http:// to a non-loopback cloud"

echo "sync tls: $pass passed, 0 failed"
