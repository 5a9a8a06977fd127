#!/usr/bin/env bash
# Build and run tools/membw.c (memory read bandwidth; not part of the library).
#   tools/membw.sh [-s MiB] [-r reps] [-t 1,2]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo_root/build/tools/membw"
mkdir -p "$(dirname "$out")"
if [[ ! -x "$out" || "$repo_root/tools/membw.c" -nt "$out" ]]; then
    echo "membw: compiling $out"
    ${CC:-cc} -std=c11 -O2 -mavx2 -Wall -Wextra -Werror -pthread \
        -o "$out" "$repo_root/tools/membw.c"
fi
exec "$out" "$@"
