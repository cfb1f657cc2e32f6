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
    $py -m pip --version >/dev/null 2>&1 || need python3-pip
fi

# Python references Debian does not package, from PyPI into .deps/py
# (tests/run.sh puts it on PYTHONPATH): the safetensors and tokenizers
# libraries of Hugging Face.
pypi() {
    root=$(cd "$(dirname "$0")/.." && pwd)
    PYTHONPATH=$root/.deps/py /usr/bin/python3 -c 'import safetensors.numpy, tokenizers' 2>/dev/null && return 0
    echo "rlpipe: installing Python references from PyPI into .deps/py: safetensors tokenizers" >&2
    /usr/bin/python3 -m pip install -q --disable-pip-version-check --no-deps \
        --target "$root/.deps/py" safetensors tokenizers >&2
}

if [ -z "$missing" ]; then
    [ "$what" = test ] && pypi
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
[ "$what" = test ] && pypi
exit 0
