#!/usr/bin/env bash
# it_setup.sh - the set-up scripts need nothing they do not install.
#
# `make demo` once failed on a fresh Debian machine because tools/models.sh
# checked the model with the `gguf` Python package, whose numpy it had not
# installed. The model check is now our own reader (`switchboard inspect`).
# This runs that check as a fresh machine would: a bare venv (python3 -m venv,
# no site packages) as PYTHON, and a PATH of only /usr/bin:/bin. A good
# fixture passes and shows its summary; a truncated one, one with a bad value
# type, and a wrong SHA-256 fail with a message naming the file, the field and
# its byte offset. The venv is made once under the build directory (~10 s)
# and reused.
set -u
[ -n "${IT_DEBUG:-}" ] && set -x
cd "$(dirname "$0")/.."
repo=$(pwd)
SB=$(cd "$(dirname "${SB_BIN:-bin/switchboard}")" && pwd)/$(basename "${SB_BIN:-bin/switchboard}")
T=$(mktemp -d /tmp/sb-it-setup.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "it_setup: FAIL: $*" >&2; exit 1; }
[ -x "$SB" ] || fail "no binary at $SB (make first, or set SB_BIN)"

venv="$repo/${SB_BUILD:-build}/it_setup-venv"
if ! "$venv/bin/python3" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    PATH=/usr/bin:/bin python3 -m venv "$venv" > "$T/venv.log" 2>&1 \
        || { cat "$T/venv.log" >&2; fail "python3 -m venv failed (tools/deps.sh installs python3-venv)"; }
fi
grep -q '^include-system-site-packages = false' "$venv/pyvenv.cfg" || fail "$venv sees the system site packages"
"$venv/bin/python3" -c 'import numpy' 2>/dev/null && fail "the bare venv can import numpy: not bare"

# models.sh as `make demo` runs it, minus the download: a bare environment.
bare() { env -i HOME="$T" PATH=/usr/bin:/bin PYTHON="$venv/bin/python3" SB_BIN="$SB" "$@"; }
fixture=tests/data/tiny-llama-spm-Q4_0.gguf
sha=$(sha256sum "$fixture" | cut -d' ' -f1)

out=$(bare tools/models.sh verify "$fixture" "$sha" 2>&1) || fail "a valid fixture was rejected: $out"
for want in "sha256 ok" 'architecture: *"llama"' "file_type: *2 (Q4_0)" "tokens=1024" "tensors: *21," "valid"; do
    grep -q "$want" <<< "$out" || fail "summary lacks '$want': $out"
done

# Each bad file: exit 1, one line naming the file and what is wrong where.
expect_error() {  # FILE PATTERN... (every pattern must be in the message)
    local file=$1 rc=0
    shift
    out=$(bare tools/models.sh verify "$file" 2>&1) || rc=$?
    [ "$rc" = 1 ] || fail "$file: exit $rc, want 1: $out"
    grep -q "models: error: .*$file" <<< "$out" || fail "$file: the message does not name the file: $out"
    for want in "$@"; do
        grep -q -- "$want" <<< "$out" || fail "$file: the message lacks '$want': $out"
    done
}
head -c 600000 "$fixture" > "$T/truncated.gguf"
expect_error "$T/truncated.gguf" "runs past the end of the file" "truncated" "byte offset [0-9]"
head -c 3000 "$fixture" > "$T/short.gguf"
expect_error "$T/short.gguf" "value of 'tokenizer.ggml.tokens' at byte offset [0-9]" "truncated"
# Set the value type (the u32 after the key) of KEY to TYPE in a copy.
retype() {  # KEY TYPE OUT
    python3 - "$fixture" "$@" <<'EOF'
import sys
src, key, vtype, out = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), sys.argv[4]
d = bytearray(open(src, "rb").read())
at = d.index(key) + len(key)
d[at:at + 4] = vtype.to_bytes(4, "little")
open(out, "wb").write(d)
EOF
}
retype general.architecture 13 "$T/badtype.gguf"          # no such type
expect_error "$T/badtype.gguf" "type of 'general.architecture' at byte offset [0-9]" "invalid value type 13"
retype tokenizer.ggml.bos_token_id 6 "$T/f32bos.gguf"      # u32 -> f32: well-formed, unusable
expect_error "$T/f32bos.gguf" "'tokenizer.ggml.bos_token_id' at byte offset [0-9]*: must be an integer, found f32"
printf 'not a model' > "$T/text.gguf"
expect_error "$T/text.gguf" "smaller than a GGUF header"

rc=0
out=$(bare tools/models.sh verify "$fixture" "$(printf '0%.0s' {1..64})" 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "sha256 $sha, expected 0000" <<< "$out" || fail "a wrong SHA-256 passed: $out"

echo "it_setup: ok (models.sh verify under a bare venv and PATH=/usr/bin:/bin: valid, truncated, bad types, wrong hash)"
