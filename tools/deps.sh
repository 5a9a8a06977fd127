#!/usr/bin/env bash
# Install the Debian packages Switchboard builds and tests with, when missing.
# Idempotent and quiet when everything is already there.
set -eu
need=(make gcc pkg-config libevent-dev libmsgpack-dev libsqlite3-dev libyaml-dev libcmocka-dev
      libpq-dev postgresql python3 curl ca-certificates util-linux)
[ "${SB_WITH_FUZZ:-0}" = 1 ] && need+=(clang libclang-rt-14-dev)
[ -n "${SB_EXTRA_DEBS:-}" ] && need+=($SB_EXTRA_DEBS)
# Python packages the tests use: the real OpenAI client against our gateway
# (tests/it_router.sh). From PyPI with pip, as tools/models.sh does.
python_deps() {
    python3 -c 'import openai' 2>/dev/null && return 0
    echo "deps: pip install openai"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check openai \
        || PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --break-system-packages openai
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
