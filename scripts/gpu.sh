#!/bin/bash
# scripts/gpu.sh — the GPU tests and benchmark on a machine that has a GPU but
# no package access: the Debian libraries travel with the tree as .deb files,
# are unpacked beside it, and the build points into them.
#
#   scripts/gpu.sh fetch          here (Debian, with apt): download the .deb files
#                                 into .deps/gpu/ (git-ignored), and the Python
#                                 wheels the tests need there into .deps/gpu/whl/
#   scripts/gpu.sh run [bench]    on the GPU machine, with .deps/gpu carried:
#                                 unpack, build with CUDA (BUILD=build-gpu,
#                                 BIN=bin-gpu), run the GPU unit and CLI tests,
#                                 and with "bench" bench/cuda.sh; logs and the
#                                 results go to $OUT (or /tmp/rlpipe-gpu): at
#                                 most 7 files, as the device tool brings back 8
#
# One device call: run(command="bash scripts/gpu.sh run bench", carry=[".deps/gpu"]).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DEPS=$ROOT/.deps/gpu
# -dev packages for headers and link names, their run-time libraries, and
# what those need (OpenBLAS: gfortran's and quadmath's run-time libraries).
PKGS="libzstd-dev libzstd1 libmsgpack-dev libmsgpackc2 libcjson-dev libcjson1 libopenblas-dev
      libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0 libxxhash-dev
      libxxhash0 libssl-dev libssl3 libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 zstd"
# Python modules the tests read records with, for the GPU machine's Python 3.12.
WHEELS="zstandard==0.23.0"

fetch() {
    mkdir -p "$DEPS/whl"
    (cd "$DEPS" && apt-get download $PKGS) || { echo "gpu.sh: apt-get download failed" >&2; exit 1; }
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DEPS/whl" $WHEELS ||
        { echo "gpu.sh: pip download failed" >&2; exit 1; }
    du -sh "$DEPS"
}

run() {
    local out=${OUT:-/tmp/rlpipe-gpu} R=$DEPS/root rc=0
    mkdir -p "$out" "$R"
    [ -n "$(ls "$DEPS"/*.deb 2>/dev/null)" ] || { echo "gpu.sh: no .deb files in $DEPS: run 'scripts/gpu.sh fetch' here and carry .deps/gpu" >&2; exit 1; }
    for f in "$DEPS"/*.deb; do dpkg -x "$f" "$R" || exit 1; done
    local lib=$R/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$R/usr/bin:$PATH
    if ls "$DEPS"/whl/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rlpipe-site "$DEPS"/whl/*.whl &&
            export PYTHONPATH=/tmp/rlpipe-site${PYTHONPATH:+:$PYTHONPATH}
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/machine.txt"
    nvcc --version | tail -1 | tee -a "$out/machine.txt"

    # The build: pkg-config is bypassed (deps.mk written here, so make does
    # not run scripts/deps.sh, which would try apt-get); flags point into $R.
    local B=build-gpu
    mkdir -p $B
    echo "PKGS :=" >$B/deps.mk
    local cflags="-isystem $R/usr/include -isystem $R/usr/include/cjson -isystem $R/usr/include/x86_64-linux-gnu/openblas-pthread"
    local libs="-L$lib -L$lib/openblas-pthread -lzstd -lmsgpackc -lcjson -lopenblas -lxxhash -lcrypto -lpcre2-8 -lutf8proc"
    local start=$SECONDS
    if ! make -j16 BUILD=$B BIN=bin-gpu PKG_CFLAGS="$cflags" PKG_LIBS="$libs" all aux $B/tests/test_cuda $B/tests/test_backward $B/tests/test_model $B/tests/test_sampling >"$out/build.log" 2>&1; then
        tail -30 "$out/build.log"
        echo "gpu.sh: build failed (log: $out/build.log)"
        exit 1
    fi
    echo "build: $((SECONDS - start)) s"

    # GPU tests: the unit tests of every op and of the whole model against
    # the CPU backend, then the tools on the GPU; the CPU unit tests that
    # share the code the GPU build changed, as a check of the build itself.
    export PY=$(command -v python3)   # the one with PyTorch there
    BUILD=$B BIN=bin-gpu bash tests/run.sh 'unit: test_(cuda|backward|model|sampling)$|cli: cuda.sh' 2>&1 | tee "$out/tests.log"
    rc=${PIPESTATUS[0]}
    if [ "${1:-}" = bench ]; then
        # models and records (gigabytes) stay out of $OUT: only the results travel back
        local bo=/tmp/rlpipe-bench
        mkdir -p $bo
        BUILD=$B BIN=bin-gpu BENCH_OUT=$bo bash bench/cuda.sh 2>&1 | tee "$out/bench.log" | tail -40
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
        cp $bo/gpu.txt $bo/gpu.results $bo/gpu.log "$out/" 2>/dev/null
    fi
    exit "$rc"
}

case ${1:-} in
fetch) fetch ;;
run) shift; run "$@" ;;
*) echo "usage: scripts/gpu.sh fetch | run [bench]" >&2; exit 2 ;;
esac
