#!/usr/bin/env python3
"""otel_check.py URL KEY FILE - console.otel_file against the calls made.

Makes pipeline calls (our id, a caller's id, a caller's 32-hex trace id, a
cache hit, a streamed call, a failing tool, a timeout), then reads FILE and
checks every line against the OTLP JSON encoding (opentelemetry-proto
docs/specification.md, "JSON Protobuf Encoding"; the Collector's file
exporter / otlpjsonfile receiver format):

  * one ExportTraceServiceRequest per line: resourceSpans[].resource
    (service.name, host.name), scopeSpans[].scope{name, version}, spans;
  * traceId 32 hex, spanId/parentSpanId 16 hex, not all zeros; kind and
    status.code integers; start/endTimeUnixNano decimal strings; attributes
    [{key, value: {exactly one of stringValue|intValue (decimal string)|
    doubleValue|boolValue}}]; camelCase keys only;
  * per line one trace: one root, every other span its child, stage spans
    inside the root, in order, the root inside the client's wall-clock
    window around the request;
  * the trace id is the X-Call-Id the API returned (lower-cased when it is
    32 hex digits, else the first 32 hex digits of its SHA-256);
  * the stage spans are the stages GET /v1/calls/ID shows as run, with
    model and status; the caller's words are masked as in the trace ring.
Then `FILE lines` prints the number of lines (the shell script's helper).
Prints one line per check; exit 1 on any failure.
"""
import hashlib, json, os, re, sys, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import itlib  # noqa: E402

check = itlib.Checks(detail_max=600)
HEX = {32: re.compile(r"^[0-9a-f]{32}$"), 16: re.compile(r"^[0-9a-f]{16}$")}
SECRET = "my secret words 4711"


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f.read().splitlines() if l.strip()]


def hex_id(v, n):
    return isinstance(v, str) and HEX[n].match(v) and v.strip("0") != ""


def attr_problems(attrs, where):
    bad = []
    if not isinstance(attrs, list):
        return ["%s: attributes not a list" % where]
    for a in attrs:
        if set(a) != {"key", "value"} or not isinstance(a["key"], str) or not isinstance(a["value"], dict):
            bad.append("%s: attribute %r" % (where, a))
            continue
        v = a["value"]
        if len(v) != 1:
            bad.append("%s: %s: value with %d fields" % (where, a["key"], len(v)))
            continue
        (t, x), = v.items()
        ok = {"stringValue": lambda x: isinstance(x, str),
              "intValue": lambda x: isinstance(x, str) and re.match(r"^-?\d+$", x),
              "doubleValue": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
              "boolValue": lambda x: isinstance(x, bool)}.get(t)
        if not ok or not ok(x):
            bad.append("%s: %s: %s=%r" % (where, a["key"], t, x))
    return bad


def attrs_of(span):
    return {a["key"]: list(a["value"].values())[0] for a in span.get("attributes", [])}


def snake(o, path=""):
    """Keys that are not lowerCamelCase (OTLP JSON uses the proto names in
    lowerCamelCase); attribute keys are data, not field names."""
    out = []
    if isinstance(o, dict):
        for k, v in o.items():
            if "_" in k:
                out.append(path + "." + k)
            if k != "attributes":
                out += snake(v, path + "." + k)
    elif isinstance(o, list):
        for i, v in enumerate(o):
            out += snake(v, "%s[%d]" % (path, i))
    return out


def structure(req):
    """Problems with one line, [] when it is a valid ExportTraceServiceRequest
    of one trace as we write it."""
    p = snake(req)
    rs = req.get("resourceSpans")
    if not isinstance(rs, list) or len(rs) != 1:
        return p + ["resourceSpans: %r" % rs]
    res = rs[0].get("resource", {})
    p += attr_problems(res.get("attributes"), "resource")
    ra = attrs_of(res)
    if ra.get("service.name") != "switchboard" or not ra.get("host.name"):
        p.append("resource attributes %r" % ra)
    ss = rs[0].get("scopeSpans")
    if not isinstance(ss, list) or len(ss) != 1:
        return p + ["scopeSpans: %r" % ss]
    scope = ss[0].get("scope", {})
    if not isinstance(scope.get("name"), str) or not isinstance(scope.get("version"), str):
        p.append("scope %r" % scope)
    spans = ss[0].get("spans")
    if not isinstance(spans, list) or not spans:
        return p + ["no spans"]
    for s in spans:
        w = s.get("name", "?")
        if not hex_id(s.get("traceId"), 32):
            p.append("%s: traceId %r" % (w, s.get("traceId")))
        if not hex_id(s.get("spanId"), 16):
            p.append("%s: spanId %r" % (w, s.get("spanId")))
        if "parentSpanId" in s and not hex_id(s["parentSpanId"], 16):
            p.append("%s: parentSpanId %r" % (w, s["parentSpanId"]))
        if not isinstance(s.get("name"), str) or not s["name"]:
            p.append("span name %r" % s.get("name"))
        if type(s.get("kind")) is not int or not 1 <= s["kind"] <= 5:
            p.append("%s: kind %r" % (w, s.get("kind")))
        for k in ("startTimeUnixNano", "endTimeUnixNano"):
            if not isinstance(s.get(k), str) or not re.match(r"^\d{19}$", s[k]):
                p.append("%s: %s %r (a decimal string of Unix ns)" % (w, k, s.get(k)))
        st = s.get("status", {})
        if type(st.get("code")) is not int or st["code"] not in (0, 1, 2) or \
                ("message" in st and not isinstance(st["message"], str)):
            p.append("%s: status %r" % (w, st))
        p += attr_problems(s.get("attributes", []), w)
        for e in s.get("events", []):
            if not isinstance(e.get("timeUnixNano"), str) or not isinstance(e.get("name"), str):
                p.append("%s: event %r" % (w, e))
    if p:
        return p
    # One tree: a single root, every other span its child, one trace id.
    roots = [s for s in spans if "parentSpanId" not in s]
    if len(roots) != 1:
        return ["%d roots" % len(roots)]
    root = roots[0]
    ids = [s["spanId"] for s in spans]
    if len(set(ids)) != len(ids):
        p.append("duplicate span ids")
    if {s["traceId"] for s in spans} != {root["traceId"]}:
        p.append("more than one trace id")
    t0, t1 = int(root["startTimeUnixNano"]), int(root["endTimeUnixNano"])
    if t0 > t1:
        p.append("root ends before it starts")
    prev_end = t0
    for s in spans[1:]:
        a, b = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
        if s.get("parentSpanId") != root["spanId"]:
            p.append("%s: parent is not the root" % s["name"])
        if not t0 <= a <= b <= t1:
            p.append("%s: [%d, %d] outside the root [%d, %d]" % (s["name"], a, b, t0, t1))
        if a < prev_end:
            p.append("%s: starts before the previous stage ended" % s["name"])
        prev_end = b
    for e in root.get("events", []):
        if not t0 <= int(e["timeUnixNano"]) <= t1:
            p.append("event %s outside the root" % e["name"])
    return p


def trace_id_of(call_id):
    if re.match(r"^[0-9a-fA-F]{32}$", call_id) and call_id.strip("0"):
        return call_id.lower()
    return hashlib.sha256(call_id.encode()).hexdigest()[:32]


def main():
    url, key, path = sys.argv[1:4]
    auth = {"Authorization": "Bearer " + key}

    def call(pipe, text, headers=None):
        h = dict(auth, **(headers or {}))
        before = time.time_ns()
        st, hd, body = itlib.request(url + "/v1/pipelines/" + pipe, "POST", {"input": text}, h)
        return {"pipe": pipe, "status": st, "id": hd.get("X-Call-Id"), "t": (before, time.time_ns()),
                "cache": hd.get("X-Cache")}

    calls = [call("p", SECRET),                                          # ours, a miss
             call("p", SECRET),                                          # the same: a hit
             call("p", "desk call\nsecond line", {"X-Call-Id": "desk-4711", "Cache-Control": "no-cache"}),
             call("p", "joined", {"X-Call-Id": "4BF92F3577B34DA6A3CE929D0E0E4736", "Cache-Control": "no-cache"}),
             call("tools", "tool please " + SECRET),                     # a failing tool stage, call ok
             call("slow", "wait for it")]                                # 504: the tool still running
    before = time.time_ns()
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(
        {"model": "pipeline:p", "stream": True, "messages": [{"role": "user", "content": "stream it"}]}).encode(),
        headers=dict(auth, **{"Content-Type": "application/json", "Cache-Control": "no-cache"}))
    with urllib.request.urlopen(req, timeout=30) as r:
        sid = r.headers.get("X-Call-Id")
        r.read()
    calls.append({"pipe": "p", "status": 200, "id": sid, "t": (before, time.time_ns()), "cache": None,
                  "streamed": True})
    check([c["status"] for c in calls] == [200, 200, 200, 200, 200, 504, 200] and all(c["id"] for c in calls),
          "the calls answered as set up (the slow one 504), each with an X-Call-Id", calls)
    check(calls[1]["cache"] == "hit", "the repeated call was a cache hit", calls[1])

    got = []
    for _ in range(50):                     # written before the reply; allow for slow (sanitized) runs
        got = lines(path)
        if len(got) >= len(calls):
            break
        time.sleep(0.1)
    check(len(got) == len(calls), "one line per call (%d lines, %d calls)" % (len(got), len(calls)))
    raw = open(path, encoding="utf-8").read()
    check(SECRET not in raw and "second line" not in raw,
          "the caller's words are masked in the file (console.show_caller_text: false)")
    problems = [(i, structure(r)) for i, r in enumerate(got)]
    problems = [x for x in problems if x[1]]
    check(not problems, "every line is an OTLP/JSON ExportTraceServiceRequest of one well-formed trace",
          problems[:3])

    by_trace = {}
    for r in got:
        spans = r["resourceSpans"][0]["scopeSpans"][0]["spans"]
        by_trace.setdefault(spans[0]["traceId"], []).append(spans)
    for c in calls:
        found = by_trace.get(trace_id_of(c["id"]), [])
        if not check(len(found) == 1, "call %s: one trace, id %s" % (c["id"], trace_id_of(c["id"])),
                     sorted(by_trace)):
            continue
        spans = found[0]
        root, stages = spans[0], spans[1:]
        ra = attrs_of(root)
        t0, t1 = int(root["startTimeUnixNano"]), int(root["endTimeUnixNano"])
        check(ra.get("switchboard.call_id") == c["id"] and ra.get("switchboard.status") == str(c["status"]) and
              root["name"] == "pipeline " + c["pipe"] and root["kind"] == 2,
              "call %s: root span 'pipeline %s' (server) with its id and status" % (c["id"], c["pipe"]), ra)
        # The root lies in the client's window (a little slack: two clocks read).
        check(c["t"][0] - 5_000_000 <= t0 <= t1 <= c["t"][1] + 5_000_000,
              "call %s: root [%d, %d] ns within the client's [%d, %d]" % (c["id"], t0, t1, *c["t"]))
        st, _, body = itlib.request(url + "/v1/calls/" + c["id"], "GET", None, auth)
        tr = json.loads(body)
        ran = [s for s in tr["result"]["stages"] if s.get("start_ms") is not None]
        if ra.get("switchboard.cache") == "hit":
            check(not stages, "call %s: a cache hit has the root span only" % c["id"], stages)
            continue
        want = [(s["kind"] + " " + s["name"], s.get("model")) for s in ran]
        have = [(s["name"], attrs_of(s).get("gen_ai.request.model")) for s in stages]
        check(want == have and stages, "call %s: one span per stage that ran %s" % (c["id"], have), want)
        codes = [s["status"]["code"] for s in stages]
        if c["pipe"] == "tools":
            check(codes == [1, 2] and "lookup" in attrs_of(stages[1]).get("switchboard.stage", "") and
                  stages[1]["status"].get("message") and root["status"]["code"] == 1,
                  "a failing tool: its span is an error with a message, the call ok", [codes, stages[1]["status"]])
        elif c["pipe"] == "slow":
            check(root["status"]["code"] == 2 and codes[-1] == 2 and
                  stages[-1]["endTimeUnixNano"] == root["endTimeUnixNano"] and "timeout" in root["status"]["message"],
                  "a timeout: root and the running stage are errors, the stage ends with the call",
                  [root["status"], stages[-1]])
        else:
            gen = [s for s in stages if attrs_of(s).get("switchboard.stage.kind") == "generate"]
            check(codes == [1] * len(codes) and gen and int(attrs_of(gen[0]).get("gen_ai.usage.output_tokens", 0)) > 0,
                  "call %s: stages ok, the generate stage with its tokens" % c["id"], [codes, gen[:1]])
        if c.get("streamed"):
            ev = root.get("events", [])
            check(len(ev) == 1 and ev[0]["name"] == "first_token", "a streamed call: a first_token event", ev)
    return check.summary()


if __name__ == "__main__":
    if sys.argv[2:3] == ["lines"]:
        print(len(lines(sys.argv[1])))
        sys.exit(0)
    sys.exit(main())
