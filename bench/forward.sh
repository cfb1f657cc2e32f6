#!/usr/bin/env bash
# bench/forward.sh [15m|110m|all] -- forward throughput of the model (CPU
# backend) next to eager PyTorch on the same machine and next to sgemm.
#
# For each configuration (llama, vocab 32000, tied embeddings, random weights
# written by bench/forward.c with model_random + model_save):
#   15m:  hidden 288, intermediate 768, 6 layers, 6 heads   (15.2M parameters)
#   110m: hidden 768, intermediate 2048, 12 layers, 12 heads (109.5M parameters)
# it times
#   - scoring: log-probs of 64 (15m) or 16 (110m) records of 32 prompt + 96
#     completion tokens (random ids), as `rl-ratio --model` reading a record
#     file (the whole process: start, model load, records in and out) and as
#     one model_score call (bench/forward.c), next to PyTorch float32
#     (batched forward, bench/forward_ref.py);
#   - decoding: model_step with 1 and 64 sequences, one token each per step
#     after a 32-token prefill, at f32, bf16 and int8 (group 32), next to
#     PyTorch float32 step-by-step with a KV cache;
#   - cblas_sgemm at the model's two main shapes (1024 tokens through the MLP
#     and through the output layer), the best of which is the "sgemm" figure.
# Every figure is the median over rounds: each round runs every measurement
# of a configuration once, ours next to PyTorch's. tokens/s counts the tokens
# processed (scoring: prompt + completion; decoding: sequences x steps).
# GFLOP/s = matmul FLOPs / median time, with FLOPs = 2 x (layer parameters x
# tokens + vocab x hidden x tokens whose logits are computed): about
# 2 x params x tokens/s; attention scores and element-wise work not counted.
# PyTorch runs with torch.set_num_threads(2), OMP_WAIT_POLICY=PASSIVE and
# torch.no_grad(); ours with the environment as given (its CPU backend runs
# its own thread pool, RLPIPE_THREADS, with OpenBLAS single-threaded inside).
#
# Environment: RUNS=N (rounds for 15m, default 5), RUNS110=N (rounds for
# 110m, default 3), KEEP=1 (keep the model files and reuse them next time),
# BENCH_OUT=DIR (default bench/out), BUILD / BIN (build and tool folders, as
# the Makefile), PYTHON (default /usr/bin/python3).
# Results: the table on stdout and in BENCH_OUT/forward.txt, RESULT lines in
# BENCH_OUT/forward.results (one per measurement and round). Takes ~3
# minutes on 2 cores.
set -uo pipefail

NAME=forward
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WHICH=${1:-all}
RUNS=${RUNS:-5}
RUNS110=${RUNS110:-3}
KEEP=${KEEP:-0}
FWD=$BUILD/bench/forward
RATIO=$BIN/rl-ratio
REF=$here/forward_ref.py

case $WHICH in 15m) CFGS=(15m) ;; 110m) CFGS=(110m) ;; all) CFGS=(15m 110m) ;;
    *) die "usage: bench/forward.sh [15m|110m|all]" ;; esac
positive RUNS RUNS110
[[ -x $FWD ]] || die "$FWD not found (run: make aux)"
[[ -x $RATIO ]] || die "$RATIO not found (run: make)"
"$PY" -c 'import torch, safetensors' 2>/dev/null || die "$PY cannot import torch and safetensors (PYTHONPATH=$PYTHONPATH)"

cleanup() { if [[ $KEEP != 1 ]]; then rm -rf "$W"/model-15m "$W"/model-110m "$W"/records-*.rlr; fi; }
bench_start cleanup

declare -A MED=() TOKS=() FLOP=() TIMES=()

# add KEY LINE: one round's RESULT line (its median_s) for KEY.
add() {
    local key=$1 line=$2
    echo "$key $line" >>"$RES"
    TOKS[$key]=$(sed -n 's/.* tokens=\([^ ]*\).*/\1/p' <<<"$line")
    FLOP[$key]=$(sed -n 's/.* flop=\([^ ]*\).*/\1/p' <<<"$line")
    TIMES[$key]+="$(sed -n 's/.* median_s=\([^ ]*\).*/\1/p' <<<"$line") "
}

# measure KEY CMD...: runs CMD, which prints a RESULT line; skipped once KEY failed.
measure() {
    local key=$1; shift
    [[ -n ${FAILED[$key]:-} ]] && return
    local out
    if out=$("$@" 2>>"$ERR") && [[ $out == *RESULT* ]]; then
        add "$key" "$(grep '^RESULT' <<<"$out" | tail -n1)"
    else
        fail "$key"
    fi
}

now() { date +%s.%N; }
# time_ratio KEY MODEL RECORDS TOKENS FLOP: one run of rl-ratio --model as a
# whole process (start, model load, records in and out).
time_ratio() {
    local key=$1 model=$2 recs=$3 toks=$4 flop=$5 t0 t1
    [[ -n ${FAILED[$key]:-} ]] && return
    t0=$(now)
    if ! "$RATIO" -q --model "$model" <"$recs" >/dev/null 2>>"$ERR"; then fail "$key"; return; fi
    t1=$(now)
    add "$key" "RESULT what=rl-ratio tokens=$toks flop=$flop median_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f", b-a}')"
}


declare -A C_HID=([15m]=288 [110m]=768) C_FF=([15m]=768 [110m]=2048)
declare -A C_REC=([15m]=64 [110m]=16) C_D1=([15m]=64 [110m]=16) C_D64=([15m]=16 [110m]=8)
P=32 T=96
ROWS=() KEYS=()
TORCH=(env OMP_WAIT_POLICY=PASSIVE "$PY" "$REF")

# Rounds: every measurement of a configuration runs once per round, ours next
# to PyTorch's, so that a change of load on the shared cores during the run
# falls on both sides of a ratio alike.
for cfg in "${CFGS[@]}"; do
    reps=$RUNS; [[ $cfg == 110m ]] && reps=$RUNS110
    m=$W/model-$cfg recs=$W/records-$cfg.rlr nrec=${C_REC[$cfg]}
    if [[ $KEEP == 1 && -s $m/model.safetensors && -s $recs ]]; then
        echo "reusing $m" >&2
    else
        "$FWD" write --model "$m" --config "$cfg" >&2 || die "forward write $cfg failed"
        "$PY" "$REF" records "$recs" --records "$nrec" --prompt $P --completion $T || die "records for $cfg failed"
    fi
    KEYS+=("$cfg sgemm mlp" "$cfg sgemm head" "$cfg score model_score" "$cfg score torch" "$cfg score rl-ratio")
    ROWS+=("$cfg|score: rl-ratio --model (process)|$cfg score rl-ratio|$cfg score torch")
    ROWS+=("$cfg|score: model_score f32|$cfg score model_score|$cfg score torch")
    for S in 1 64; do
        KEYS+=("$cfg decode torch $S")
        for dt in f32 bf16 int8; do
            KEYS+=("$cfg decode $dt $S")
            ROWS+=("$cfg|decode $dt, $S slot$( ((S > 1)) && echo s)|$cfg decode $dt $S|$cfg decode torch $S")
        done
    done
    for ((r = 1; r <= reps; r++)); do
        echo "$cfg: round $r of $reps" >&2
        measure "$cfg sgemm mlp" "$FWD" sgemm --m 1024 --n "${C_FF[$cfg]}" --k "${C_HID[$cfg]}" --reps 3
        measure "$cfg sgemm head" "$FWD" sgemm --m 1024 --n 32000 --k "${C_HID[$cfg]}" --reps 3
        measure "$cfg score model_score" "$FWD" score --model "$m" --records "$nrec" --prompt $P --completion $T --reps 1
        measure "$cfg score torch" "${TORCH[@]}" score "$m" --records "$nrec" --prompt $P --completion $T --reps 1
        if [[ -n ${TOKS[$cfg score model_score]:-} ]]; then
            time_ratio "$cfg score rl-ratio" "$m" "$recs" "${TOKS[$cfg score model_score]}" "${FLOP[$cfg score model_score]}"
        fi
        for S in 1 64; do
            steps=${C_D1[$cfg]}; ((S == 64)) && steps=${C_D64[$cfg]}
            measure "$cfg decode torch $S" "${TORCH[@]}" decode "$m" --slots $S --prompt $P --steps "$steps" --reps 1
            for dt in f32 bf16 int8; do
                measure "$cfg decode $dt $S" "$FWD" decode --model "$m" --dtype $dt --slots $S \
                    --prompt $P --steps "$steps" --reps 1
            done
        done
    done
done
for key in "${KEYS[@]}"; do
    [[ -n ${FAILED[$key]:-} || -z ${TIMES[$key]:-} ]] && continue
    MED[$key]=$(median <<<"${TIMES[$key]}")
    printf '  %-24s %s s\n' "$key" "${TIMES[$key]}" >&2
done

# ---- table -----------------------------------------------------------------
gf() { awk -v f="${FLOP[$1]:-0}" -v t="${MED[$1]:-0}" 'BEGIN{ if (t > 0) printf "%.1f", f/t/1e9; else print 0 }'; }
tps() { awk -v n="${TOKS[$1]:-0}" -v t="${MED[$1]:-0}" 'BEGIN{ if (t > 0) printf "%.0f", n/t; else print 0 }'; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    echo "rlpipe forward benchmark: $("$RATIO" --version 2>&1 | head -n1); torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores (shared machine); $(uname -sr); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg) (other work on the cores distorts every figure)"
    echo "environment: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(not set)} RLPIPE_THREADS=${RLPIPE_THREADS:-(not set)}" \
         "OMP_NUM_THREADS=${OMP_NUM_THREADS:-(not set)} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-(not set)}"
    echo "PyTorch: float32 eager, torch.no_grad, set_num_threads(2), OMP_WAIT_POLICY=PASSIVE"
    echo "medians of $RUNS (15m) / $RUNS110 (110m) rounds, each measurement once per round; scoring: ${C_REC[15m]} (15m) / ${C_REC[110m]} (110m) records of $P + $T tokens;"
    echo "decoding after a $P-token prefill: 1 slot ${C_D1[15m]}/${C_D1[110m]} steps, 64 slots ${C_D64[15m]}/${C_D64[110m]} steps per round (15m/110m)"
    for cfg in "${CFGS[@]}"; do
        a=$(gf "$cfg sgemm mlp") b=$(gf "$cfg sgemm head")
        echo "sgemm $cfg: 1024x${C_FF[$cfg]}x${C_HID[$cfg]} (MLP) $a GFLOP/s, 1024x32000x${C_HID[$cfg]} (output layer) $b GFLOP/s"
    done
    echo "ours/PyTorch > 1: ours faster; of sgemm = our GFLOP/s / the best sgemm GFLOP/s of that config"
    echo
    printf '%-5s %-34s %11s %11s %8s %8s %8s\n' config operation "ours tok/s" "torch tok/s" ours/pt GFLOP/s "of sgemm"
    printf '%-5s %-34s %11s %11s %8s %8s %8s\n' ----- ---------------------------------- ----------- ----------- -------- -------- --------
    for row in "${ROWS[@]}"; do
        IFS='|' read -r cfg name key ref <<<"$row"
        if [[ -z ${MED[$key]:-} ]]; then printf '%-5s %-34s %11s\n' "$cfg" "$name" FAILED; continue; fi
        peak=$(awk -v a="$(gf "$cfg sgemm mlp")" -v b="$(gf "$cfg sgemm head")" 'BEGIN{print (a > b) ? a : b}')
        ours=$(tps "$key") pt=$(tps "$ref") g=$(gf "$key")
        awk -v c="$cfg" -v n="$name" -v o="$ours" -v p="$pt" -v g="$g" -v pk="$peak" 'BEGIN{
            printf "%-5s %-34s %11d %11s %8s %8.1f %8s\n", c, n, o, (p > 0 ? p : "-"),
                (p > 0 ? sprintf("%.2f", o / p) : "-"), g, (pk > 0 ? sprintf("%.2f", g / pk) : "-") }'
    done
    echo
    echo "PyTorch alone (float32):"
    for cfg in "${CFGS[@]}"; do
        for k in "$cfg score torch" "$cfg decode torch 1" "$cfg decode torch 64"; do
            [[ -n ${MED[$k]:-} ]] && printf '  %-22s %10s tok/s %8s GFLOP/s\n' "$k" "$(tps "$k")" "$(gf "$k")"
        done
    done
} | tee "$W/forward.txt"
((NFAIL == 0)) || { echo "forward.sh: $NFAIL measurements failed" >&2; exit 1; }
