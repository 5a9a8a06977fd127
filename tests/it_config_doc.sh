#!/usr/bin/env bash
# docs/config.md is the configuration reference; this keeps it true. Every
# key table there is checked against the loader through `switchboard run -c
# FILE --check` (tests/config_doc_check.py says how). Set SB_BIN to test
# another binary.
set -u
cd "$(dirname "$0")/.."
SB=$(realpath "${SB_BIN:-bin/switchboard}")
tmp=$(mktemp -d /tmp/sb-configdoc-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 tests/config_doc_check.py "$SB" "$tmp"
