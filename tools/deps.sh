#!/usr/bin/env bash
# Install the Debian packages Switchboard builds and tests with, when missing.
# Idempotent and quiet when everything is already there.
set -eu
need=(make gcc pkg-config libevent-dev libmsgpack-dev libsqlite3-dev libyaml-dev libcmocka-dev
      libpq-dev postgresql python3 curl ca-certificates util-linux)
[ "${SB_WITH_FUZZ:-0}" = 1 ] && need+=(clang libclang-rt-14-dev)
[ -n "${SB_EXTRA_DEBS:-}" ] && need+=($SB_EXTRA_DEBS)
missing=()
for p in "${need[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all ${#need[@]} packages present"
    exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "deps: done"
