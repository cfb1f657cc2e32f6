#!/bin/bash
# Runs every test program. Each prints one line per case:
#   PASS <name> | FAIL <name>: <why> | SKIP <name>: <why>
# A program that exits non-zero without printing a FAIL line counts as one
# failure. The last line is "N passed, N failed[, N skipped]".
#   tests/run.sh [REGEX]   only the programs whose label matches REGEX
# JOBS programs run at once (default: the number of CPUs, at most 4); each
# program's line and output come in the order below whatever order they end
# in, the Python references first, as they take longest.
# BUILD and BIN name the build and tool folders (as in the Makefile).
# SAN_PASSES=0 leaves out the second, sanitizer passes over $BUILD/asan (for a
# build whose every program is sanitized already: make check-san).
cd "$(dirname "$0")/.." || exit 1
export RLPIPE_ROOT=$PWD
BUILD=${BUILD:-build}
BIN=${BIN:-bin}
only=${1:-}
san_passes=${SAN_PASSES:-1}
# Python references that Debian does not package (transformers, tokenizers,
# safetensors, gguf and the packages with real tokenizer and model files) are
# installed into the virtual environment .deps/venv by scripts/deps.sh test;
# it sees Debian's torch, numpy, msgpack and zstandard.
export PY=${PY:-$PWD/.deps/venv/bin/python}
export TMPDIR=${TMPDIR:-/tmp}
jobs_max=${JOBS:-$(nproc)}
[ "$jobs_max" -gt 4 ] && [ -z "${JOBS:-}" ] && jobs_max=4
pass=0 fail=0 skip=0
log=$(mktemp -d "$TMPDIR/rlpipe-tests.XXXXXX")
trap 'rm -rf "$log"' EXIT

# Each program runs in the background into $log/N.out, its status and seconds
# into $log/N.rc; report() prints the programs that have ended, in order.
n=0 shown=0
declare -a labels
run() {  # run LABEL BIN_DIR COMMAND...
    local label=$1 bindir=$2; shift 2
    [ -n "$only" ] && ! [[ $label =~ $only ]] && return
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
        wait -n
        report
    done
    labels[n]=$label
    (
        start=$SECONDS
        RLPIPE_BIN=$bindir "$@" >"$log/$n.out" 2>&1 </dev/null
        rc=$?
        echo "$rc $((SECONDS - start))" >"$log/$n.rc.tmp" && mv "$log/$n.rc.tmp" "$log/$n.rc"
    ) &
    n=$((n + 1))
}

report() {
    local out rc secs p f s
    while [ "$shown" -lt "$n" ] && [ -e "$log/$shown.rc" ]; do
        out=$log/$shown.out
        read -r rc secs <"$log/$shown.rc"
        p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            echo "FAIL ${labels[shown]}: exited with status $rc without reporting a failure" >>"$out"
            f=1
        fi
        pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
        printf '%-44s %3d passed %3d failed %3d skipped  %3ds\n' "${labels[shown]}" "$p" "$f" "$s" "$secs"
        if [ "$f" -ne 0 ]; then
            grep -E '^(FAIL|SKIP) ' "$out" | sed 's/^/    /'
            echo "    --- last lines of output:"
            tail -n 25 "$out" | sed 's/^/    | /'
        fi
        shown=$((shown + 1))
    done
}

for t in tests/py/test_*.py; do
    [ -f "$t" ] && run "py: ${t##*/}" "$PWD/$BIN" "$PY" "$t"
done
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] && run "unit: ${t##*/}" "$PWD/$BIN" "$t"
done
for t in "$BUILD"/asan/tests/test_*; do
    [ "$san_passes" = 1 ] && [ -x "$t" ] && run "asan+ubsan unit: ${t##*/}" "$PWD/$BIN" "$t"
done
for t in tests/cli/*.sh; do
    run "cli: ${t##*/}" "$PWD/$BIN" bash "$t"
    # Tests marked "also-asan" run again with the sanitizer build of the tools
    # (RLPIPE_SANITIZED=1 says so, as make check-san does).
    if [ "$san_passes" = 1 ] && grep -q '^# also-asan' "$t"; then
        run "asan+ubsan cli: ${t##*/}" "$PWD/$BUILD/asan/bin" \
            env RLPIPE_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
            bash "$t"
    fi
done
# The libFuzzer harnesses (tests/fuzz), FUZZ_CHECK_TIME seconds each, under
# ASan and UBSan (make fuzz runs them for longer).
for t in "$BUILD"/fuzz/fuzz_*; do
    [ -x "$t" ] && run "fuzz: ${t##*/}" "$PWD/$BIN" env BUILD="$BUILD" bash tests/fuzz/run.sh "$t" "${FUZZ_CHECK_TIME:-18}"
done
wait
report

line="$pass passed, $fail failed"
[ "$skip" -gt 0 ] && line="$line, $skip skipped"
echo "$line"
[ "$fail" -eq 0 ]
