#!/usr/bin/env bash
# Our RAG pipeline against a Python RAG stack at fixed concurrency
# (docs/PERFORMANCE.md, "RAG against a Python stack").
#
#   tools/rag_bench.sh [--concurrency 10] [--requests 200] [--rounds 3] [--max-tokens 64]
#                      [--stream-requests 40] [--c1-requests 20] [--py-workers 1]
#                      [--py-threads N] [--py-embed-threads N] [--only ours|python]
#                      [--out DIR] [--quick]
#
# 1. the bench venv, once: build/rag_bench/venv (its own, no system site
#    packages) with tests/bench/python_rag/requirements.txt from PyPI
#    (tools/deps.sh rag) and
#    the llama-cpp-python bindings of tools/llamacpp.sh (which builds the
#    reference llama.cpp into $LLAMACPP_DIR first if it is not there: 15-30
#    minutes on 2 cores, once);
# 2. tests/bench/rag_bench.py with that venv's Python: ingests the demo
#    base into both stacks, measures each alone, round after round, and
#    writes OUT/results.json and OUT/results.md. Its last line:
#      rag p99 ours X s, python Y s, ratio Y/X; rss ours A MB, python B MB
#
# --quick: 20 calls at concurrency 4, one round, max_tokens 16 - a check
# that both stacks work end to end, not a result. --only ours needs neither
# the venv nor llama.cpp: the system's python3 (with PyYAML) runs it.
# Environment: SB_BIN (default bin/switchboard), LLAMACPP_DIR (default
# build/llamacpp), RAG_BENCH_VENV (default build/rag_bench/venv).
# Exit status: 0 every call answered, 1 some failed, 2 usage or set-up error.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
for arg in "$@"; do
    case "$arg" in -h|--help) usage; exit 0 ;; esac
done

die() { echo "rag_bench: error: $*" >&2; exit 2; }
SB="${SB_BIN:-$repo/bin/switchboard}"
venv="${RAG_BENCH_VENV:-$repo/build/rag_bench/venv}"
[ -x "$SB" ] || die "$SB does not exist (build it: make, or make rag-bench)"
for m in models/qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf models/multilingual-e5-small.Q4_0.gguf; do
    [ -f "$m" ] || die "$m is missing (tools/models.sh qwen; tools/models.sh e5)"
done

# Ours alone runs nothing of the baseline: the system's python3 drives it
# (it needs PyYAML only), without the venv or llama.cpp.
only=""
prev=""
for arg in "$@"; do
    case "$arg" in --only=*) only=${arg#--only=} ;; esac
    [ "$prev" = "--only" ] && only=$arg
    prev=$arg
done
if [ "$only" = ours ]; then
    python3 -c 'import yaml' 2> /dev/null \
        || die "--only ours runs with the system's python3, which lacks PyYAML (Debian: apt-get install python3-yaml)"
    exec python3 tests/bench/rag_bench.py --sb "$SB" "$@"
fi

# The venv's python first on PATH: tools/llamacpp.sh installs the bindings
# into whichever python3 it finds.
SB_DEBS_ONLY=1 tools/deps.sh rag || die "tools/deps.sh rag failed"
if [ ! -x "$venv/bin/python" ]; then
    echo "rag_bench: creating $venv"
    python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
PYTHON="$venv/bin/python" tools/deps.sh rag || die "tools/deps.sh rag (into $venv) failed"
if ! "$venv/bin/python" -c 'import llama_cpp' 2> /dev/null; then
    echo "rag_bench: installing the llama-cpp-python bindings (tools/llamacpp.sh)"
fi
PATH="$venv/bin:$PATH" tools/llamacpp.sh --env > /dev/null \
    || die "tools/llamacpp.sh failed: no llama-cpp-python for the baseline"

exec "$venv/bin/python" tests/bench/rag_bench.py --sb "$SB" "$@"
