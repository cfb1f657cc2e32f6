#!/usr/bin/env bash
# bench/learn.sh [tiny|15m|110m|all] -- training throughput of rl-learn (CPU
# backend): tokens/s of a full optimizer step (forward, backward, gradient
# clipping, AdamW) next to the same step in eager PyTorch on the same machine,
# and its GFLOP/s next to sgemm's.
#
# Models (llama, random weights):
#   tiny: models/tiny/config.json (hidden 128, 4 layers, 4 heads over 2 kv
#         heads, vocab 448, tied; 0.80M parameters), weights drawn by
#         rl-learn --config --seed 1 (its version 0);
#   15m:  bench/forward.sh's (hidden 288, intermediate 768, 6 layers, vocab
#         32000, tied; 15.2M parameters), written by bench/forward.c;
#   110m: bench/forward.sh's (hidden 768, intermediate 2048, 12 layers, vocab
#         32000, tied; 109.5M parameters), written by bench/forward.c.
# Batches: N sequences of 64 prompt + 192 completion tokens (random ids;
# rollout records in groups of 4 with differing rewards), N = 32 (tiny),
# 16 (15m), 8 (110m); one step per batch, a new batch every step. For each
# configuration and round it runs
#   - rl-learn --init MODEL --loss sft --batch N --lr 1e-5 (defaults
#     otherwise: --norm seqs, weight decay 0.01, clipping at 1) for
#     WARMUP + STEPS steps, one process; each step's time is its metrics
#     line's "seconds" (forward, backward, clipping and AdamW; the
#     checkpoint written after every step is not counted);
#   - PyTorch (bench/learn_ref.py train): the same weights (the same
#     model.safetensors), the same batches and the same step: loss =
#     -(1/N) sum of the completion tokens' log-probabilities (output layer
#     at completion positions only, F.cross_entropy), backward,
#     clip_grad_norm_(1.0), torch.optim.AdamW with the same hyperparameters,
#     zero_grad; float32, set_num_threads(2), OMP_WAIT_POLICY=PASSIVE;
#   - bench/learn.c: the three cblas_sgemm calls of a linear layer's training
#     step (forward, input gradient, weight gradient) at the step's shapes:
#     N x (P + T - 1) tokens through the MLP (C -> F) and N x T through the
#     output layer (C -> V); GFLOP/s of the median of 5 repetitions, the
#     better of the two shapes is the "sgemm" figure (OpenBLAS with its own
#     threads, one per core).
# Two more rl-learn processes a round time the same step with --recompute
# (activation checkpointing) and with LoRA (--lora-rank 16 --lora-alpha 32,
# all-linear, the base f32 and frozen): their tok/s and its ratio to the
# plain step's ("of ours": > 1 faster), in a second table.
# The first WARMUP steps of every process (ours and PyTorch's) are not
# timed: PyTorch's second and third steps of the 110m model are still 10-50%
# slower than the later ones (ours are flat from the second). Every figure
# is the median over the timed steps of all rounds (the sgemm figures:
# over rounds), each round running ours next to PyTorch's. tokens/s counts
# the tokens through the model, N x (64 + 192 - 1) per step (rl-learn's
# "fwd_tokens"). GFLOP/s = training FLOPs / median step time, with the FLOPs
# of learn_ref.py's train_flop: 6 x (layer matrix parameters x 255 tokens +
# output layer V x C x 192 completion tokens) + causal attention
# 6 x L x heads x head_dim x 255 x 256, per sequence; element-wise work,
# norms, softmax and AdamW not counted. The step-1 loss of both sides is
# printed as a check that they compute the same step (same weights, data).
#
# Environment: RUNS=N (rounds for tiny and 15m, default 3), RUNS110=N
# (rounds for 110m, default 2), STEPS=K (timed steps per process for tiny
# and 15m, default 3), STEPS110=K (for 110m, default 2), WARMUP=W (untimed
# steps before them, default 3), KEEP=1 (keep the models and reuse them next
# time), BENCH_OUT=DIR (default bench/out), BUILD / BIN (build and tool
# folders, as the Makefile), PYTHON (default /usr/bin/python3).
# Results: the table on stdout and in BENCH_OUT/learn.txt, RESULT lines in
# BENCH_OUT/learn.results (one per measurement and round). Takes ~9 minutes
# on 2 cores.
set -uo pipefail

NAME=learn
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WHICH=${1:-all}
RUNS=${RUNS:-3}
RUNS110=${RUNS110:-2}
STEPS=${STEPS:-3}
STEPS110=${STEPS110:-2}
WARMUP=${WARMUP:-3}
KEEP=${KEEP:-0}
FWD=$BUILD/bench/forward
SGEMM=$BUILD/bench/learn
LEARN=$BIN/rl-learn
REF=$here/learn_ref.py

case $WHICH in tiny | 15m | 110m) CFGS=("$WHICH") ;; all) CFGS=(tiny 15m 110m) ;;
    *) die "usage: bench/learn.sh [tiny|15m|110m|all]" ;; esac
positive RUNS RUNS110 STEPS STEPS110
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be an integer >= 0"
[[ -x $FWD && -x $SGEMM ]] || die "$FWD or $SGEMM not found (run: make aux)"
[[ -x $LEARN ]] || die "$LEARN not found (run: make)"
"$PY" -c 'import torch, safetensors, zstandard, msgpack' 2>/dev/null ||
    die "$PY cannot import torch, safetensors, zstandard and msgpack (PYTHONPATH=$PYTHONPATH)"

cleanup() {
    if [[ $KEEP != 1 ]]; then rm -rf "$W"/learn-model-* "$W"/learn-records-*.rlr; fi
    rm -rf "$W"/learn-ckpt "$W/learn-metrics.jsonl"
}
bench_start cleanup

P=64 T=192
declare -A NSEQ=([tiny]=32 [15m]=16 [110m]=8)
declare -A C_HID=([tiny]=128 [15m]=288 [110m]=768) C_FF=([tiny]=352 [15m]=768 [110m]=2048)
declare -A C_V=([tiny]=448 [15m]=32000 [110m]=32000)
declare -A TIMES=() MED=() FLOP=() PARAMS=() TOKS=() LOSS1=()

# add KEY FIELD LINE: one round's RESULT line; the values of its FIELD
# (times: the timed steps; median_s: the round's median) join KEY's.
add() {
    echo "$1 $3" >>"$RES"
    TOKS[$1]=$(field tokens "$3")
    [[ -n $(field loss1 "$3") ]] && LOSS1[$1]+="$(field loss1 "$3") "
    TIMES[$1]+="$(field "$2" "$3" | tr ',' ' ') "
}

# ours CFG MODEL RECORDS STEPS [VARIANT OPTION...]: one rl-learn process of
# WARMUP + STEPS steps; VARIANT (recompute, lora) names the options after it.
ours() {
    local cfg=$1 model=$2 recs=$3 K=$4 key="$1 ours${5:+ $5}" line
    shift 5 2>/dev/null || shift 4
    [[ -n ${FAILED[$key]:-} ]] && return
    rm -rf "$W/learn-ckpt"
    if ! "$LEARN" --init "$model" --out "$W/learn-ckpt" --keep 1 --batch "${NSEQ[$cfg]}" --lr 1e-5 --loss sft \
        --max-steps $((WARMUP + K)) --metrics "$W/learn-metrics.jsonl" -q "$@" "$recs" 2>"$ERR"; then
        fail "$key"; return
    fi
    line=$("$PY" -c "$LEARN_METRICS_PY" "$W/learn-metrics.jsonl" "$WARMUP" "$K" "flop=${FLOP[$cfg]}" 2>"$ERR") || { fail "$key" metrics; return; }
    add "$key" times "$line"
}

for cfg in "${CFGS[@]}"; do
    reps=$RUNS K=$STEPS
    [[ $cfg == 110m ]] && reps=$RUNS110 K=$STEPS110
    N=${NSEQ[$cfg]} m=$W/learn-model-$cfg recs=$W/learn-records-$cfg.rlr
    if [[ $KEEP == 1 && -s $m/model.safetensors ]]; then
        echo "reusing $m" >&2
    else
        rm -rf "$m" "$m.init"
        if [[ $cfg == tiny ]]; then
            # version 0 of a run without records: the random weights of --seed 1
            { "$LEARN" --config "$root/models/tiny/config.json" --seed 1 --out "$m.init" -q </dev/null &&
                mv "$m.init/v000000" "$m" && rm -rf "$m.init"; } || die "tiny model: rl-learn --config failed"
        else
            "$FWD" write --model "$m" --config "$cfg" >&2 || die "forward write $cfg failed"
        fi
    fi
    "$PY" "$REF" records "$recs" --records $((N * (WARMUP + K))) --prompt $P --completion $T --vocab "${C_V[$cfg]}" ||
        die "records for $cfg failed"
    read -r f PARAMS[$cfg] < <("$PY" "$REF" flop "$m" --prompt $P --completion $T |
        sed -n 's/^flop_per_seq=\([^ ]*\) params=\([^ ]*\)$/\1 \2/p')
    [[ -n ${f:-} ]] || die "learn_ref.py flop $cfg failed"
    FLOP[$cfg]=$(awk -v f="$f" -v n="$N" 'BEGIN{printf "%.6g", f * n}')
    for ((r = 1; r <= reps; r++)); do
        echo "$cfg: round $r of $reps" >&2
        measure_result "$cfg sgemm mlp" gflop_s "$SGEMM" sgemm --m $((N * (P + T - 1))) --n "${C_FF[$cfg]}" --k "${C_HID[$cfg]}" --reps 5
        measure_result "$cfg sgemm head" gflop_s "$SGEMM" sgemm --m $((N * T)) --n "${C_V[$cfg]}" --k "${C_HID[$cfg]}" --reps 5
        ours "$cfg" "$m" "$recs" "$K"
        ours "$cfg" "$m" "$recs" "$K" recompute --recompute
        ours "$cfg" "$m" "$recs" "$K" lora --lora-rank 16 --lora-alpha 32
        measure_result "$cfg torch" times env OMP_WAIT_POLICY=PASSIVE "$PY" "$REF" train "$m" "$recs" \
            --batch "$N" --steps "$K" --warmup "$WARMUP" --lr 1e-5
    done
done
for key in "${!TIMES[@]}"; do
    [[ -n ${FAILED[$key]:-} ]] && continue
    MED[$key]=$(median <<<"${TIMES[$key]}")
done
printf '%s\n' "${!TIMES[@]}" | sort | while read -r key; do printf '  %-16s %s\n' "$key" "${TIMES[$key]}" >&2; done

# ---- table -----------------------------------------------------------------
# sg CFG SHAPE: the median over rounds of the sgemm GFLOP/s at that shape (mlp or head)
sg() { awk -v g="${MED[$1 sgemm $2]:-0}" 'BEGIN{ printf "%.1f", g }'; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    echo "rlpipe learn benchmark: $("$LEARN" --version 2>&1 | head -n1); torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores (shared machine); $(uname -sr); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg) (other work on the cores distorts every figure)"
    echo "environment: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(not set)} RLPIPE_THREADS=${RLPIPE_THREADS:-(not set)}" \
         "OMP_NUM_THREADS=${OMP_NUM_THREADS:-(not set)} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-(not set)}"
    echo "step: forward + backward + clipping + AdamW on N sequences of P + T tokens, loss sft (-(1/N) sum of completion log-probs), lr 1e-5"
    echo "PyTorch: float32 eager, set_num_threads(2), OMP_WAIT_POLICY=PASSIVE; F.linear, matmul + masked softmax, F.cross_entropy, optim.AdamW"
    echo "medians of the timed steps: $RUNS rounds x $STEPS steps (tiny, 15m), $RUNS110 x $STEPS110 (110m);" \
         "the first $WARMUP steps of each process untimed"
    echo "tok/s = N x (P + T - 1) tokens through the model per step / median step time; GFLOP/st = training FLOPs per step (learn_ref.py train_flop)"
    echo "sgemm = the better of forward + input-gradient + weight-gradient sgemm (tokens x out x in) through the MLP and the output layer, GFLOP/s:"
    for cfg in "${CFGS[@]}"; do
        N=${NSEQ[$cfg]} C=${C_HID[$cfg]}
        echo "  $cfg: MLP $((N * (P + T - 1))) x ${C_FF[$cfg]} x $C: $(sg "$cfg" mlp)," \
             "output layer $((N * T)) x ${C_V[$cfg]} x $C: $(sg "$cfg" head) (rounds: ${TIMES[$cfg sgemm mlp]:-}/ ${TIMES[$cfg sgemm head]:-})"
    done
    echo "step-1 loss per round, a check that both sides take the same step:"
    for cfg in "${CFGS[@]}"; do echo "  $cfg: rl-learn ${LOSS1[$cfg ours]:-?}  PyTorch ${LOSS1[$cfg torch]:-?}"; done
    echo "ours/pt > 1: ours faster; of sg = our GFLOP/s / sgemm GFLOP/s"
    echo
    fmt='%-6s %-14s %7s %8s %10s %11s %7s %7s %8s %6s %6s\n'
    printf "$fmt" config "N x (P + T)" params GFLOP/st "ours tok/s" "torch tok/s" ours/pt "ours GF" "torch GF" sgemm "of sg"
    printf "$fmt" ------ -------------- ------- -------- ---------- ----------- ------- ------- -------- ------ ------
    for cfg in "${CFGS[@]}"; do
        awk -v c="$cfg" -v shape="${NSEQ[$cfg]} x ($P + $T)" -v par="${PARAMS[$cfg]:-0}" -v f="${FLOP[$cfg]:-0}" \
            -v n="${TOKS[$cfg ours]:-${TOKS[$cfg torch]:-0}}" -v to="${MED[$cfg ours]:-0}" -v tp="${MED[$cfg torch]:-0}" \
            -v a="$(sg "$cfg" mlp)" -v b="$(sg "$cfg" head)" -v fmt="$fmt" 'BEGIN{
            s = (a + 0 > b + 0) ? a : b
            og = (to > 0) ? f / to / 1e9 : 0; pg = (tp > 0) ? f / tp / 1e9 : 0
            printf fmt, c, shape, sprintf("%.2fM", par / 1e6), sprintf("%.1f", f / 1e9),
                (to > 0) ? sprintf("%.0f", n / to) : "FAILED", (tp > 0) ? sprintf("%.0f", n / tp) : "FAILED",
                (to > 0 && tp > 0) ? sprintf("%.2f", tp / to) : "-", sprintf("%.1f", og), sprintf("%.1f", pg),
                s, (s > 0 && og > 0) ? sprintf("%.2f", og / s) : "-" }'
    done
    echo
    echo "aims: ours >= 1.5x PyTorch, ours >= 0.50 of sgemm"
    echo
    echo "the same step with activations recomputed (--recompute) and with LoRA adapters (--lora-rank 16"
    echo "--lora-alpha 32, all-linear, f32 base) instead of every weight, each in the same rounds:"
    fmt2='%-6s %10s %10s %8s %10s %8s\n'
    printf "$fmt2" config "ours tok/s" recompute "of ours" "LoRA tok/s" "of ours"
    printf "$fmt2" ------ ---------- ---------- -------- ---------- --------
    for cfg in "${CFGS[@]}"; do
        awk -v c="$cfg" -v n="${TOKS[$cfg ours]:-0}" -v a="${MED[$cfg ours]:-0}" -v r="${MED[$cfg ours recompute]:-0}" \
            -v l="${MED[$cfg ours lora]:-0}" -v fmt="$fmt2" 'BEGIN{
            printf fmt, c, (a > 0) ? sprintf("%.0f", n / a) : "FAILED", (r > 0) ? sprintf("%.0f", n / r) : "FAILED",
                (a > 0 && r > 0) ? sprintf("%.2f", a / r) : "-", (l > 0) ? sprintf("%.0f", n / l) : "FAILED",
                (a > 0 && l > 0) ? sprintf("%.2f", a / l) : "-" }'
    done
} | tee "$W/learn.txt"
((NFAIL == 0)) || { echo "learn.sh: $NFAIL measurements failed" >&2; exit 1; }
