#!/bin/bash
# tests/fuzz/run.sh HARNESS SECONDS — runs one libFuzzer harness (a name,
# "fuzz_<name>" or its path) for SECONDS in one process (one core) and
# prints, as tests/run.sh reads it:
#   PASS fuzz_<name>: N execs in S s (X/s), no crash
#   FAIL fuzz_<name>: <crash summary>; reproduce: <command>
# tests/fuzz/run.sh --table SECONDS NAME... runs each in turn, then prints a
# table (harness, seconds, execs, execs/s, corpus, crashes); exit 1 on a crash.
# The corpus grows in $BUILD/fuzz/corpus/<name> from $BUILD/fuzz/seeds/<name>
# (tests/fuzz/seeds.sh); crash files go to $BUILD/fuzz/crashes/. A harness
# with a dictionary, tests/fuzz/<name>.dict, is given it (-dict).
# FUZZ_RUNS=N also ends a harness after N inputs (whichever comes first).
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}

# run_one NAME SECONDS: the result line; sets execs, secs, rate, corpus, crashed.
run_one() {
    local name=${1##*/} limit=$2
    name=${name#fuzz_}
    local bin=$BUILD/fuzz/fuzz_$name corpus=$BUILD/fuzz/corpus/$name seeds=$BUILD/fuzz/seeds/$name
    local crashes=$BUILD/fuzz/crashes env=()
    execs=0 secs=0 rate=0 corpus_n=0 crashed=0
    if [ ! -x "$bin" ]; then
        echo "FAIL fuzz_$name: $bin is not built (make fuzz-build)"
        crashed=1
        return
    fi
    mkdir -p "$corpus" "$crashes"
    [ -d "$seeds" ] || seeds=
    local dict=()   # a harness's dictionary (libFuzzer -dict), when it has one
    [ -f tests/fuzz/$name.dict ] && dict=(-dict=tests/fuzz/$name.dict)
    if [ "$name" = tokenizer ] && [ -f "$BUILD/fuzz/seeds/tokenizers.list" ]; then
        env=("FUZZ_TOKENIZERS=$(cat "$BUILD/fuzz/seeds/tokenizers.list")")
    fi
    # The harnesses write their scratch files (config.json, shard indexes)
    # where fsync costs nothing when they can.
    local scratch=${TMPDIR:-/tmp}
    [ -d /dev/shm ] && [ -w /dev/shm ] && scratch=/dev/shm
    local log
    log=$(mktemp "${TMPDIR:-/tmp}/rlpipe-fuzz-log.XXXXXX")
    local start end rc
    start=$(date +%s.%N)
    env TMPDIR="$scratch" UBSAN_OPTIONS=print_stacktrace=1 "${env[@]}" "$bin" -max_total_time="$limit" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 "${dict[@]}" -artifact_prefix="$crashes/fuzz_$name-" "$corpus" $seeds >"$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }')
    execs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -n 1)
    rate=$(awk '/^stat::average_exec_per_sec:/ { print $2 }' "$log" | tail -n 1)
    corpus_n=$(find "$corpus" -type f | wc -l)
    execs=${execs:-0} rate=${rate:-0}
    if [ "$rc" -eq 0 ]; then
        echo "PASS fuzz_$name: $execs execs in $secs s ($rate/s), no crash"
    else
        crashed=1
        local file what
        file=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        what=$(grep -m 1 -E '^fuzz_[a-z]+: |^SUMMARY: |==ERROR: ' "$log" | sed 's/^==[0-9]*==//')
        [ -n "$what" ] || what="exit status $rc: $(tail -n 1 "$log")"
        if [ -n "$file" ]; then
            echo "FAIL fuzz_$name: $what; reproduce: ${env[*]:+${env[*]} }$bin $file"
        else
            echo "FAIL fuzz_$name: $what"
        fi
        grep -E '^ +#[0-9]+ ' "$log" | head -n 12 | sed 's/^/    /'
    fi
    rm -f "$log"
}

if [ "${1:-}" = --table ]; then
    [ $# -ge 3 ] || { echo "usage: tests/fuzz/run.sh --table SECONDS NAME..." >&2; exit 2; }
    limit=$2
    shift 2
    table=$(printf '%-18s %8s %12s %10s %8s %8s' harness seconds execs execs/s corpus crashes)
    failed=0
    for h in "$@"; do
        run_one "$h" "$limit"
        table+=$(printf '\n%-18s %8s %12s %10s %8s %8s' "fuzz_${h#fuzz_}" "$secs" "$execs" "$rate" "$corpus_n" "$crashed")
        [ "$crashed" -eq 0 ] || failed=1
    done
    echo "$table"
    exit "$failed"
fi
[ $# -eq 2 ] || { echo "usage: tests/fuzz/run.sh HARNESS SECONDS | --table SECONDS NAME..." >&2; exit 2; }
run_one "$1" "$2"
[ "$crashed" -eq 0 ]
