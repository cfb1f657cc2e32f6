#!/usr/bin/env bash
# bench/records.sh [MB] -- record-stream throughput of rl-cat next to zstd.
#
# Generates MB (default 1000, in 10^6 bytes) of raw msgpack rollout records
# (bench/gen_rollouts.py), compresses them with rl-cat (write side, against
# `zstd -3 -T1`), then times the read side (against `zstd -dc`). Every
# operation runs RUNS times (default 5); the table shows medians.
#
# Environment: RUNS=N, KEEP=1 (keep the big files and reuse the raw file on
# the next run of the same size), BENCH_OUT=DIR (work dir, default bench/out),
# RLCAT=path (default bin/rl-cat), PYTHON (default /usr/bin/python3).
# Target: rl-cat reads (--check, -u) at >= 50% of the speed of `zstd -dc`.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
MB=${1:-1000}
RUNS=${RUNS:-5}
KEEP=${KEEP:-0}
RLCAT=${RLCAT:-$root/bin/rl-cat}
PY=${PYTHON:-/usr/bin/python3}
W=${BENCH_OUT:-$here/out}

die() { echo "records.sh: $*" >&2; exit 1; }
[[ $MB =~ ^[0-9]+([.][0-9]+)?$ ]] || die "usage: bench/records.sh [MB]   (MB: a number, default 1000)"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
command -v zstd >/dev/null || die "zstd not found"
[[ -x $RLCAT ]] || die "$RLCAT not found (run make first)"
rlver=$("$RLCAT" --version 2>&1 | head -n1) || die "$RLCAT --version failed: $rlver"

mkdir -p "$W" || die "cannot create $W"
raw=$W/raw.msgpack rlr=$W/data.rlr ref=$W/ref.zst
# one run at a time per work dir: concurrent runs clobber files and timings
exec 9>"$W/.lock"
flock -n 9 || die "another records.sh is running in $W (wait, or set BENCH_OUT=another dir)"
cleanup() {
    if [[ $KEEP != 1 ]]; then rm -f "$raw" "$raw.meta" "$rlr" "$ref" "$W"/*.err "$W/.lock"; rmdir "$W" 2>/dev/null; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- data ---------------------------------------------------------------
meta="mb=$MB gen=$(cksum <"$here/gen_rollouts.py" | cut -d' ' -f1)"
if [[ $KEEP == 1 && -s $raw && -s $raw.meta && $(sed -n 1p "$raw.meta") == "$meta" ]]; then
    gen=$(sed -n 2p "$raw.meta")
    echo "reusing $raw ($gen)"
else
    echo "generating ${MB} MB of rollout records in $W ..."
    gen=$("$PY" "$here/gen_rollouts.py" "$raw" "$MB") || die "gen_rollouts.py failed"
    printf '%s\n%s\n' "$meta" "$gen" >"$raw.meta"
    echo "  $gen"
fi
N=$(sed -n 's/.*records=\([0-9]*\).*/\1/p' <<<"$gen")
RAWB=$(stat -c %s "$raw")

# ---- timing helpers -------------------------------------------------------
now() { date +%s.%N; }
declare -A MED=() FAILED=()
ORDER=()
NFAIL=0
# timeit NAME CMD...: runs CMD RUNS times (stdout/stderr as the caller's
# redirections in CMD's function), records the median wall time.
timeit() {
    local name=$1; shift
    local i t0 t1 rc times=()
    : >"$W/$name.err"
    for ((i = 0; i < RUNS; i++)); do
        t0=$(now)
        "$@" 2>>"$W/$name.err"; rc=$?
        t1=$(now)
        if ((rc != 0)); then
            NFAIL=$((NFAIL + 1))
            FAILED[$name]="exit $rc: $(tail -n 3 "$W/$name.err" | tr '\n' ' ')"
            echo "  $name: FAILED (exit $rc)" >&2; tail -n 5 "$W/$name.err" | sed 's/^/    /' >&2
            break
        fi
        times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f", b-a}')")
    done
    ORDER+=("$name")
    if ((${#times[@]})); then
        MED[$name]=$(printf '%s\n' "${times[@]}" | sort -g |
            awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')
        printf '  %-22s %s\n' "$name" "${times[*]}" >&2
    fi
}

w_zstd()   { rm -f "$ref"; zstd -q -3 -T1 -c "$raw" >"$ref"; }
w_rlcat()  { rm -f "$rlr"; "$RLCAT" "$raw" -o "$rlr"; }
r_zstd()   { zstd -q -dc "$rlr" >/dev/null; }
r_check()  { "$RLCAT" --check "$rlr"; }
r_u()      { "$RLCAT" -u "$rlr" >/dev/null; }
r_json()   { "$RLCAT" --json "$rlr" >/dev/null; }
r_stats()  { "$RLCAT" --stats "$rlr" >/dev/null; }

cat "$raw" >/dev/null   # page cache warm
echo "write side ($RUNS runs each; seconds):" >&2
timeit "zstd -3 -T1 (ref)" w_zstd
timeit "rl-cat -o (write)" w_rlcat
[[ -s $rlr ]] || die "rl-cat wrote no $rlr; cannot run the read side"
cat "$rlr" "$ref" >/dev/null
echo "read side ($RUNS runs each; seconds):" >&2
timeit "zstd -dc (ref)" r_zstd
timeit "rl-cat --check" r_check
timeit "rl-cat -u" r_u
timeit "rl-cat --json" r_json
timeit "rl-cat --stats" r_stats

# ---- correctness cross-checks (untimed) -----------------------------------
notes=()
if ! zstd -q -t "$rlr" 2>/dev/null; then notes+=("zstd -t rejects rl-cat's data.rlr")
elif zstd -q -dc "$rlr" | cmp -s - "$raw"; then notes+=("zstd -dc data.rlr == raw.msgpack (byte-identical)")
else notes+=("zstd -dc data.rlr differs from raw.msgpack: $(zstd -q -dc "$rlr" | cmp - "$raw" 2>&1 | head -n1)")
fi
if [[ -z ${FAILED[rl-cat -u]:-} ]]; then
    if "$RLCAT" -q -u "$rlr" | cmp -s - "$raw"; then notes+=("rl-cat -u data.rlr == raw.msgpack (byte-identical)")
    else notes+=("rl-cat -u data.rlr differs from raw.msgpack: $("$RLCAT" -q -u "$rlr" 2>&1 | cmp - "$raw" 2>&1 | head -n1)")
    fi
fi
chk=$(tail -n 1 "$W/rl-cat --check.err" 2>/dev/null)
[[ -n $chk ]] && notes+=("--check says: $chk")
frames=$(zstd -lv "$rlr" 2>/dev/null | sed -n 's/^# Zstandard Frames: *//p')
[[ -n $frames ]] && notes+=("data.rlr holds $frames zstd frames")

# ---- table -----------------------------------------------------------------
RLRB=$(stat -c %s "$rlr" 2>/dev/null || echo 0)
REFB=$(stat -c %s "$ref" 2>/dev/null || echo 0)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
echo
echo "rlpipe record-stream benchmark: $rlver, $(zstd --version 2>&1 | grep -o 'v[0-9.]*' | head -n1) zstd CLI"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores (shared machine); $(uname -sr)"
echo "data: $N rollout records, $(awk -v b="$RAWB" 'BEGIN{printf "%.1f", b/1e6}') MB raw msgpack" \
     "($(awk -v b="$RAWB" -v n="$N" 'BEGIN{printf "%.0f", b/n}') B/record);" \
     "rl-cat -l 3: $(awk -v b="$RLRB" 'BEGIN{printf "%.1f", b/1e6}') MB (ratio $(awk -v a="$RAWB" -v b="$RLRB" 'BEGIN{printf "%.2f", b ? a/b : 0}'))," \
     "zstd -3: $(awk -v b="$REFB" 'BEGIN{printf "%.1f", b/1e6}') MB (ratio $(awk -v a="$RAWB" -v b="$REFB" 'BEGIN{printf "%.2f", b ? a/b : 0}'))"
echo "figures: median of $RUNS runs each; MB/s and records/s of uncompressed data (MB = 10^6 B);"
echo "vs ref = speed relative to the reference in this run (write: zstd -3 -T1 -c; read: zstd -dc), >1 = faster"
echo
printf '%-22s %10s %10s %12s %8s\n' operation "median s" "MB/s" "records/s" "vs ref"
printf '%-22s %10s %10s %12s %8s\n' ---------------------- ---------- ---------- ------------ --------
for name in "${ORDER[@]}"; do
    case $name in "zstd -3"*|"rl-cat -o"*) refn="zstd -3 -T1 (ref)" ;; *) refn="zstd -dc (ref)" ;; esac
    if [[ -n ${MED[$name]:-} && -z ${FAILED[$name]:-} ]]; then
        awk -v n="$name" -v t="${MED[$name]}" -v b="$RAWB" -v r="$N" -v ref="${MED[$refn]:-}" 'BEGIN{
            printf "%-22s %10.3f %10.1f %12.0f %8s\n", n, t, b/1e6/t, r/t, (ref != "" ? sprintf("%.2f", ref/t) : "-") }'
    else
        printf '%-22s %10s %10s %12s %8s   %s\n' "$name" FAILED - - - "${FAILED[$name]:-}"
    fi
done
echo
ok=1
for name in "rl-cat --check" "rl-cat -u"; do
    if [[ -z ${MED[$name]:-} || -n ${FAILED[$name]:-} || -z ${MED[zstd -dc (ref)]:-} ]]; then ok=0; continue; fi
    awk -v a="${MED[zstd -dc (ref)]}" -v b="${MED[$name]}" 'BEGIN{exit !(a/b >= 0.5)}' || ok=0
done
echo "target: rl-cat --check and rl-cat -u read at >= 0.50 x the speed of zstd -dc: $([[ $ok == 1 ]] && echo met || echo NOT MET)"
for n in "${notes[@]}"; do echo "note: $n"; done
if [[ -z ${FAILED[rl-cat --stats]:-} && -s $rlr ]]; then
    echo; echo "rl-cat --stats data.rlr:"; "$RLCAT" -q --stats "$rlr" 2>&1 | sed 's/^/  /'
fi
[[ $KEEP == 1 ]] && echo "(KEEP=1: files kept in $W)"
((NFAIL == 0))
