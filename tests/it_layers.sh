#!/usr/bin/env bash
# it_layers.sh - the module layering (tools/check_layers.py): no module
# includes a module above it (so no include cycle between modules) or
# another module's internal header; a test uses at most one module's
# internals. First the checker is shown to catch each kind of violation in
# a scratch repository, then it runs on this tree.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/sb-layers-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "it_layers: FAIL: $*"; exit 1; }
scratch() {     # a tiny tree with one violation, given as FILE CONTENT pairs
    rm -rf "$tmp/r"; mkdir -p "$tmp/r/common" "$tmp/r/router" "$tmp/r/cache" "$tmp/r/tests"
    printf '' > "$tmp/r/common/sb_common.h"; printf '' > "$tmp/r/router/sb_router.h"
    printf '' > "$tmp/r/cache/cache_internal.h"; printf '' > "$tmp/r/router/router_internal.h"
    while [ $# -gt 0 ]; do printf '%s\n' "$2" > "$tmp/r/$1"; shift 2; done
    (cd "$tmp/r" && git init -q && git add -A) || fail "git"
    (cd "$tmp/r" && python3 "$OLDPWD/tools/check_layers.py") > "$tmp/out" 2>&1
}
scratch common/a.c '#include "sb_router.h"'
[ $? -eq 1 ] && grep -q "a module above it" "$tmp/out" || fail "an upward include was not caught: $(cat "$tmp/out")"
scratch router/b.c '#include "cache_internal.h"'
[ $? -eq 1 ] && grep -q "internal header" "$tmp/out" || fail "a foreign internal header was not caught: $(cat "$tmp/out")"
scratch tests/t.c '#include "cache_internal.h"
#include "router_internal.h"'
[ $? -eq 1 ] && grep -q "one module at most" "$tmp/out" || fail "a test using two modules' internals was not caught"
scratch router/c.c '#include "sb_common.h"
#include "router_internal.h"'
[ $? -eq 0 ] || fail "a legal tree was refused: $(cat "$tmp/out")"
echo "ok   the checker catches an upward include, a foreign internal header, a test with two modules' internals"
python3 tools/check_layers.py || fail "this tree breaks the layering (above)"
echo "it_layers: ok"
