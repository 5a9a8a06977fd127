"""Validate `switchboard generate --prompts ... --json-schema S` output.

usage: grammar_check.py SCHEMA.json OUT.jsonl N_EXPECTED [forbidden-key ...]
Every line's text must parse as JSON, validate against the schema
(jsonschema, Draft 2020-12) and hold none of the forbidden keys; finish must
be "stop". Prints a summary line; exit 1 on any failure."""
import json
import sys

import jsonschema

schema = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
want, forbidden = int(sys.argv[3]), sys.argv[4:]
bad = 0
for i, rec in enumerate(lines):
    try:
        doc = json.loads(rec["text"])
        jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
        assert rec["finish"] == "stop", "finish %s" % rec["finish"]
        assert not any(k in doc for k in forbidden), "forbidden key"
    except Exception as e:  # noqa: BLE001 - any failure is reported the same way
        bad += 1
        print("line %d: %s: %r" % (i + 1, str(e).splitlines()[0], rec["text"][:200]))
print("%d/%d generations parse and validate (%d expected)" % (len(lines) - bad, len(lines), want))
sys.exit(0 if bad == 0 and len(lines) == want else 1)
