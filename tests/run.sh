#!/usr/bin/env bash
# Runs every test program given on the command line, then every tests/it_*.sh
# integration script, and prints one summary line "N passed, N failed".
# Each cmocka program prints its own per-test report.
set -u
cd "$(dirname "$0")/.."
# PYTHON (tools/pylib.sh) is the python3 the scripts below start by name.
. tools/pylib.sh
py_on_path "$(pwd)/${SB_BUILD:-build}/python-bin" || { echo "run.sh: PYTHON=$PYTHON is not a command" >&2; exit 1; }
passed=0; failed=0; failed_names=()
run_one() {
    local name=$1; shift
    local t0=$(date +%s%N)
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); failed_names+=("$name")
    fi
    echo "# $name: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}
for t in "$@"; do
    run_one "$(basename "$t")" "$t"
done
for s in tests/it_*.sh; do
    [ -e "$s" ] || continue
    run_one "$(basename "$s")" bash "$s"
done
echo
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "programs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
