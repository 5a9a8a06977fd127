#!/usr/bin/env bash
# it_layers.sh - the module layering (tools/check_layers.py): no module
# includes a module above it (so no include cycle between modules) or
# another module's internal header (cache/ may use worker/gguf/ and nothing
# else of worker/); includes name their module; a test uses at most one
# module's internals. First the checker is shown to catch each kind of violation in
# a scratch repository, then it runs on this tree.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/sb-layers-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "it_layers: FAIL: $*"; exit 1; }
scratch() {     # a tiny tree with one violation, given as FILE CONTENT pairs
    rm -rf "$tmp/r"
    for h in common/sb_common.h ipc/sb_ipc.h router/run/sb_run.h router/backend/sb_backend.h cache/cache_internal.h router/router_internal.h \
             cache/sync/sb_sync.h cache/cloud/cloud_internal.h \
             worker/gguf/sb_gguf.h worker/engine/sb_engine.h worker/tokenizer/vocab_impl.h; do
        mkdir -p "$tmp/r/$(dirname $h)"; printf '' > "$tmp/r/$h"
    done
    while [ $# -gt 0 ]; do mkdir -p "$tmp/r/$(dirname "$1")"; printf '%s\n' "$2" > "$tmp/r/$1"; shift 2; done
    (cd "$tmp/r" && git init -q && git add -A) || fail "git"
    (cd "$tmp/r" && python3 "$OLDPWD/tools/check_layers.py") > "$tmp/out" 2>&1
}
refused() {     # WHAT GREP FILE CONTENT...: the checker must exit 1 saying GREP
    local what=$1 want=$2; shift 2
    scratch "$@"
    [ $? -eq 1 ] && grep -q "$want" "$tmp/out" || fail "$what was not caught: $(cat "$tmp/out")"
}
refused "an upward include" "a module above it" common/a.c '#include "router/run/sb_run.h"'
refused "pipeline execution including a front door" "a module above it" \
    router/run/a.c '#include "router/router_internal.h"'
refused "a backend including pipeline execution" "a module above it" \
    router/backend/a.c '#include "router/run/sb_run.h"'
refused "the file format including the engine" "a module above it" \
    worker/gguf/a.c '#include "worker/engine/sb_engine.h"'
refused "cache including the engine" "a module it may not use" cache/a.c '#include "worker/engine/sb_engine.h"'
refused "the local cache including its sync" "a module above it" cache/a.c '#include "cache/sync/sb_sync.h"'
refused "the sync client including the cloud server" "a module it may not use" \
    cache/sync/a.c '#include "cache/cloud/cloud_internal.h"'
refused "the router including the cloud server" "a module it may not use" \
    router/a.c '#include "cache/cloud/cloud_internal.h"'
refused "a foreign internal header" "internal header" router/b.c '#include "cache/cache_internal.h"'
refused "a worker sub-module's internal header" "internal header" \
    worker/engine/b.c '#include "worker/tokenizer/vocab_impl.h"'
refused "an include not naming its module" "does not name its module" router/b.c '#include "sb_common.h"'
refused "a test using two modules' internals" "one module at most" tests/t.c '#include "cache/cache_internal.h"
#include "router/router_internal.h"'
refused "pipeline execution including ipc/ above the backend" "above router/backend" \
    router/run/a.c '#include "ipc/sb_ipc.h"'
refused "a front door reading a worker's reply" "worker's reply above router/backend" \
    router/a.c 'static void on_done(void *arg, const sb_ipc_result *res) {}'
refused "pipeline execution reading msgpack" "msgpack or a worker's reply" \
    router/run/b.c 'int n(const void *o) { return sb_mp_count(o); }'
scratch router/c.c '#include "common/sb_common.h"
#include "router/router_internal.h"' router/run/r.c '#include "router/backend/sb_backend.h"' cache/k.c '#include "worker/gguf/sb_gguf.h"' \
    kb/s.c '#include "cache/sync/sb_sync.h"' router/router.c '#include "ipc/sb_ipc.h"
int n(const void *o) { return sb_mp_count(o); }' router/backend/m.c '#include "ipc/sb_ipc.h"
void f(const sb_ipc_result *r) {}'
[ $? -eq 0 ] || fail "a legal tree was refused: $(cat "$tmp/out")"
echo "ok   the checker catches an upward include (router/backend < router/run < router/), a foreign internal header, an include not naming its module, a test with two modules' internals, msgpack or a worker's reply above router/backend"
python3 tools/check_layers.py || fail "this tree breaks the layering (above)"
echo "it_layers: ok"
