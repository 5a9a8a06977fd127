#!/usr/bin/env python3
"""privacy_real.py - the demo's hotline pipeline under a privacy policy on
the real models (`make privacy-check`, tests/real/privacy_check.sh).

  privacy_real.py config REPO OUT.yaml RUN_DIR PORT SECRET_KEY [SYNC_URL EDGE_SECRET_FILE]
      write OUT.yaml: configs/demo.yaml's models and hotline pipeline, with
      `privacy: pseudonymize`, the lookup tool given the real values
      (`privacy: reveal`, it is the one that needs the account), and the
      three changes a pipeline under a policy needs (below); plus `faq`,
      the same stages without reveal, whose answers are cached and synced.
  privacy_real.py calls URL VALUES_JSON N
      N calls with made-up valid mobiles, resident IDs and cards (digits,
      spaced, Chinese numerals, English words), 8 at a time; each reply is
      checked: no placeholder left in any form, no other caller's value,
      and the replies that mention the caller's number show the real one.

The changes to the demo's pipeline: the extract stage's schema lets
"account" be a placeholder (the demo's pattern allows [0-9A-Za-z-] only,
so the model could not copy ⟨CARD_1⟩ and made one up); the answer stage
is given the account the extract stage found, and asked to repeat a
number the caller gave (so that replies mention it and restoring it is
tested on what a real model writes).
"""
import concurrent.futures
import json
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import itlib  # noqa: E402
import privacy_leak as leak  # noqa: E402
import yaml  # noqa: E402

check = itlib.Checks(detail_max=300)
PLACEHOLDER = re.compile(r"[⟨〈＜<]\s*(ID|PHONE|TEL|CARD|EMAIL|PASSPORT|PLATE)[ _]?\d*\s*[⟩〉＞>]|"
                         r"\b(ID|PHONE|TEL|CARD|EMAIL|PASSPORT|PLATE)_\d+\b", re.I)


def config(repo, out, run_dir, port, secret_key, sync_url=None, edge_secret=None):
    with open(os.path.join(repo, "configs/demo.yaml"), encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    for m in cfg["models"].values():
        m["gguf"] = os.path.normpath(os.path.join(repo, "configs", m["gguf"]))
    cfg["runtime"] = {"dir": run_dir, "http": "127.0.0.1:%s" % port, "drain_ms": 10000,
                      "secret_key_file": secret_key}
    cfg["cache"] = {"path": run_dir + "/cache.sqlite", "max_mb": 64, "ttl_s": 86400}
    if sync_url:
        cfg["cache"]["sync"] = {"url": sync_url, "edge_id": "real", "secret_file": edge_secret, "interval_s": 5}
    cfg["console"] = {"traces": 1000, "show_caller_text": True, "otel_file": run_dir + "/otel.jsonl"}
    hot = cfg["pipelines"]["hotline"]
    hot["privacy"] = {"mode": "pseudonymize"}
    for st in hot["stages"]:
        if st["name"] == "extract":
            schema = json.loads(st["json_schema"])
            schema["properties"]["account"]["anyOf"][1] = {"type": "string", "maxLength": 40}
            st["json_schema"] = json.dumps(schema)
        if st["name"] == "lookup":
            st["command"] = [c.replace("{{config_dir}}/..", repo) for c in st["command"]]
            st["privacy"] = "reveal"
        if st["name"] == "answer":
            st["system"] = st["system"].replace("using only the facts given.",
                                                "using only the facts given. If the caller gave an account or "
                                                "phone number, repeat it exactly.")
            st["prompt"] = st["prompt"].replace("Caller: {{input}}",
                                                "Account: {{stages.extract.json.account}}\nCaller: {{input}}")
    faq = json.loads(json.dumps(hot))
    for st in faq["stages"]:
        st.pop("privacy", None)
    cfg["pipelines"] = {"hotline": hot, "faq": faq}
    with open(out, "w", encoding="utf-8") as f:
        yaml.safe_dump(cfg, f, allow_unicode=True, sort_keys=False)


TEMPLATES = [
    ("我想查社保缴费记录，身份证号{ID}，电话{PHONE}", "ID"),
    ("公积金提取要怎么办？银行卡号 {CARD}，联系电话 {PHONE}", "CARD"),
    ("My electricity bill is wrong, account {CARD}, call me back on {PHONE}", "CARD"),
    ("I need my pension contribution record, my ID number is {ID}", "ID"),
    ("这个月电费太高了，户号是银行卡 {CARD}，请回电 {PHONE}", "CARD"),
    ("我要投诉，窗口工作人员态度很差，我的电话是{PHONE}", "PHONE"),
]


def one_call(url, k, vals):
    text, main = TEMPLATES[k % len(TEMPLATES)]
    how = leak.HOWS[k % len(leak.HOWS)]
    said = text.format(ID=leak.spoken(vals["ID"], "digits" if how in ("zh", "en") else how),
                       PHONE=leak.spoken(vals["PHONE"], how), CARD=vals["CARD"])
    pipe = "hotline" if k % 2 == 0 else "faq"
    st, h, b = itlib.request(url + "/v1/pipelines/" + pipe, "POST", {"input": said},
                             {"Content-Type": "application/json", "X-Call-Id": "real-%d" % k}, 600)
    return k, pipe, said, st, {x.lower(): y for x, y in h.items()}, b


def calls(url, values_path, n):
    rng = random.Random(3535)
    allvals = [leak.make_values(rng, k) for k in range(n)]
    with open(values_path, "w") as f:
        json.dump(allvals, f)
    t0 = time.time()
    mentioned = leftover = crossed = failed = 0
    owners = {}
    for k, vals in enumerate(allvals):
        for v in vals.values():
            owners[v] = k
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(one_call, url, k, allvals[k]) for k in range(n)]
        for fut in concurrent.futures.as_completed(futs):
            k, pipe, said, st, h, b = fut.result()
            if not check(st == 200, "call %d (%s) answered" % (k, pipe), b[:200]):
                failed += 1
                continue
            out = json.loads(b).get("output", "")
            left = PLACEHOLDER.findall(out)
            others = [v for v, o in owners.items() if o != k and v in out]
            mine = [t for t, v in allvals[k].items() if v in out]
            leftover += bool(left)
            crossed += bool(others)
            mentioned += bool(mine)
            check(not left, "call %d (%s): no placeholder left in the reply" % (k, pipe), out[:300])
            check(not others, "call %d (%s): no other caller's value in the reply" % (k, pipe), others)
    dt = time.time() - t0
    print("%d calls in %.0f s: %d replies mention the caller's number, restored (%.1f %%); %d with a placeholder "
          "left, %d with another caller's value, %d failed" % (n, dt, mentioned, 100.0 * mentioned / max(n, 1),
                                                              leftover, crossed, failed))
    check(mentioned >= n // 20, "at least 5 %% of the replies mention the caller's number, restored (%d)" % mentioned)


def main():
    if sys.argv[1] == "config":
        config(*sys.argv[2:])
        return 0
    calls(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
