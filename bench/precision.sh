#!/usr/bin/env bash
# bench/precision.sh [110m|15m] -- the sampler's precisions (rl-sample
# --dtype) against f32 on the same machine: decoding tokens/s at 1, 64 and
# 256 slots, and a batched prefill, for f32, bf16, int8 (W8A8), fp8 (W8A8
# e4m3) and the weight-only bf16w, f16 and int8w.
#
# The model is the llama configuration of bench/forward.c (random weights,
# vocabulary 32000; 110m: hidden 768, 12 layers, 109.5M parameters). Each
# figure is bench/forward decode (model_step: one token for each slot per
# step after a 32-token prefill; logits, no sampling), medians over rounds in
# which every measurement runs once, so load on the shared cores falls on
# all alike. The references, measured in the same run:
#   - f32 at the same slots: "x f32" is tokens/s over f32's;
#   - at 1 slot, the bandwidth bound: read bandwidth (bench/membw, 2
#     threads) over the bytes of weights one step reads at that precision;
#     "of bound" is tokens/s over it;
#   - prefill (32 prompts of 128 tokens in one step): GFLOP/s of the matrix
#     products (2 x layer parameters + the output layer for the last token)
#     over OpenBLAS sgemm's at the MLP's shape (1024 tokens).
# Which kernels ran is said: RLPIPE_CPU=avx2 measures without AVX-512.
#
# Environment: RUNS=N (rounds, default 3), KEEP=1 (keep the model), PRECS
# (the precisions, f32 among them; default all), BENCH_OUT,
# BUILD, BIN (as the Makefile). Results: the table on stdout and in
# BENCH_OUT/precision.txt, RESULT lines in BENCH_OUT/precision.results.
# Takes about 6 minutes (110m) on 2 cores.
set -uo pipefail

NAME=precision
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CFG=${1:-110m}
RUNS=${RUNS:-3}
KEEP=${KEEP:-0}
FWD=$BUILD/bench/forward
MEMBW=$BUILD/bench/membw
read -r -a PRECS <<<"${PRECS:-f32 bf16 int8 fp8 bf16w f16 int8w}"
SLOTS=(1 64 256)
case $CFG in 15m | 110m) ;; *) die "usage: bench/precision.sh [110m|15m]" ;; esac
[[ " ${PRECS[*]} " == *" f32 "* ]] || die "PRECS must hold f32, the reference: '${PRECS[*]}'"
positive RUNS
[[ -x $FWD && -x $MEMBW ]] || die "$FWD or $MEMBW not found (run: make aux)"

cleanup() { if [[ $KEEP != 1 ]]; then rm -rf "$W/model-prec-$CFG"; fi; }
bench_start cleanup

declare -A TIMES=() TOKS=() FLOP=() WB=()
add() {   # KEY FIELD LINE: one round's RESULT line
    TIMES[$1]+="$(field median_s "$3") "
    TOKS[$1]=$(field tokens "$3")
    FLOP[$1]=$(field flop "$3")
    WB[$1]=$(field wbytes "$3")
    echo "$3 key=${1// /_}" >>"$RES"
}

m=$W/model-prec-$CFG
if [[ $KEEP == 1 && -s $m/model.safetensors ]]; then echo "reusing $m" >&2
else "$FWD" write --model "$m" --config "$CFG" >&2 || die "forward write $CFG failed"; fi
steps1=16 stepsn=8
[[ $CFG == 15m ]] && steps1=64 stepsn=16
for ((r = 1; r <= RUNS; r++)); do
    echo "$CFG: round $r of $RUNS" >&2
    measure_result "membw" gb_s "$MEMBW" --mib 1024 --reps 5
    measure_result "sgemm" gflop_s "$FWD" sgemm --m 1024 --n $([[ $CFG == 15m ]] && echo 768 || echo 2048) \
        --k $([[ $CFG == 15m ]] && echo 288 || echo 768) --reps 3
    for p in "${PRECS[@]}"; do
        for S in "${SLOTS[@]}"; do
            steps=$stepsn; ((S == 1)) && steps=$steps1
            measure_result "decode $p $S" tok_s "$FWD" decode --model "$m" --dtype "$p" --slots "$S" --prompt 32 \
                --steps "$steps" --reps 1
        done
        measure_result "prefill $p" tok_s "$FWD" decode --model "$m" --dtype "$p" --slots 32 --prompt 128 \
            --steps 1 --reps 1 --prefill-only
    done
done

med() { median <<<"${TIMES[$1]:-}"; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    simd=$(grep -m1 -o -w -E 'avx512_vnni|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
    echo "rlpipe precision benchmark ($CFG): $("$BIN"/rl-sample --version 2>&1 | head -n1)"
    echo "machine: ${cpu:-unknown CPU} (${simd:-no AVX2}), $(nproc) cores (shared machine); $(date -u +%Y-%m-%d)"
    echo "int8 products: AVX-512 VNNI where the CPU has avx512_vnni, else AVX2 (RLPIPE_CPU=${RLPIPE_CPU:-(not set)}; avx2: no AVX-512)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg)"
    echo "medians of $RUNS rounds"
    echo
    printf '%-6s %-9s %10s %8s %10s %9s\n' dtype work "tok/s" "x f32" "MB/step" "of bound"
    printf '%-6s %-9s %10s %8s %10s %9s\n' ------ --------- ---------- -------- ---------- ---------
    bw=$(awk -v t="$(med membw)" -v b="$(field bytes "$(grep -m1 'what=membw' "$RES")")" \
        'BEGIN{ if (t > 0) print b / t; else print 0 }')
    for S in "${SLOTS[@]}"; do
        for p in "${PRECS[@]}"; do
            k="decode $p $S" f="decode f32 $S"
            awk -v p="$p" -v S="$S" -v n="${TOKS[$k]:-0}" -v t="$(med "$k")" -v nf="${TOKS[$f]:-0}" -v tf="$(med "$f")" \
                -v wb="${WB[$k]:-0}" -v bw="$bw" 'BEGIN{
                if (t <= 0) { printf "%-6s %-9s %10s\n", p, S " slots", "FAILED"; exit }
                tps = n / t; f = (tf > 0) ? tps / (nf / tf) : 0
                of = (S == 1 && bw > 0 && wb > 0) ? sprintf("%.2f", tps / (bw / wb)) : "-"
                printf "%-6s %-9s %10.1f %8.2f %10.1f %9s\n", p, S (S == 1 ? " slot" : " slots"), tps, f, wb / 1e6, of }'
        done
    done
    echo
    echo "bandwidth bound at 1 slot: read bandwidth $(awk -v b="$bw" 'BEGIN{printf "%.1f", b / 1e9}') GB/s / MB per step"
    printf '%-6s %-26s %10s %8s %9s\n' dtype "prefill, 32 x 128 tokens" "tok/s" GFLOP/s "of sgemm"
    sg=$(awk -v t="$(med sgemm)" -v f="${FLOP[sgemm]:-0}" 'BEGIN{ if (t > 0) print f / t / 1e9; else print 0 }')
    for p in "${PRECS[@]}"; do
        k="prefill $p"
        awk -v p="$p" -v n="${TOKS[$k]:-0}" -v t="$(med "$k")" -v f="${FLOP[$k]:-0}" -v sg="$sg" 'BEGIN{
            if (t <= 0) { printf "%-6s %-26s %10s\n", p, "", "FAILED"; exit }
            printf "%-6s %-26s %10.1f %8.1f %9.2f\n", p, "", n / t, f / t / 1e9, (sg > 0 ? f / t / 1e9 / sg : 0) }'
    done
    echo "sgemm 1024 x MLP: $(awk -v s="$sg" 'BEGIN{printf "%.1f", s}') GFLOP/s (OpenBLAS, one thread per core as ours)"
} | tee "$W/precision.txt"
((NFAIL == 0)) || { echo "precision.sh: $NFAIL measurements failed" >&2; exit 1; }
