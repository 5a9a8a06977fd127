#!/usr/bin/env python3
"""config_doc_check.py SB_BIN TMPDIR - docs/config.md against the config loader.

For every key table in docs/config.md (sections `runtime`, local model,
remote model, both kinds, `runtime.retention`, `cache`, `cache.sync`, `console`, `knowledge`,
`sessions`):

  * every documented key, given a value of its documented type, is accepted
    by `switchboard run -c FILE --check`;
  * an integer's documented bounds are accepted and one past each bound is
    rejected with an error that names the key; every value of an enum is
    accepted and a value outside it is rejected;
  * the keys the loader knows in that section (the list in its "unknown key"
    error) are exactly the documented ones.

Prints one line per check and "N passed, N failed"; exit 1 on any failure.
"""
import os
import re
import subprocess
import sys

SB, TMP = sys.argv[1], sys.argv[2]
DOC = "docs/config.md"
GGUF = os.path.abspath("tests/data/tiny-llama-spm-Q4_K_M.gguf")
passed = failed = 0


def check(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL " + what + (": " + str(detail)[:400] if detail else ""))
        sys.stdout.flush()
    return cond


# ------------------------------------------------------------- the document

SECTIONS = {                      # heading text -> section id
    "## `runtime`": "runtime",
    "### `runtime.retention`": "retention",
    "### Local model (`gguf`)": "local",
    "### Remote model (`upstream`)": "remote",
    "### Both kinds": "both",
    "## `cache`": "cache",
    "### `cache.sync`": "sync",
    "## `console`": "console",
    "## `knowledge`": "knowledge",
    "## `sessions`": "sessions",
}


def parse_doc():
    tables, cur = {}, None
    for line in open(DOC, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("#"):
            cur = SECTIONS.get(line.strip())
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)]   # "\|" inside a cell is not a separator
        m = re.fullmatch(r"`([a-z_]+)`", cells[1]) if len(cells) > 4 and cells[0] == "" else None
        if cur and m:
            tables.setdefault(cur, {})[m.group(1)] = (cells[2], cells[3])
    return tables


# ----------------------------------------------------------------- configs

secret = os.path.join(TMP, "secret")
open(secret, "w").write("s3cret\n")
keyfile = os.path.join(TMP, "keyfile")
open(keyfile, "w").write("k3y\n")
sealkey = os.path.join(TMP, "sealkey")     # runtime.secret_key_file: 64 hex digits, owner-only
open(sealkey, "w").write("ab" * 32 + "\n")
os.chmod(sealkey, 0o600)
n_files = 0


def yaml_value(v):
    return v if re.fullmatch(r"-?\d+", v) else '"%s"' % v


def config(section, key, value):
    """A config text with `key: value` put in `section`, everything else minimal and valid."""
    kv = "%s: %s" % (key, yaml_value(value)) if key else ""
    run_dir = os.path.join(TMP, "run")
    runtime = {"dir": run_dir}
    model = {"gguf": GGUF}
    cache = console = sessions = None
    kb = None
    if section == "knowledge":
        kb = {"path": os.path.join(TMP, "kb.sqlite"), "embed_model": "m"}
        kb[key] = value
        if key == "adapter":            # a name of the embed model's adapters
            model["adapters"] = {"q": keyfile}
        if key == "pull":               # pulled from the cloud of cache.sync
            cache = {"sync": {"url": "http://127.0.0.1:9", "edge_id": "e1", "secret_file": secret}}
    if section == "runtime":
        runtime[key] = value
    elif section == "retention":
        runtime["retention"] = {key: value}
    elif section in ("local", "both"):
        model[key] = value
    elif section in ("remote", "both-remote"):
        model = {"upstream": "http://127.0.0.1:9/v1"}
        model[key] = value
    elif section == "cache":
        cache = {key: value} if key else {}
    elif section == "sync":
        cache = {"sync": {"url": "http://127.0.0.1:9", "edge_id": "e1", "secret_file": secret}}
        cache["sync"][key] = value
    elif section == "console":
        console = {key: value}
    elif section == "sessions":
        sessions = {key: value}

    def block(d, indent):
        out = []
        for k, v in d.items():
            if isinstance(v, dict):
                out.append(" " * indent + "%s:" % k)
                out += block(v, indent + 2)
            elif k:
                out.append(" " * indent + "%s: %s" % (k, yaml_value(str(v))))
        return out

    lines = ["runtime:"] + block(runtime, 2) + ["models:", "  m:"] + block(model, 4)
    if section == "local" and key == "draft":   # models.NAME.draft: another local model
        lines += ["  d:"] + block({"gguf": GGUF}, 4)
    if cache is not None:
        lines += ["cache:"] + (block(cache, 2) if cache else ["  path: %s" % os.path.join(TMP, "c.sqlite")])
    if console is not None:
        lines += ["console:"] + block(console, 2)
    if kb is not None:
        lines += ["knowledge:", "  kb:"] + block(kb, 4)
    if sessions is not None:
        lines += ["sessions:"] + block(sessions, 2)
    del kv
    return "\n".join(lines) + "\n"


def run_check(text):
    global n_files
    n_files += 1
    path = os.path.join(TMP, "c%d.yaml" % n_files)
    open(path, "w").write(text)
    p = subprocess.run([SB, "run", "-c", path, "--check"], capture_output=True, text=True, timeout=60)
    return p.returncode, (p.stdout + p.stderr).strip()


# ------------------------------------------------------ values from types

def sample_values(section, key, typ):
    """(accepted values, rejected values) for a documented type."""
    t = typ.replace("\\|", "|")
    m = re.match(r"int in \[(-?\d+), (-?\d+|ctx)\]", t)
    if m:
        lo = int(m.group(1))
        hi = 2048 if m.group(2) == "ctx" else int(m.group(2))   # ctx defaults to 2048
        return [str(lo), str(hi)], [str(lo - 1), str(hi + 1)]
    alts = re.findall(r"`([^`]+)`", t)
    if alts and "|" in t and "HOST" not in t:
        good = [a.replace("SECONDS", "60") for a in alts]
        return good, ["no-such-value"]
    if t == "path":
        if key == "secret_key_file":
            return [sealkey], [os.path.join(TMP, "missing-file"), keyfile]
        if key in ("api_key_file", "api_keys_file", "secret_file", "ca_file"):
            return [keyfile], [os.path.join(TMP, "missing-file")]
        if key == "gguf":
            return [GGUF], [os.path.join(TMP, "missing.gguf")]
        if key == "adapter":            # readable here; its content is checked by the worker that loads it
            return [keyfile], [os.path.join(TMP, "missing-adapter.gguf")]
        if key == "dir":
            return [os.path.join(TMP, "run-dir")], []
        return [os.path.join(TMP, "file.sqlite")], []
    if "HOST:PORT" in t and t.startswith("`HOST"):
        return ["127.0.0.1:18089"], ["127.0.0.1:99999"]
    if "http(s)://" in t:
        return ["http://127.0.0.1:8000/v1", "https://api.example.com/v1"], ["ftp://x/v1"]
    if t.startswith("`http://"):
        return ["http://127.0.0.1:9090"], ["ftp://x"]
    if t.startswith("`https://"):       # cache.sync.url: plain http only to loopback
        return ["https://cloud.example:9443/sb", "http://127.0.0.1:9090"], ["ftp://x", "http://192.0.2.7:9090"]
    if t == "model name":                # knowledge.embed_model: a model of models:
        return ["m"], ["no-such-model"]
    if t == "adapter name":              # knowledge.adapter: one of the embed model's adapters
        return ["q"], ["no-such-adapter"]
    if t == "another local model's name":   # models.NAME.draft: not itself
        return ["d"], ["no-such-model", "m"]
    if t == "env var name":
        return ["SB_SOME_KEY"], ["not a name"]
    if t == "string":
        return ["some-name"], []
    if t == "mapping":
        return [], []                    # cache.sync: its own table
    return None, None


# ------------------------------------------------------------------- checks

tables = parse_doc()
for sec in SECTIONS.values():
    check(sec in tables and tables[sec], "docs/config.md has a key table for section '%s'" % sec)

for sec, rows in sorted(tables.items()):
    targets = ["local", "both-remote"] if sec == "both" else [sec]
    for key, (typ, default) in rows.items():
        good, bad = sample_values(sec, key, typ)
        if not check(good is not None, "%s.%s: type '%s' is one the checker understands" % (sec, key, typ)):
            continue
        for target in targets:
            if target == "both-remote" and key == "max_tokens":
                good, bad = ["1", "1048576"], ["0", "1048577"]
            for v in good:
                rc, out = run_check(config(target, key, v))
                check(rc == 0, "%s: %s = %s is accepted, as documented" % (target, key, v), out)
            for v in bad:
                rc, out = run_check(config(target, key, v))
                check(rc == 2 and key in out, "%s: %s = %s is rejected naming the key" % (target, key, v), out)

# The loader's own key lists (from its unknown-key error) against the tables.
def loader_keys(section):
    rc, out = run_check(config(section, "zz_not_a_key", "1"))
    m = re.search(r"unknown key 'zz_not_a_key' \(expected one of: ([^)]*)\)", out)
    return set(k.strip() for k in m.group(1).split(",")) if m else None, out


for sec, doc_keys in [("runtime", set(tables.get("runtime", {}))),
                      ("retention", set(tables.get("retention", {}))),
                      ("local", set(tables.get("local", {})) | set(tables.get("both", {}))),
                      ("remote", set(tables.get("remote", {})) | set(tables.get("both", {}))),
                      ("cache", set(tables.get("cache", {}))),
                      ("sync", set(tables.get("sync", {}))),
                      ("console", set(tables.get("console", {}))),
                      ("knowledge", set(tables.get("knowledge", {})))]:
    keys, out = loader_keys(sec)
    if check(keys is not None, "%s: the loader lists its keys" % sec, out):
        check(keys == doc_keys, "%s: the loader's keys == the documented keys" % sec,
              "undocumented: %s; documented but unknown: %s" % (sorted(keys - doc_keys), sorted(doc_keys - keys)))

# Top level: the headings.
rc, out = run_check("zz_not_a_key: 1\nmodels:\n  m: { gguf: %s }\n" % GGUF)
m = re.search(r"expected one of: ([^)]*)\)", out)
top = set(k.strip() for k in m.group(1).split(",")) if m else set()
documented_top = set(re.findall(r"^## `([a-z_]+)`", open(DOC, encoding="utf-8").read(), re.M))
check(top and top == documented_top, "top-level keys == the documented sections",
      "loader %s, doc %s" % (sorted(top), sorted(documented_top)))

print("config doc check: %d passed, %d failed (%d configs checked)" % (passed, failed, n_files))
sys.exit(1 if failed else 0)
