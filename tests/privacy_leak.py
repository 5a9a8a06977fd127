#!/usr/bin/env python3
"""privacy_leak.py - callers' personal data never reaches a store or an upstream.

  privacy_leak.py calls URL RUN_DIR VALUES_JSON N    drive N calls, check the replies
  privacy_leak.py scan VALUES_JSON PATH...            grep every byte under PATHs

Driven by tests/it_privacy_leak.sh against `switchboard run` on the tiny
fixtures, whose pipelines declare `privacy:` policies and whose composer is
tests/fake_openai.py's "echo" model (it records every body it receives and
answers with what it was sent). `calls` sends N calls carrying made-up but
valid identifiers (mobiles, resident IDs with their check digit, Luhn cards,
e-mail) written as digits, spaced, in Chinese numerals (幺 and 一) and in
English digit words, through both HTTP doors (whole and streamed) and the
socket door; marks feedback and reads traces and the feedback export back
into RUN_DIR/exports; runs conversations (the session store); and checks that the replies have the values restored
where the model echoed their placeholders (pseudonymize), masked (mask),
refused with personal_data (reject), and that an answer a tool computed
from revealed values is never cached. It writes every value and its
renderings to VALUES_JSON. `scan` then looks for each rendering - also as
JSON writes it with \\u escapes - in every file under the PATHs: zero hits.
Standard library only. Prints one line per check and "N passed, N failed".
"""
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

check = itlib.Checks(detail_max=400)
ZH = "零一二三四五六七八九"
EN = "zero one two three four five six seven eight nine".split()


# ------------------------------------------------------------ the values

def luhn_digit(body):
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def id_check(body17):
    w = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    return "10X98765432"[sum(int(c) * k for c, k in zip(body17, w)) % 11]


def make_values(rng, i):
    phone = "1" + rng.choice("3456789") + "".join(rng.choice("0123456789") for _ in range(9))
    birth = "19%02d%02d%02d" % (rng.randint(50, 99), rng.randint(1, 12), rng.randint(1, 28))
    body = rng.choice(["110105", "310104", "440305", "510107"]) + birth + "%03d" % rng.randint(0, 999)
    card_body = "622202" + "".join(rng.choice("0123456789") for _ in range(12))
    email = "caller%d.%s@example.com" % (i, "".join(rng.choice("abcdefgh") for _ in range(5)))
    return {"PHONE": phone, "ID": body + id_check(body), "CARD": card_body + luhn_digit(card_body), "EMAIL": email}


def zh(digits, one="一"):
    return "".join(ZH[int(c)] if c.isdigit() else c for c in digits).replace("一", one)


def renderings(v):
    """Every way a value might be written down: what the scan looks for."""
    if "@" in v:
        return [v]
    d = v.replace("X", "")
    out = [v, " ".join(v), v[:3] + " " + v[3:7] + " " + v[7:], zh(d), zh(d, "幺"), " ".join(zh(d)),
           " ".join(EN[int(c)] for c in d)]
    if len(v) == 18:
        out.append(v[:6] + " " + v[6:14] + " " + v[14:])
    return out


def spoken(v, how):
    """v as a caller's words reach us (the rendering the call uses)."""
    if how == "digits":
        return v
    if how == "spaced":
        return v[:3] + " " + v[3:7] + " " + v[7:] if len(v) == 11 else v[:6] + " " + v[6:14] + " " + v[14:]
    if how == "yao":
        return zh(v[:3], "幺") + " " + zh(v[3:7], "幺") + " " + zh(v[7:], "幺")
    if how == "zh":
        return zh(v)
    return " ".join(EN[int(c)] for c in v)


HOWS = ["digits", "spaced", "yao", "zh", "en"]


def sentence(vals, k):
    how = HOWS[k % len(HOWS)]
    phone = spoken(vals["PHONE"], how)
    if k % 3 == 0:
        return "你好，我的手机号是%s，身份证号%s，麻烦查一下。" % (phone, spoken(vals["ID"], "digits" if how in ("zh", "en") else how))
    if k % 3 == 1:
        return "银行卡号 %s 扣款不对，回电 %s" % (vals["CARD"], phone)
    return "Please call me back on %s or write to %s" % (phone, vals["EMAIL"])


# ------------------------------------------------------------------ calls

def post(url, path, body, headers=None):
    st, h, b = itlib.request(url + path, "POST", body, {"Content-Type": "application/json", **(headers or {})}, 60)
    return st, {k.lower(): v for k, v in h.items()}, b


def restored_in(text, vals):
    """The values whose placeholder the echo carried, put back (normalised)."""
    return [t for t, v in vals.items() if v in text]


def calls(url, run_dir, values_path, n):
    rng = random.Random(35)
    allvals, ids, reveal = [], [], []
    hits = 0
    t0 = time.time()
    for k in range(n):
        vals = make_values(rng, k)
        allvals.append(vals)
        said = sentence(vals, k)
        pipe = ["hotline", "account", "plain", "plain"][k % 4]
        cid = "leak-%d" % k
        st, h, b = post(url, "/v1/pipelines/" + pipe, {"input": said}, {"X-Call-Id": cid})
        if not check(st == 200, "call %d (%s) answered" % (k, pipe), b[:300]):
            continue
        res = json.loads(b)
        out = res["output"]
        if pipe != "plain":
            ids.append(cid)
        # What the caller said came back (the echo upstream, the cat tools) as
        # placeholders: the caller gets the values back.
        want = [["PHONE", "ID"], ["CARD", "PHONE"], ["PHONE", "EMAIL"]][k % 3]
        got = restored_in(out, vals)
        check(set(want) <= set(got) and "\u27e8" not in out, "call %d (%s): reply has %s restored" % (k, pipe, "/".join(want)),
              out[:300])
        if pipe == "account":
            # The tool was given the real values (privacy: reveal): its answer is never cached.
            check(h.get("x-cache") == "miss", "call %d: a revealed answer is not served from the cache" % k,
                  h.get("x-cache"))
            reveal.append(said)
        elif pipe == "plain":
            hits += h.get("x-cache") == "hit"
    check(hits >= n // 2 - 6, "same words with other values are answered from the cache (%d hits)" % hits)
    # The same words again: still a miss (never stored).
    st, h, b = post(url, "/v1/pipelines/account", {"input": reveal[0]})
    check(st == 200 and h.get("x-cache") == "miss", "a revealed answer repeated is still a miss", h.get("x-cache"))

    # Conversations: the values of a turn kept (sealed) in the session store
    # and restored in a later turn's reply.
    for k in range(max(2, n // 10)):
        vals = make_values(rng, 500 + k)
        allvals.append(vals)
        st, h, b = post(url, "/v1/pipelines/conv", {"input": "我的手机号是%s" % spoken(vals["PHONE"], HOWS[k % 5])})
        sid = json.loads(b).get("session") if st == 200 else None
        check(st == 200 and sid and vals["PHONE"] in json.loads(b)["output"], "conversation %d: turn 1 restored" % k, b[:300])
        st, h, b = post(url, "/v1/pipelines/conv", {"input": "card %s, same phone %s" % (vals["CARD"], vals["PHONE"]),
                                                    "session": sid})
        out = json.loads(b).get("output", "") if st == 200 else ""
        check(st == 200 and vals["CARD"] in out and vals["PHONE"] in out, "conversation %d: turn 2 restored" % k, b[:300])

    # Streamed through the OpenAI door: placeholders split across deltas are restored.
    for k in range(3):
        vals = make_values(rng, 1000 + k)
        allvals.append(vals)
        said = "stream %d: call %s" % (k, spoken(vals["PHONE"], HOWS[k]))
        st, h, b = post(url, "/v1/chat/completions", {"model": "pipeline:stream", "stream": True,
                                                       "messages": [{"role": "user", "content": said}]})
        text, done = itlib.sse_text(b) if st == 200 else ("", False)
        check(done and vals["PHONE"] in text and "\u27e8" not in text, "stream %d: restored across deltas" % k, b[:400])
    # The socket door pseudonymizes too.
    vals = make_values(rng, 2000)
    allvals.append(vals)
    rep = itlib.ipc_call(os.path.join(run_dir, "router.sock"), "pipeline",
                         {"name": "plain", "input": "socket call from " + vals["PHONE"]})
    res = rep.get("result") or {}
    check(vals["PHONE"] in str(res.get("output")) and vals["PHONE"] in str(res.get("json")),
          "the socket door restores its reply", rep)

    # mask: the model sees masks, the caller too; reject: 400 naming the types only.
    vals = make_values(rng, 3000)
    allvals.append(vals)
    st, h, b = post(url, "/v1/pipelines/masked", {"input": "号码 " + vals["PHONE"]})
    out = json.loads(b).get("output", "") if st == 200 else ""
    check(st == 200 and vals["PHONE"] not in out and vals["PHONE"][:3] + "****" in out, "mask: a mask, no value", b[:300])
    st, h, b = post(url, "/v1/pipelines/strict", {"input": "身份证 %s 电话 %s" % (vals["ID"], vals["PHONE"])})
    err = json.loads(b).get("error", {}) if b else {}
    check(st == 400 and err.get("code") == "personal_data" and "ID" in err.get("message", "") and
          "PHONE" in err.get("message", "") and vals["PHONE"] not in b.decode(), "reject: 400 personal_data", b[:300])
    st, h, b = post(url, "/v1/pipelines/strict", {"input": "what are your opening hours on 2024-05-01?"})
    check(st == 200, "reject: words without personal data run", b[:300])

    # Traces and feedback: marked, then read back into the run dir's exports (scanned).
    exports = os.path.join(run_dir, "exports")
    os.makedirs(exports, exist_ok=True)
    for cid in ids[-10:]:      # the newest: the ring keeps console.traces of them
        st, h, b = itlib.request(url + "/v1/calls/" + cid, "GET", None, {}, 30)
        check(st == 200, "trace of %s" % cid, b[:200])
        with open(os.path.join(exports, cid + ".json"), "wb") as f:
            f.write(b)
        st, h, b = post(url, "/v1/calls/%s/feedback" % cid, {"intent": "billing"})
        check(st == 200, "feedback on %s" % cid, b[:200])
    st, h, b = itlib.request(url + "/v1/feedback.tsv", "GET", None, {}, 30)
    check(st == 200 and b.count(b"\n") >= 10, "feedback export", b[:200])
    with open(os.path.join(exports, "feedback.tsv"), "wb") as f:
        f.write(b)
    with open(values_path, "w") as f:
        json.dump(allvals, f)
    print("%d calls in %.1f s" % (n, time.time() - t0))


# ------------------------------------------------------------------- scan

def needles(allvals):
    out = set()
    for vals in allvals:
        for v in vals.values():
            for r in renderings(v):
                out.add(r.encode())
                out.add(json.dumps(r)[1:-1].encode())       # as JSON with \\u escapes writes it
    return sorted(out)


def scan(values_path, paths):
    with open(values_path) as f:
        allvals = json.load(f)
    ns = needles(allvals)
    files = []
    for p in paths:
        if os.path.isfile(p):
            files.append(p)
        for root, _, names in os.walk(p):
            files += [os.path.join(root, n) for n in names if os.path.isfile(os.path.join(root, n))]
    total = 0
    for path in sorted(set(files)):
        with open(path, "rb") as f:
            data = f.read()
        found = [n.decode() for n in ns if n in data]
        total += len(found)
        check(not found, "%s (%d bytes): no value in any rendering" % (path, len(data)), found[:5])
    check(len(files) >= 4, "scanned %d files for %d renderings of %d callers' values" % (len(files), len(ns), len(allvals)))
    return total


def main():
    if sys.argv[1] == "calls":
        calls(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        scan(sys.argv[2], sys.argv[3:])
    sys.exit(check.summary())


if __name__ == "__main__":
    main()
