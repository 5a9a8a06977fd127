# tools/pylib.sh - sourced by tools/deps.sh, tools/models.sh, tools/demo.sh and
# tests/run.sh: which Python the set-up uses and how packages go into it.
#
# PYTHON (default python3 on PATH) is the one interpreter every script uses.
# A venv's python takes packages with a plain `pip install`; a system python
# that PEP 668 marks as externally managed (Debian 12's /usr/bin/python3)
# needs --break-system-packages, which we then pass.

py="${PYTHON:-python3}"
export PIP_ROOT_USER_ACTION=ignore       # root installs on purpose (CI, fresh machines)
export PIP_DISABLE_PIP_VERSION_CHECK=1

# py_require WHO: fail with a message saying what to do when $py cannot run.
py_require() {
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 7))' 2>/dev/null && return 0
    echo "$1: error: no usable Python 3.7+ at '$py' (set PYTHON, or run tools/deps.sh for python3)" >&2
    return 1
}

# py_externally_managed: true for a system Python under PEP 668, false in a venv.
py_externally_managed() {
    "$py" -c 'import os, sys, sysconfig
marked = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if marked and sys.prefix == sys.base_prefix else 1)'
}

# py_pip_install WHO ARGS...: `$py -m pip install ARGS`, quietly.
py_pip_install() {
    local who="$1" extra=()
    shift
    if ! "$py" -m pip --version > /dev/null 2>&1; then
        echo "$who: error: $py has no pip (Debian: apt-get install python3-pip; or use a venv)" >&2
        return 1
    fi
    if py_externally_managed; then extra=(--break-system-packages); fi
    "$py" -m pip install --quiet "${extra[@]}" "$@"
}

# py_on_path DIR: put `python3` -> $py first on PATH (a wrapper in DIR), so
# that what the scripts start by name (tests, the demo's tool stage) runs the
# same interpreter. A wrapper, not a symlink: a venv's python found through a
# symlink elsewhere no longer sees its pyvenv.cfg, so it is not that venv.
# Nothing to do when PYTHON is unset.
py_on_path() {
    [ -n "${PYTHON:-}" ] || return 0
    local abs
    abs="$(command -v "$PYTHON")" || return 1
    case "$abs" in /*) ;; *) abs="$(pwd)/$abs" ;; esac
    mkdir -p "$1" || return 1
    printf '#!/bin/sh\nexec %q "$@"\n' "$abs" > "$1/python3" && chmod 755 "$1/python3" || return 1
    PATH="$1:$PATH"
    export PATH
}
