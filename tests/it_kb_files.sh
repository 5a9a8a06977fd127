#!/usr/bin/env bash
# What `switchboard kb add` is handed from outside, on the tiny random e5
# encoder of tests/e5_tiny.py (no download): a FIFO is refused at once (it
# hung forever, waiting for a writer), a symbolic link is refused unless
# --follow-symlinks, a file name holding a terminal escape or a newline is
# printed escaped by `kb add` and `kb list` (one table row per source), a
# UTF-8 BOM and lone CR line breaks in Markdown keep the first heading and
# the section paths, and a file without a known extension is refused.
set -euo pipefail
cd "$(dirname "$0")/.."
SB="$(realpath "${SB_BIN:-bin/switchboard}")"
tmp="$(mktemp -d /tmp/sb-kbf-XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
python3 tests/e5_tiny.py --model-only "$SB" "$tmp"

# Each check reports and the script goes on, so one run shows every finding.
failed=0
fail() { echo "it_kb_files: FAIL: $*" >&2; failed=1; }
expect() {   # expect EXIT_CODE STDERR_SUBSTRING CMD...
    local want="$1" msg="$2" rc=0; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [[ "$rc" == "$want" ]] || { fail "$* exited $rc, want $want ($(head -c 300 "$tmp/err"))"; return; }
    grep -qF -- "$msg" "$tmp/err" || fail "$*: stderr lacks '$msg': $(head -c 300 "$tmp/err")"
}
cat > "$tmp/c.yaml" <<EOF
models:
  tiny: { gguf: $tmp/tiny-q8_0.gguf }
knowledge:
  kb: { path: $tmp/kb.sqlite, embed_model: tiny, chunk_tokens: 64, overlap: 8 }
EOF
add() { "$SB" kb add -c "$tmp/c.yaml" "$@"; }

# ---- a FIFO: refused at once. Bound: 20 s, far above the command's own
# start-up (tens of ms); before, it never returned (`timeout` exits 124).
mkfifo "$tmp/f.txt"
rc=0; timeout 20 "$SB" kb add -c "$tmp/c.yaml" "$tmp/f.txt" 2>"$tmp/err" || rc=$?
[[ $rc == 1 ]] && grep -qF "f.txt: a FIFO: only regular files are read" "$tmp/err" ||
    fail "kb add on a FIFO exited $rc, want 1 and 'a FIFO' ($(cat "$tmp/err"))"
mkdir "$tmp/d.md"
expect 1 "d.md: a directory: only regular files are read" add "$tmp/d.md"

# ---- symbolic links: refused, unless --follow-symlinks
printf 'root:x:0:0:root:/root:/bin/bash\n' > "$tmp/secret"
printf '# Note\n\nThe counter opens at nine.\n' > "$tmp/note.md"
ln -s "$tmp/secret" "$tmp/p.txt"
expect 1 "p.txt: a symbolic link: refused (kb add --follow-symlinks reads through it)" add "$tmp/p.txt"
ln -s "$tmp/note.md" "$tmp/link.md"
add --quiet --follow-symlinks "$tmp/link.md" 2>"$tmp/err" || fail "--follow-symlinks: $(cat "$tmp/err")"
"$SB" kb list -c "$tmp/c.yaml" | grep -q "^link.md " || fail "--follow-symlinks did not add link.md"
"$SB" kb list -c "$tmp/c.yaml" | grep -q "^p.txt " && fail "the refused link p.txt was indexed"
"$SB" kb --help | grep -q -- "--follow-symlinks" || fail "kb --help does not name --follow-symlinks"

# ---- control characters in file names: escaped where printed
evil=$'ev\e[31mil\nname.txt'
printf 'A quiet paragraph about office hours.\n' > "$tmp/$evil"
add "$tmp/$evil" 2>"$tmp/err" || fail "kb add of the escaped name: $(cat "$tmp/err")"
grep -q $'\e' "$tmp/err" && fail "kb add printed a raw ESC: $(od -c "$tmp/err" | head)"
grep -qF 'ev\x1b[31mil\nname.txt: 1 chunks' "$tmp/err" || fail "kb add progress: $(cat "$tmp/err")"
"$SB" kb list -c "$tmp/c.yaml" > "$tmp/list"
grep -q $'\e' "$tmp/list" && fail "kb list printed a raw ESC: $(od -c "$tmp/list" | head)"
[[ $(wc -l < "$tmp/list") == 3 ]] || fail "kb list: a name broke the table (want header + 2 rows): $(cat "$tmp/list")"
grep -qF 'ev\x1b[31mil\nname.txt' "$tmp/list" || fail "kb list: $(cat "$tmp/list")"

# ---- Markdown: a BOM (it hid the first "# ", so the heading and the
# section path were lost) and lone CR line breaks (one line before)
printf '\xef\xbb\xbf# Housing fund\n\n## Rent\n\nBring the lease and your identity card.\n' > "$tmp/bom.md"
printf '# Tax\r\r## Refunds\r\rRefunds take two weeks in the app.\r' > "$tmp/cr.md"
add --quiet "$tmp/bom.md" "$tmp/cr.md" 2>"$tmp/err" || fail "kb add bom.md cr.md: $(cat "$tmp/err")"
for q in "bom.md|Housing fund > Rent|Bring the lease and your identity card.|lease identity" \
         "cr.md|Tax > Refunds|Refunds take two weeks in the app.|refunds weeks"; do
    IFS='|' read -r src section text query <<< "$q"
    "$SB" kb search -c "$tmp/c.yaml" --mode bm25 --json "$query" > "$tmp/out" 2>/dev/null
    python3 - "$tmp/out" "$src" "$section" "$text" <<'EOF' || fail "$src: $(head -1 "$tmp/out")"
import json, sys
h = json.loads(open(sys.argv[1]).readline())
assert (h["source"], h["section"], h["text"]) == tuple(sys.argv[2:5]), h
EOF
done

# ---- kb eval: a NUL in a question line ended the question there, silently
printf 'lease\0 and more\tbom.md\n' > "$tmp/q.tsv"
expect 2 "q.tsv:1: a NUL (\0) in the line" "$SB" kb eval -c "$tmp/c.yaml" "$tmp/q.tsv"

# ---- no extension, unlisted extension: refused with the list
printf 'plain words\n' > "$tmp/README"
expect 1 "README: no file extension, so no known format (expected .txt .md .markdown .html .htm .pdf" add "$tmp/README"
printf 'x' > "$tmp/a.docx"
expect 1 "a.docx: unsupported file type '.docx'" add "$tmp/a.docx"
"$SB" kb list -c "$tmp/c.yaml" | grep -q "^README " && fail "README (no extension) was indexed"
[[ $failed == 0 ]] || exit 1
echo "it_kb_files: ok"
