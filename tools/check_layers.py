#!/usr/bin/env python3
"""check_layers.py [--graph] - the module layering, checked from the includes.

Modules are the source folders in DEPS; each lists the modules it may
include directly, and may also include what those may (so the graph is one
order, bottom up, and no include cycle between modules can form). Two
exceptions keep the worker's insides its own: a module outside worker/ sees
a worker sub-module only if it names it (cache may use worker/gguf, the file
format, and nothing else of the worker), and a module never includes another
module's *_internal.h or *_impl.h. Includes name their module from the
top ("worker/engine/sb_engine.h", built with -I.). A test or fuzz target may
include the internal header of at most one module (the one it tests).
The backend boundary: router/backend/ decodes every worker and upstream
reply into typed results, so no file under router/ above it includes an
ipc/ header or names sb_ipc_result or an sb_mp_ reader - except the
socket door (router/router.c), which serves msgpack on DIR/router.sock
itself and still never sees a worker's reply.
Exit 1 with one line per violation.
--graph prints the module graph as a Markdown list (docs/ARCHITECTURE.md).
Standard library only; reads the files git tracks.
"""
import os
import re
import subprocess
import sys

# Module -> the modules it may include directly. Bottom up.
DEPS = {
    "common": [],
    "ipc": ["common"],
    "worker/kernels": ["common"],
    "worker/gguf": ["worker/kernels"],          # the file format: a leaf cache/ may use
    "worker/tokenizer": ["worker/gguf"],
    "worker/engine": ["worker/tokenizer"],
    "worker/quantize": ["worker/engine"],       # uses the engine's pool and encoder
    "worker": ["worker/engine", "ipc"],         # the worker server (serve*.c)
    "worker/cli": ["worker/quantize"],          # the model commands (inspect, quantize...)
    "cache": ["ipc", "worker/gguf", "privacy"],            # the local cache: SQLite, keys, NFKC
    "cache/sync": ["cache"],                    # the edge's sync client (libcurl) and `cache`
    "cache/cloud": ["cache"],                   # the cloud server (`switchboard cloud`, PostgreSQL)
    "kb": ["cache/sync", "worker/engine"],      # pulls published snapshots through the sync
    "privacy": ["common"],                      # personal-data detection, placeholders, restore
    "router/classify": ["common"],              # the embedding classifier: vectors in, labels out
    "router/backend": ["cache", "worker/engine", "ipc"],    # models: local workers, upstreams; the typed request
    "router/run": ["router/backend", "router/classify", "kb"],  # pipeline execution, never a front door
    "router": ["router/run", "kb", "worker/engine", "privacy"],    # the front doors; never the cloud
    "supervisor": ["router", "worker", "worker/cli", "cache/cloud"],
}
INTERNAL = re.compile(r"_(internal|impl)\.h$")
# Above the backend: what the typed replies replaced. The socket door may
# speak msgpack to its own clients, never read a worker's reply.
SOCKET_DOOR = "router/router.c"
WORKER_REPLY = re.compile(r"\bsb_ipc_result\b")
MSGPACK = re.compile(r"\bsb_mp_\w+|\bsb_ipc_(?!server\b)\w+")  # the socket door's server handle is named in router_internal.h
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def order():
    """The modules bottom up; exits if DEPS itself has a cycle."""
    done, out = set(), []

    def visit(m, path):
        if m in path:
            sys.exit("check_layers: DEPS has a cycle: %s" % " -> ".join(path + [m]))
        if m not in done:
            for d in DEPS[m]:
                visit(d, path + [m])
            done.add(m)
            out.append(m)
    for m in DEPS:
        visit(m, [])
    return out


def closure(m, full=False):
    """What m may include. Unless full, a module outside worker/ does not
    reach through a worker sub-module to the ones below it."""
    seen = set()
    for d in DEPS[m]:
        seen.add(d)
        if full or not d.startswith("worker") or m.startswith("worker"):
            seen |= closure(d, full)
    return seen


def module_of(path):
    best = None
    for m in DEPS:
        if path.startswith(m + "/") and (best is None or len(m) > len(best)):
            best = m
    return best


def main():
    layers = order()
    allowed = {m: closure(m) for m in DEPS}
    below = {m: closure(m, full=True) for m in DEPS}
    files = subprocess.check_output(["git", "ls-files", "*.c", "*.h"], text=True).split()
    tracked = set(files)
    headers = {}
    for f in files:
        if f.endswith(".h") and (module_of(f) or f.startswith("tests/")):
            headers.setdefault(os.path.basename(f), []).append(f)
    edges, problems = {}, []
    for f in files:
        mod = module_of(f)
        is_test = f.startswith("tests/")
        if not mod and not is_test:
            continue
        internals = set()
        above = f.startswith("router/") and not f.startswith("router/backend/")
        with open(f, errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if above and (WORKER_REPLY.search(line) or (f != SOCKET_DOOR and MSGPACK.search(line))):
                    problems.append("%s:%d: %s reads msgpack or a worker's reply above router/backend "
                                    "(use the typed rt_reply)" % (f, n, mod))
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                if inc in tracked:
                    target = inc
                elif os.path.basename(inc) in headers:
                    target = headers[os.path.basename(inc)][0]
                    problems.append('%s:%d: "%s" does not name its module: "%s"' % (f, n, inc, target))
                else:
                    continue
                tmod = module_of(target)
                if tmod is None:
                    continue
                if is_test:
                    if INTERNAL.search(target):
                        internals.add(tmod)
                    continue
                if above and tmod == "ipc" and f != SOCKET_DOOR:
                    problems.append("%s:%d: %s includes %s above router/backend (the backend decodes replies)"
                                    % (f, n, mod, inc))
                if tmod == mod:
                    continue
                edges.setdefault(mod, set()).add(tmod)
                if tmod not in allowed[mod]:
                    why = "a module above it" if mod in below[tmod] or mod == tmod else "a module it may not use"
                    problems.append("%s:%d: %s includes %s from %s, %s" % (f, n, mod, inc, tmod, why))
                if INTERNAL.search(target):
                    problems.append("%s:%d: %s includes %s, another module's internal header" % (f, n, mod, inc))
        if len(internals) > 1:
            problems.append("%s: includes the internal headers of %s (one module at most)" %
                            (f, ", ".join(sorted(internals))))
    if "--graph" in sys.argv:
        for m in reversed(layers):
            deps = sorted(edges.get(m, ()), key=layers.index, reverse=True)
            print("- `%s/` -> %s" % (m, ", ".join("`%s/`" % d for d in deps) if deps else "nothing"))
    for p in problems:
        print(p)
    if problems:
        print("check_layers: %d violation(s) of the layering (bottom up: %s)" % (len(problems), " < ".join(layers)))
        return 1
    print("check_layers: ok, %d modules, no include upward or into another module's internals" % len(layers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
