#!/usr/bin/env python3
"""check_layers.py [--graph] - the module layering, checked from the includes.

Modules are the source folders below, bottom up; a module may include the
headers of the modules below it, never of one above (so no include cycle
between modules can form), and never another module's *_internal.h or
*_impl.h. A test or fuzz target may include the internal header of at most
one module (the one it tests). Exit 1 with one line per violation.
--graph prints the module graph as a Markdown list (docs/ARCHITECTURE.md).
Standard library only; reads the files git tracks.
"""
import os
import re
import subprocess
import sys

# Bottom up. Each may depend on the ones before it.
LAYERS = ["common", "ipc", "worker/kernels", "worker", "cache", "kb", "router", "supervisor"]
INTERNAL = re.compile(r"_(internal|impl)\.h$")


def module_of(path):
    best = None
    for m in LAYERS:
        if path.startswith(m + "/") and (best is None or len(m) > len(best)):
            best = m
    return best


def main():
    files = subprocess.check_output(["git", "ls-files", "*.c", "*.h"], text=True).split()
    headers = {}
    for f in files:
        if f.endswith(".h") and module_of(f):
            headers.setdefault(os.path.basename(f), []).append(f)
    edges, problems = {}, []
    for f in files:
        mod = module_of(f)
        is_test = f.startswith("tests/")
        if not mod and not is_test:
            continue
        internals = set()
        with open(f, errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m or os.path.basename(m.group(1)) not in headers:
                    continue
                inc = m.group(1)
                cands = headers[os.path.basename(inc)]
                target = next((c for c in cands if c.endswith(inc)), cands[0])
                tmod = module_of(target)
                if is_test:
                    if INTERNAL.search(target):
                        internals.add(tmod)
                    continue
                if tmod == mod:
                    continue
                edges.setdefault(mod, set()).add(tmod)
                if LAYERS.index(tmod) > LAYERS.index(mod):
                    problems.append("%s:%d: %s includes %s from %s, a module above it" % (f, n, mod, inc, tmod))
                if INTERNAL.search(target):
                    problems.append("%s:%d: %s includes %s, another module's internal header" % (f, n, mod, inc))
        if len(internals) > 1:
            problems.append("%s: includes the internal headers of %s (one module at most)" %
                            (f, ", ".join(sorted(internals))))
    if "--graph" in sys.argv:
        for m in reversed(LAYERS):
            deps = sorted(edges.get(m, ()), key=LAYERS.index, reverse=True)
            print("- `%s/` -> %s" % (m, ", ".join("`%s/`" % d for d in deps) if deps else "nothing"))
    for p in problems:
        print(p)
    if problems:
        print("check_layers: %d violation(s) of the layering (bottom up: %s)" % (len(problems), " < ".join(LAYERS)))
        return 1
    print("check_layers: ok, %d modules, no include upward or into another module's internals" % len(LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
