# bench/lib.sh — what the benchmark scripts (forward.sh, sample.sh,
# learn.sh, tokenize.sh, mpi.sh) share, sourced once the script has set NAME (forward, ...):
#   here root BUILD BIN PY W   this folder, the project, the build and tool
#                              folders (BUILD, BIN as the Makefile), Python
#                              (PYTHON, default .deps/venv/bin/python), the output
#                              folder (BENCH_OUT, default bench/out)
#   die MSG                    "NAME.sh: MSG" on stderr, exit 1
#   positive VAR...            dies unless each variable holds a positive integer
#   bench_start CLEAN          makes $W and takes its lock (every benchmark
#                              takes the same one: two at once would time each
#                              other); on exit runs the function CLEAN and
#                              removes the lock and $ERR; empties RES; sets
#                              RES=$W/NAME.results, ERR=$W/NAME.err, LOAD0
#   fail KEY [WHY]             marks KEY failed (FAILED[KEY], NFAIL) and shows
#                              the end of $ERR
#   field NAME LINE            the value of NAME=VALUE in a RESULT line
#   measure_result KEY FLD CMD runs CMD, which prints a RESULT line, and gives
#                              it to the script's `add KEY FLD LINE`; a
#                              failure (or no line) marks KEY failed
#   LEARN_METRICS_PY           Python: the RESULT line of an rl-learn metrics file
#   median                     the median of the numbers on stdin
#   loadavg                    the 1, 5 and 15 minute load averages now
#   settings_usage MSG         for scripts set by SETTING=VALUE words and
#                              arguments USAGE_ARGS: "NAME.sh: MSG", the
#                              usage line, exit 2
#   settings_help ARGS...      on -h or --help: the script's header comment
#                              (to its `set -uo`), exit 0
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
BUILD=${BUILD:-build}
BIN=${BIN:-bin}
[[ $BUILD == /* ]] || BUILD=$root/$BUILD
[[ $BIN == /* ]] || BIN=$root/$BIN
PY=${PYTHON:-$root/.deps/venv/bin/python}   # scripts/deps.sh test makes it
W=${BENCH_OUT:-$here/out}
declare -A FAILED=()
NFAIL=0

die() { echo "$NAME.sh: $*" >&2; exit 1; }

positive() {
    local v
    for v; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"; done
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

settings_usage() {
    echo "$NAME.sh: $*" >&2
    echo "usage: [SETTING=VALUE...] bench/$NAME.sh $USAGE_ARGS   (bench/$NAME.sh --help: the settings)" >&2
    exit 2
}

settings_help() {
    case ${1:-} in -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
}

bench_start() {
    BENCH_CLEAN=$1
    RES=$W/$NAME.results
    ERR=$W/$NAME.err
    mkdir -p "$W" || die "cannot create $W"
    exec 9>"$W/.lock"
    flock -n 9 || die "another benchmark is running in $W (wait, or set BENCH_OUT=another dir)"
    trap '"$BENCH_CLEAN"; rm -f "$W/.lock" "$ERR"' EXIT
    trap 'exit 130' INT TERM
    : >"$RES"
    LOAD0=$(loadavg)
}

fail() {
    NFAIL=$((NFAIL + 1)); FAILED[$1]=1
    echo "  $1: FAILED${2:+ ($2)}" >&2; tail -n 5 "$ERR" | sed 's/^/    /' >&2
}

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

measure_result() {
    local key=$1 fld=$2 out; shift 2
    [[ -n ${FAILED[$key]:-} ]] && return
    if out=$("$@" 2>"$ERR" | grep '^RESULT' | tail -n1) && [[ -n $out ]]; then
        add "$key" "$fld" "$out"
    else
        fail "$key"
    fi
}

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# The RESULT line of an rl-learn metrics file (python3 -c "$LEARN_METRICS_PY"
# FILE WARMUP STEPS [key=value]...): the "seconds" of the STEPS steps after
# the first WARMUP (times=, their median median_s=), the tokens of a step,
# the first step's loss; the key=value words are carried into the line.
LEARN_METRICS_PY='
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
W, K = int(sys.argv[2]), int(sys.argv[3])
assert len(steps) == W + K, f"{len(steps)} metrics lines, {W + K} steps asked for"
toks = {s["fwd_tokens"] for s in steps}
assert len(toks) == 1, f"steps of different sizes: {toks}"
t = [s["seconds"] for s in steps[W:]]
med, n, loss1 = statistics.median(t), toks.pop(), steps[0]["loss"]
carry = " ".join(sys.argv[4:])
warm, times = (",".join(f"{x:.4f}" for x in v) for v in ([s["seconds"] for s in steps[:W]], t))
print(f"RESULT what=rl-learn {carry} tokens={n} median_s={med:.6f} tok_s={n / med:.2f} loss1={loss1:.8g}"
      f" warmup_s={warm} times={times}")
'
