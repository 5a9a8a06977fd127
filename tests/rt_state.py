#!/usr/bin/env python3
"""Read the supervisor's DIR/state.json for tests/it_runtime.sh.

  rt_state.py get DIR NAME FIELD             print one field of a model (NAME
                                             "router": the router's entry)
  rt_state.py wait DIR NAME STATE SECS [--not-pid P] [--min-starts N]
                                             poll until the model is in STATE
                                             (and its pid differs from P); print
                                             the pid and the wait in ms
  rt_state.py pids DIR                       every live pid, space-separated

The file is replaced atomically (rename), so a read never sees half of it.
"""
import json
import sys
import time


def load(d):
    try:
        with open(d + "/state.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def child(s, name):
    """A model's entry, or the router's for the name "router" (never a model)."""
    if not s:
        return None
    return s.get("router") if name == "router" else s["models"].get(name)


def main(argv):
    cmd, d = argv[1], argv[2]
    if cmd == "get":
        s = load(d)
        m = child(s, argv[3])
        v = m.get(argv[4]) if m else None
        print("" if v is None else v)
        return 0
    if cmd == "pids":
        s = load(d) or {"models": {}}
        kids = list(s["models"].values()) + ([s["router"]] if s.get("router") else [])
        print(" ".join(str(m["pid"]) for m in kids if m.get("pid")))
        return 0
    if cmd == "wait":
        name, want, secs = argv[3], argv[4], float(argv[5])
        not_pid = int(argv[argv.index("--not-pid") + 1]) if "--not-pid" in argv else None
        min_starts = int(argv[argv.index("--min-starts") + 1]) if "--min-starts" in argv else 0
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < secs:
            s = load(d)
            m = child(s, name)
            last = m
            if m and m["state"] == want and (not_pid is None or m["pid"] != not_pid) \
                    and m.get("starts", 0) >= min_starts:
                print(m["pid"], int((time.monotonic() - t0) * 1000))
                return 0
            time.sleep(0.01)
        print("timeout: %s is %s" % (name, last and last["state"]), file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
