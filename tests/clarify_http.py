#!/usr/bin/env python3
"""clarify_http.py URL - an intent stage's clarify: against a real runtime
(tests/it_clarify.sh starts it). Its `clarify` pipeline routes with a
random-weight encoder and 1nn, so only an exact example is sure to be
nearest: the first option offered is that example's label, the second
whichever label the random vectors put next. clarify.margin is 2, so
every call is asked about; clarify.max is 2.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
import itlib  # noqa: E402

URL = sys.argv[1]
check = itlib.Checks(detail_max=600)
IN_SCOPE = {"billing", "complaint", "tax", "human_agent"}


def turn(text, session=None):
    body = {"input": text}
    if session:
        body["session"] = session
    status, _, raw = itlib.request(URL + "/v1/pipelines/clarify", "POST", body,
                                   {"Content-Type": "application/json"}, timeout=60)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {"raw": raw[:300]}


def options(j):
    a = j.get("awaiting") or {}
    return a.get("options") if a.get("kind") == "clarify" else None


def settled(j, label):
    return (j.get("awaiting") is None and j["state"]["intent"] == label and j["reply"] == "routed to " + label
            and j["done"] is False and j["handoff"] is None)


# An exact example: asked between its label and the next one, by display name.
st, j = turn("the meter reading is off")
opts = options(j)
check(st == 200 and opts is not None and len(opts) == 2 and opts[0] == "billing" and set(opts) <= IN_SCOPE,
      "a close call is asked about: two in-scope labels, the nearest first", j)
check(j.get("reply", "").startswith("Is your call about billing or ") and j["state"]["intent"] is None
      and j["done"] is False, "the question names the display names, in English", j)
sid = j.get("session")
st, j = turn("billing, please", sid)
check(st == 200 and settled(j, "billing"), "answered by the display name: the call goes on at that label", j)

# "the second one" picks the second option.
st, j = turn("the meter reading is off")
second = (options(j) or [None, None])[1]
st, j = turn("the second one", j.get("session"))
check(st == 200 and second and settled(j, second), "'the second one' picks the second option (%s)" % second, j)

# Chinese: the question in Chinese, by the Chinese display names; 前者
# picks the first. (The fixture's tiny vocabulary reads every Chinese text
# alike, so which labels are offered is the random vectors' choice.)
ZH = {"billing": "账单", "complaint": "投诉", "tax": "个税", "human_agent": "human agent"}
st, j = turn("个税怎么申报")
opts = options(j) or []
check(st == 200 and len(opts) == 2 and j.get("reply") == "请问您是要咨询%s，还是%s？" % (ZH[opts[0]], ZH[opts[1]]),
      "a Chinese caller is asked in Chinese, by the Chinese display names", j)
st, j = turn("前者", j.get("session"))
check(st == 200 and opts and settled(j, opts[0]), "前者 picks the first option", j)

# Out of scope by a nose: never offered; the in-scope label alone, yes/no.
st, j = turn("what is the weather like")
opts = options(j) or []
check(st == 200 and len(opts) == 1 and opts[0] in IN_SCOPE and j["reply"].startswith("Did you mean "),
      "out of scope ahead: only the in-scope label is offered ('did you mean ...?')", j)
st, j = turn("yeah", j.get("session"))
check(st == 200 and opts and settled(j, opts[0]), "a yes takes the single option", j)
# Neither: one open question, then the answer is routed as a new call; a
# third question would pass clarify.max, so the call is handed off.
st, j = turn("the meter reading is off")
sid = j.get("session")
st, j = turn("neither", sid)
check(st == 200 and j.get("awaiting") == {"kind": "clarify", "options": []} and "again" in j["reply"],
      "'neither' gets one open question", j)
st, j = turn("I want to complain", sid)
check(st == 200 and j["done"] is True and (j.get("handoff") or {}).get("reason") == "unclear"
      and j["state"]["intent"] == "complaint" and "colleague" in j["reply"],
      "still unclear after clarify.max questions: handed off (reason unclear) at the best guess", j)

# A new request instead of an answer: routed again, and asked about anew.
st, j = turn("the meter reading is off")
sid = j.get("session")
st, j = turn("I want to complain", sid)
opts = options(j) or []
check(st == 200 and opts[:1] == ["complaint"], "a new request is routed again (asked about: %s)" % opts, j)
st, j = turn("a complaint", sid)
check(st == 200 and settled(j, "complaint") and j["state"]["turn"] == 3, "and its answer settles the call", j)

# A no to a single option, followed by what was meant: that is routed.
st, j = turn("what is the weather like")
sid = j.get("session")
st, j = turn("no, my income tax return", sid)
opts = options(j) or []
check(st == 200 and opts[:1] == ["tax"], "'no, <request>' routes the request (asked about: %s)" % opts, j)

# The session's transcript keeps the questions and the answers.
st, _, raw = itlib.request(URL + "/v1/sessions/" + sid, "GET")
check(st == 200 and "no, my income tax return" in raw.decode(), "the session keeps the turns", raw[:300])
sys.exit(check.summary())
