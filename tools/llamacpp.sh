#!/usr/bin/env bash
# Install the reference llama.cpp that our outputs are compared against.
#
#   tools/llamacpp.sh            build (once) and print the paths
#   tools/llamacpp.sh --env      print only `export ...` lines (for eval)
#
# What it does, idempotently (each step is skipped when its result exists):
#   1. pip-downloads the llama-cpp-python sdist (it vendors llama.cpp's source);
#   2. builds vendor/llama.cpp with CMake ONCE, as shared libraries plus the
#      command-line tools the PyPI package does not ship (llama-bench,
#      llama-quantize, llama-perplexity, llama-tokenize, llama-completion,
#      llama-batched-bench, llama-server);
#   3. pip-installs the llama-cpp-python bindings with LLAMA_BUILD=OFF (so pip
#      does not compile llama.cpp a second time on our two cores) and copies the
#      freshly built shared libraries into site-packages/llama_cpp/lib, which is
#      exactly where a normal `pip install llama-cpp-python` would put them.
#
# Nothing of llama.cpp is ever put under version control: the cache lives in
# $LLAMACPP_DIR (default: build/llamacpp/ in the repo, which .gitignore covers).
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore   # we install as root on purpose

PKG_VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"   # llama-cpp-python release
# The llama.cpp commit that release vendors (its CHANGELOG: "update llama.cpp to
# ggml-org/llama.cpp@0c1e57098"); the sdist has no .git, so we record it here.
LLAMACPP_COMMIT="0c1e57098"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${LLAMACPP_DIR:-$repo_root/build/llamacpp}"
src_parent="$cache/src"
src="$src_parent/llama_cpp_python-$PKG_VERSION"
build="$cache/build-$PKG_VERSION"
bin="$build/bin"
jobs="${LLAMACPP_JOBS:-2}"   # the machine has 2 cores shared by everyone
# llama-batched-bench and llama-server: the batching yardstick and the
# upstream: back-end test.
tools=(llama-bench llama-quantize llama-perplexity llama-tokenize llama-completion
       llama-batched-bench llama-server)

env_only=0
[[ "${1:-}" == "--env" ]] && env_only=1

say() { [[ $env_only == 1 ]] && echo "# $*" >&2 || echo "llamacpp: $*"; }
die() { echo "llamacpp: error: $*" >&2; exit 1; }

have_tools() {
    local t
    for t in "${tools[@]}"; do [[ -x "$bin/$t" ]] || return 1; done
    [[ -f "$bin/libllama.so" ]]
}

fetch_source() {
    [[ -f "$src/vendor/llama.cpp/CMakeLists.txt" ]] && return 0
    mkdir -p "$src_parent"
    local tarball="$src_parent/llama_cpp_python-$PKG_VERSION.tar.gz"
    if [[ ! -f "$tarball" ]]; then
        say "downloading llama-cpp-python==$PKG_VERSION sdist (~75 MB)"
        python3 -m pip download --quiet --no-deps --no-binary :all: \
            -d "$src_parent" "llama-cpp-python==$PKG_VERSION" \
            || die "pip download llama-cpp-python==$PKG_VERSION failed"
    fi
    say "unpacking $tarball"
    tar -xzf "$tarball" -C "$src_parent" || die "cannot unpack $tarball"
    [[ -f "$src/vendor/llama.cpp/CMakeLists.txt" ]] \
        || die "sdist has no vendor/llama.cpp (layout changed?)"
}

# -march=native, except where the CPU lists AMX: in the VMs we run on, the
# first AMX tile instruction (ggml's AMX repack for Q4_K/Q8_0 weights) takes a
# general-protection fault (the hypervisor does not grant the tile state), so
# every llama.cpp tool crashes. There we name the CPU's other features one by
# one, and llama.cpp keeps its AVX-512/VNNI kernels and its other repacks.
arch_cmake_flags() {
    local f
    f="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
    if [[ " $f " != *" amx_tile "* ]]; then echo "-DGGML_NATIVE=ON"; return; fi
    echo "-DGGML_NATIVE=OFF"
    local pair
    for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
                avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
        [[ " $f " == *" ${pair%%:*} "* ]] && echo "-DGGML_${pair#*:}=ON"
    done
    echo "-DGGML_AMX_TILE=OFF"; echo "-DGGML_AMX_INT8=OFF"; echo "-DGGML_AMX_BF16=OFF"
}
mapfile -t arch_flags < <(arch_cmake_flags)
# The build directory names the choice, so a cache built the other way is not reused.
[[ " ${arch_flags[*]} " == *"GGML_NATIVE=OFF"* ]] && build="$build-noamx" && bin="$build/bin"

build_llamacpp() {
    command -v cmake >/dev/null || die "cmake not found (apt-get install cmake)"
    command -v g++ >/dev/null || die "g++ not found (apt-get install g++)"
    if [[ ! -f "$build/CMakeCache.txt" ]]; then
        say "configuring llama.cpp $LLAMACPP_COMMIT in $build"
        # $ORIGIN rpath: libs and tools all land in build/bin, so they find
        # each other there and after being copied into site-packages.
        cmake -S "$src/vendor/llama.cpp" -B "$build" \
            -DCMAKE_BUILD_TYPE=Release \
            -DBUILD_SHARED_LIBS=ON \
            "${arch_flags[@]}" \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
            -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON \
            -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
            '-DCMAKE_INSTALL_RPATH=$ORIGIN' \
            > "$cache/configure.log" 2>&1 \
            || { tail -30 "$cache/configure.log" >&2; die "cmake configure failed (log: $cache/configure.log)"; }
    fi
    say "building llama + ${tools[*]} with -j$jobs (first time: ~15-30 min on 2 cores; log: $cache/build.log)"
    cmake --build "$build" --config Release -j "$jobs" \
        --target llama ggml "${tools[@]}" > "$cache/build.log" 2>&1 \
        || { tail -40 "$cache/build.log" >&2; die "build failed (log: $cache/build.log)"; }
    have_tools || die "build finished but tools are missing in $bin"
}

python_site_lib() {
    python3 - <<'EOF'
import importlib.util, os
spec = importlib.util.find_spec("llama_cpp")
print(os.path.join(os.path.dirname(spec.origin), "lib") if spec else "")
EOF
}

install_bindings() {
    local installed
    installed="$( (python3 -m pip show llama-cpp-python 2>/dev/null || true) | sed -n 's/^Version: //p')"
    if [[ "$installed" != "$PKG_VERSION" ]]; then
        say "pip-installing llama-cpp-python==$PKG_VERSION bindings (no second compile)"
        CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" \
            python3 -m pip install --quiet --no-cache-dir --force-reinstall \
            "$src_parent/llama_cpp_python-$PKG_VERSION.tar.gz" \
            || die "pip install of the bindings failed"
    fi
    local lib
    lib="$(python_site_lib)"
    [[ -n "$lib" ]] || die "llama_cpp python package not importable after install"
    mkdir -p "$lib"
    local so
    for so in "$bin"/lib*.so*; do
        if ! cmp -s "$so" "$lib/$(basename "$so")"; then
            cp -fP "$so" "$lib/" || die "cannot copy $so into $lib"
        fi
    done
    python3 -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.__version__ == '$PKG_VERSION' else 1)" \
        || die "import llama_cpp failed or version mismatch"
}

fetch_source
if have_tools; then say "tools already built in $bin"; else build_llamacpp; fi
install_bindings

if [[ $env_only == 1 ]]; then
    echo "export LLAMACPP_BIN='$bin'"
    echo "export LLAMACPP_COMMIT='$LLAMACPP_COMMIT'"
    exit 0
fi
say "llama.cpp commit $LLAMACPP_COMMIT (via llama-cpp-python $PKG_VERSION)"
for t in "${tools[@]}"; do echo "  $t: $bin/$t"; done
echo "  python bindings: $(python_site_lib)"
echo "  export LLAMACPP_BIN='$bin'"
