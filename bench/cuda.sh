#!/usr/bin/env bash
# bench/cuda.sh -- the CUDA backend next to PyTorch on the same GPU, and next
# to what the GPU can do (cuBLAS GEMM rates and copy bandwidth measured in the
# same run): learner tokens/s and MFU, rl-ratio scoring tokens/s, decoding
# tokens/s at 1 to 256 slots and the memory bandwidth decoding achieves at 1
# slot. Needs the tools and bench/forward built with CUDA (make; make aux)
# and a Python whose torch sees the GPU.
#
# Models (llama, vocab 32000, heads of 64 with kv heads = heads, random
# weights N(0, 0.02²), written by bench/gpu_ref.py write):
#   110m: hidden 768, intermediate 2048, 12 layers, 12 heads, tied output
#         layer: 109.5M parameters (bench/forward.sh's 110m);
#   1b:   hidden 2048, intermediate 5632, 16 layers, 32 heads, untied output
#         layer: 953.2M parameters (822.1M in the layers' matrices, 65.5M in
#         the embedding and as many in the output layer).
#
# References (bench/gpu_ref.py, PyTorch, in this run, on this GPU):
#   - GEMM: F.linear (x (M, K) · Wᵀ, cuBLAS) at the learner's shapes (the MLP
#     over N x (P + T - 1) tokens: M x F x C, the output layer over N x T
#     completion tokens: M x V x C) and 8192³, in f32 (exact), tf32 and bf16;
#     TFLOP/s = 2MNK / median time (CUDA events, 10 runs after warm-up). The
#     "cuBLAS" rate of a precision is the best of its shapes;
#   - copy: a 2 GiB device-to-device tensor copy, GB/s = bytes read + written
#     / median time of 10;
#   - the datasheet's dense peaks of the product (H100 SXM/PCIe/NVL, H200,
#     H200 NVL) when its name says which, for MFU against the peak too.
#
# Learner (per model, f32 and tf32 rows): N sequences of P = 64 prompt + T = 192
# completion tokens per step (random ids), N = 32 (110m) or 16 (1b), a new
# batch every step:
#   ours:    [RLPIPE_TF32=1] rl-learn --device cuda --init MODEL --loss sft
#            --batch N --lr 1e-5 --max-steps W+K --metrics FILE, checkpoints
#            into a tmpfs (/dev/shm, when it has room) with --keep 1; each
#            step's time is its metrics line's "seconds" (forward, backward,
#            clipping and the AdamW launch; not the checkpoint after it);
#   PyTorch: bench/learn_ref.py train --device cuda [--tf32]: the same
#            weights, batches and step (loss -(1/N) sum of completion
#            log-probs, backward, clip_grad_norm_(1.0), torch.optim.AdamW),
#            float32 eager, each step timed between two synchronizes.
#   The first W steps of each process are untimed (W = 2 for 110m, 1 for 1b,
#   whose every step is followed by an 11.4 GB checkpoint); figures are
#   medians of the K = 3 timed ones. tokens/step = N x (P + T - 1).
#   Training FLOPs per step (learn_ref.py train_flop, per sequence) =
#   6 x (layer matrix parameters x (P + T - 1) + V x C x T)
#   + 6 x L x heads x head_dim x (P + T - 1)(P + T) (causal attention),
#   times N; element-wise work, norms, softmax
#   and AdamW not counted. MFU = FLOPs / step time / the measured cuBLAS rate
#   at the step's precision (f32 rows: f32, tf32 rows: tf32), and / the
#   datasheet peak where known. Step-1 losses of both sides are printed as a
#   check that they take the same step.
#   Caveat: on the GPU the backend runs asynchronously, and rl-learn's
#   "seconds" ends once AdamW's kernels are queued: their run falls into the
#   checkpoint that follows. The notes give an estimate of that time (AdamW
#   moves 7 x 4 bytes per parameter: parameter, gradient, two moments read,
#   parameter and moments written) at the measured copy bandwidth.
#
# Scoring (per model, f32 and tf32): R records of 64 + 192 tokens (R = 1024
# for 110m, 128 for 1b), sampler logp and temperature 1:
#   ours:    [RLPIPE_TF32=1] rl-ratio --device cuda --model MODEL -o /dev/null
#            RECORDS, the seconds of its summary line (from its first record
#            to the last written: reading, scoring in batches of 256, writing;
#            model load not counted; 10 ms resolution); and bench/forward
#            (forward score --device cuda: one model_score call over 256
#            (110m) or 64 (1b) records of random ids, median of 3, f32);
#   PyTorch: bench/gpu_ref.py score --precisions f32,tf32: the same records'
#            completion log-probs, float32 eager, 32 records per forward,
#            torch.no_grad, median of 2 after a warm-up forward.
#   tok/s = records x (P + T) / time; TFLOP/s from 2 x (layer matrix
#   parameters x tokens + V x C x completion tokens).
#
# Decoding (per model, bf16 and f32 weights; slots S = 1, 4, 16, 64, 256):
#   ours:    forward decode --device cuda --sample --dtype D --slots
#            1,4,16,64,256 --prompt 32 --warmup 4 --steps 48 --reps 3: per S a
#            prefill of S x 32 random tokens, 4 untimed steps, then 3 timed
#            runs of 48 steps of model_step_sample (one token per sequence,
#            drawn on the GPU at temperature 1 and fed back: rl-sample's
#            decode step without its bookkeeping); tok/s = S x 48 / median;
#   PyTorch: bench/gpu_ref.py decode: the same loop in Hugging Face-style
#            eager PyTorch (weights and a static KV cache at bf16, or f32),
#            sampling with softmax + torch.multinomial on the GPU;
#   rl-sample (end to end, bf16): rl-sample --device cuda --dtype bf16
#            --slots S -n 1 --max-prompts max(S, 2) --max-new-tokens 128
#            --verifier none on prompts of 16 random ids, records to
#            /dev/null: the tokens/s of its summary line (prefills, sampling,
#            records included, model load not), next to the PyTorch decode
#            loop at the same S (decode steps only, so the ratio is
#            conservative).
#   Bandwidth at S slots = bytes read per step x steps/s, bytes per step =
#   weights (every layer matrix and the output layer at the dtype: 2 or 4
#   bytes per parameter; norms and the embedding rows gathered not counted)
#   + S x the f32 keys and values attention reads (layers x 2 x kv width x 4
#   bytes x positions attended, averaged over the timed steps); at 1 slot
#   that is per token. Its fraction of the measured copy bandwidth is the
#   figure the 1-slot target (0.70) is set for.
#
# Order: references, learner, decoding, scoring, rl-sample; a measurement
# not started DEADLINE seconds after the start is skipped (and says so), and
# one still running GRACE seconds after it is stopped (and fails).
# Every command line run, with its standard error and exit status, goes to
# BENCH_OUT/gpu.log; a failed one is named on stderr with the end of its
# output, its figures read FAILED, and the exit status is 1.
#
# Environment: CONFIGS (default "110m 1b"), DEADLINE=S (default 300),
# GRACE=S (default 60), SKIP=REGEX (measurements whose key matches are
# skipped, e.g. '^learn' when the learner's figures are in hand), TIMEOUT=S (one command at most, default 240), KEEP=1
# (keep the models and reuse them next time), CKPT_DIR (where rl-learn's checkpoints go; default a
# folder in /dev/shm when it has room, else in BENCH_OUT), SLOTS (default
# "1 4 16 64 256"), BENCH_OUT=DIR (default bench/out), BUILD / BIN (build and
# tool folders, as the Makefile), PYTHON (default: the first of python3,
# /opt/torch/.venv/bin/python3, /usr/bin/python3, /usr/local/bin/python3
# whose torch sees a GPU), DEVICE=cpu (a dry run of this script without a
# GPU, with CONFIGS=test: no figure of it means anything).
# Results: the table on stdout and in BENCH_OUT/gpu.txt, RESULT lines in
# BENCH_OUT/gpu.results, the commands in BENCH_OUT/gpu.log. Takes ~5 minutes
# on an H100.
set -uo pipefail

NAME=gpu
PYTHON_GIVEN=${PYTHON:-}
PYTHONPATH0=${PYTHONPATH:-}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DEVICE=${DEVICE:-cuda}
read -r -a CFGS <<<"${CONFIGS:-110m 1b}"
read -r -a SLOTS <<<"${SLOTS:-1 4 16 64 256}"
DEADLINE=${DEADLINE:-300}
SKIP=${SKIP:-}
TIMEOUT=${TIMEOUT:-240}
GRACE=${GRACE:-60}
KEEP=${KEEP:-0}
P=${P:-64} T=${T:-192}                       # learner and scoring records: prompt, completion
# learner: untimed and timed steps per process (1b: one untimed step, as every
# step is followed by a 11.4 GB checkpoint)
declare -A LWC=([110m]=${LEARN_WARMUP:-2} [1b]=${LEARN_WARMUP:-1} [test]=${LEARN_WARMUP:-2})
LK=${LEARN_STEPS:-3}
DP=32 DW=4 DN=${DECODE_STEPS:-48} DR=${DECODE_REPS:-3}   # decoding: prompt, warm-up, steps, runs
SP=16 SN=${SAMPLE_NEW:-128}                  # rl-sample: prompt ids, new tokens
SQ=${SQUARE:-8192}                           # the square GEMM
COPY_MIB=${COPY_MIB:-2048}
FWD=$BUILD/bench/forward
LEARN=$BIN/rl-learn RATIO=$BIN/rl-ratio SAMPLE=$BIN/rl-sample
REF=$here/gpu_ref.py LREF=$here/learn_ref.py
LOG=$W/gpu.log OUTF=$W/gpu.out

declare -A NSEQ=([110m]=32 [1b]=16 [test]=4) NREC=([110m]=1024 [1b]=128 [test]=16)
declare -A NSCORE=([110m]=256 [1b]=64 [test]=8)
declare -A C_HID=([110m]=768 [1b]=2048 [test]=64) C_FF=([110m]=2048 [1b]=5632 [test]=128)
declare -A C_L=([110m]=12 [1b]=16 [test]=2) TIED=([110m]=tied [1b]=untied [test]=tied)
declare -A PARAMS=() FLOP=() SKIPPED=() NOTES=()
V=32000

for cfg in "${CFGS[@]}"; do [[ -n ${NSEQ[$cfg]:-} ]] || die "unknown config '$cfg' (110m, 1b; test for DEVICE=cpu)"; done
positive DEADLINE TIMEOUT GRACE P T LK DN DR SN SQ COPY_MIB
[[ ${LEARN_WARMUP:-0} =~ ^[0-9]+$ ]] || die "LEARN_WARMUP must be an integer >= 0"
[[ $DEVICE == cuda || $DEVICE == cpu ]] || die "DEVICE must be cuda or cpu"
for t in "$FWD" "$LEARN" "$RATIO" "$SAMPLE"; do [[ -x $t ]] || die "$t not found (run: make && make aux, with CUDA)"; done
command -v timeout >/dev/null || die "timeout (coreutils) not found"

# ---- Python: one whose torch sees the GPU ---------------------------------------
# Each candidate is tried with the PYTHONPATH given, then with .deps/py before it.
py_ok() {
    PYTHONPATH=$2 "$1" -c '
import sys, torch, safetensors, msgpack, numpy
sys.exit(0 if sys.argv[1] == "cpu" or torch.cuda.is_available() else 3)' "$DEVICE" >/dev/null 2>&1
}
pick_python() {
    local cands=(python3 /opt/torch/.venv/bin/python3 /usr/bin/python3 /usr/local/bin/python3) c pp
    [[ -n $PYTHON_GIVEN ]] && cands=("$PYTHON_GIVEN")
    for c in "${cands[@]}"; do
        command -v "$c" >/dev/null 2>&1 || continue
        for pp in "$PYTHONPATH0" "$root/.deps/py${PYTHONPATH0:+:$PYTHONPATH0}"; do
            if py_ok "$c" "$pp"; then
                PY=$(command -v "$c"); export PYTHONPATH=$pp; return 0
            fi
        done
    done
    die "no Python among (${cands[*]}) imports torch, safetensors, msgpack and numpy$([[ $DEVICE == cuda ]] &&
        echo " with torch.cuda.is_available()") (set PYTHON=...)"
}
pick_python

cleanup() {
    if [[ $KEEP != 1 ]]; then rm -rf "$W"/gpu-model-*; fi
    rm -rf "$W"/gpu-sample-* "$W/gpu-prompts.jsonl" "$W/gpu-metrics.jsonl" "$W/gpu-metrics.py" "$OUTF"
    [[ -n ${CKPT:-} ]] && rm -rf "$CKPT"
}
bench_start cleanup
: >"$LOG"
echo "cuda.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), Python $PY (PYTHONPATH=${PYTHONPATH:-}), device $DEVICE" >>"$LOG"

# ---- running and recording ----------------------------------------------------------
# run CMD...: CMD under timeout (TIMEOUT, and no later than GRACE seconds
# after the deadline), its command line, standard error and exit status in
# the log; standard output in $OUTF, standard error in $ERR.
run() {
    local rc t0=$SECONDS lim=$TIMEOUT
    ((DEADLINE + GRACE - SECONDS < lim)) && lim=$((DEADLINE + GRACE - SECONDS))
    ((lim < 10)) && lim=10
    printf '+ [%3d s] %s\n' "$SECONDS" "$*" >>"$LOG"
    echo "  [$SECONDS s] $*" >&2
    timeout -k 10 "$lim" "$@" >"$OUTF" 2>"$ERR"
    rc=$?
    tail -n 40 "$ERR" | sed 's/^/    | /' >>"$LOG"
    ((rc == 124 || rc == 137)) && echo "killed after $lim s (TIMEOUT=$TIMEOUT, DEADLINE + GRACE)" | tee -a "$ERR" >>"$LOG"
    echo "    exit $rc after $((SECONDS - t0)) s" >>"$LOG"
    return $rc
}

# due KEY: 0 if KEY is to be measured now; a failed KEY is not run again, and
# past the deadline KEY is marked skipped.
due() {
    [[ -n ${FAILED[$1]:-} ]] && return 1
    if [[ -n $SKIP && $1 =~ $SKIP ]]; then SKIPPED[$1]=1; return 1; fi
    if ((SECONDS >= DEADLINE)); then
        [[ -z ${SKIPPED[$1]:-} ]] && echo "  $1: SKIPPED (past DEADLINE=$DEADLINE s)" >&2
        SKIPPED[$1]=1
        return 1
    fi
    return 0
}

# keep TAG: the RESULT lines of $OUTF into the results as "TAG RESULT ..."; 1 if none.
keep() {
    grep -q '^RESULT' "$OUTF" || return 1
    grep '^RESULT' "$OUTF" | sed "s|^|$1 |" >>"$RES"
}

# measure KEY TAG CMD...: runs CMD, which prints RESULT lines, kept under TAG
# (those it printed before it failed too).
measure() {
    local key=$1 tag=$2 rc; shift 2
    due "$key" || return 1
    run "$@"
    rc=$?
    if keep "$tag" && ((rc == 0)); then return 0; fi
    fail "$key" "$( ((rc)) && echo "exit status $rc" || echo "no RESULT line")"
    return 1
}

# get TAG WHAT FIELD: FIELD= of the last RESULT line of TAG with what=WHAT.
get() {
    awk -v t="$1" -v w="what=$2" -v f="$3=" '$1 == t && $3 == w {
        for (i = 4; i <= NF; i++) if (index($i, f) == 1) v = substr($i, length(f) + 1) } END { print v }' "$RES"
}

# best_gemm DT: the best TFLOP/s of the GEMMs measured at DT.
best_gemm() {
    awk -v p="what=gemm_$1_" '$1 == "ref" && index($3, p) == 1 {
        for (i = 4; i <= NF; i++) if ($i ~ /^tflop_s=/) { v = substr($i, 9) + 0; if (v > m) m = v } }
        END { if (m > 0) print m }' "$RES"
}

# ---- the GPU, and what it can do -------------------------------------------------------
shapes="${SQ}x${SQ}x${SQ}"
for cfg in "${CFGS[@]}"; do
    N=${NSEQ[$cfg]}
    shapes+=",$((N * (P + T - 1)))x${C_FF[$cfg]}x${C_HID[$cfg]},$((N * T))x${V}x${C_HID[$cfg]}"
done
echo "references: GEMM and copy" >&2
measure "references (GEMM, copy)" ref "$PY" "$REF" refs --shapes "$shapes" --dtypes f32,tf32,bf16 --reps 10 \
    --mib "$COPY_MIB" --device "$DEVICE"
INFO=$(grep -v '^RESULT' "$OUTF")
GPU=$(sed -n 's/^gpu=\([^ ]*\).*/\1/p' <<<"$INFO" | tr '_' ' ')
read -r PK_F32 PK_TF32 PK_BF16 PK_TBS < <(sed -n 's/^peak f32=\([^ ]*\) tf32=\([^ ]*\) bf16=\([^ ]*\) tb_s=\([^ ]*\).*/\1 \2 \3 \4/p' <<<"$INFO")
SMI=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null | head -n1)
[[ -n ${GPU:-} ]] || GPU=${SMI%%,*}
G_F32=$(best_gemm f32) G_TF32=$(best_gemm tf32) G_BF16=$(best_gemm bf16)
COPY_GBS=$(get ref "copy_${COPY_MIB}mib" gb_s)

# ---- models, records, checkpoints ----------------------------------------------------------
awk -v P=$SP -v V=$V 'BEGIN { srand(1); for (i = 0; i < 512; i++) {
    printf "{\"prompt\": \"\", \"prompt_ids\": ["
    for (j = 0; j < P; j++) printf "%s%d", (j ? ", " : ""), int(rand() * V)
    print "]}" } }' >"$W/gpu-prompts.jsonl"
for cfg in "${CFGS[@]}"; do
    m=$W/gpu-model-$cfg s=$W/gpu-sample-$cfg N=${NSEQ[$cfg]} LW=${LWC[$cfg]}
    nomodel=()
    if [[ $KEEP == 1 && -s $m/model.safetensors ]]; then
        echo "reusing $m" >>"$LOG"; nomodel=(--no-model)
    else
        rm -rf "$m"
    fi
    # the model (random weights), its records (learner: N per step; scoring) and its FLOPs
    run "$PY" "$REF" setup "$m" --config "$cfg" "${nomodel[@]}" --prompt $P --completion $T \
        --learn-records $((N * (LW + LK))) --score-records "${NREC[$cfg]}" --device "$DEVICE" ||
        die "writing the $cfg model and records failed: $(tail -n 3 "$ERR")"
    read -r f PARAMS[$cfg] < <(sed -n 's/^flop_per_seq=\([^ ]*\) params=\([^ ]*\)$/\1 \2/p' "$OUTF")
    # rl-sample's copy: the tiny tokenizer (ids above its 448 decode to no text)
    mkdir -p "$s" && cp "$m/config.json" "$root/models/tiny/tokenizer.json" "$s/" &&
        ln -sf "$m/model.safetensors" "$s/model.safetensors" || die "cannot make $s"
    [[ -n ${f:-} ]] || die "learn_ref.py flop $cfg printed no figure"
    FLOP[$cfg]=$(awk -v f="$f" -v n="$N" 'BEGIN{printf "%.6g", f * n}')
done

# rl-learn writes a checkpoint (weights and AdamW moments, 12 bytes a
# parameter) after every step, fsynced: into a tmpfs when it holds two.
need=0
for cfg in "${CFGS[@]}"; do
    b=$(awk -v n="${PARAMS[$cfg]}" 'BEGIN{printf "%.0f", (2.2 * 12 * n + 2^30) / 2^30}')
    ((b > need)) && need=$b
done
if [[ -n ${CKPT_DIR:-} ]]; then
    CKPT=$CKPT_DIR/gpu-ckpt.$$
elif [[ -d /dev/shm && -w /dev/shm ]] && (($(df -P -BG /dev/shm | awk 'NR == 2 {print $4 + 0}') >= need)); then
    CKPT=/dev/shm/rlpipe-gpu-ckpt.$$
else
    CKPT=$W/gpu-ckpt.$$
    NOTES[ckpt]="checkpoints went to $W (no tmpfs with $need GiB free): fsynced writes lengthen the run, not the figures"
fi
echo "checkpoints in $CKPT (needs up to $need GiB)" >>"$LOG"

# ---- learner --------------------------------------------------------------------------------
# The RESULT line of an rl-learn metrics file (argv: FILE W K FLOP WHAT):
# times are the "seconds" of the K steps after the first W.
cat >"$W/gpu-metrics.py" <<'EOF_PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
W, K, flop, what = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
assert len(steps) == W + K, f"{len(steps)} metrics lines, {W + K} steps asked for"
toks = {s["fwd_tokens"] for s in steps}
assert len(toks) == 1, f"steps of different sizes: {toks}"
t = [s["seconds"] for s in steps[W:]]
med, n = statistics.median(t), toks.pop()
warm, times = (",".join(f"{x:.4f}" for x in v) for v in ([s["seconds"] for s in steps[:W]], t))
print(f"RESULT what={what} tokens={n} flop={flop:.6g} median_s={med:.6f} tok_s={n / med:.2f}"
      f" loss1={steps[0]['loss']:.6g} warmup_s={warm} times={times}")
EOF_PY
for cfg in "${CFGS[@]}"; do
    m=$W/gpu-model-$cfg recs=$W/gpu-model-$cfg-learn.rlr N=${NSEQ[$cfg]} LW=${LWC[$cfg]}
    for prec in f32 tf32; do
        echo "learner $cfg $prec" >&2
        key="learn $cfg $prec ours" tf=()
        [[ $prec == tf32 ]] && tf=(RLPIPE_TF32=1)
        if due "$key"; then
            rm -rf "$CKPT" "$W/gpu-metrics.jsonl"
            mkdir -p "$(dirname "$CKPT")"
            if run env "${tf[@]}" "$LEARN" --device "$DEVICE" --init "$m" --out "$CKPT" --keep 1 --batch "$N" --lr 1e-5 \
                --loss sft --max-steps $((LW + LK)) --metrics "$W/gpu-metrics.jsonl" -q "$recs" &&
                run "$PY" "$W/gpu-metrics.py" "$W/gpu-metrics.jsonl" "$LW" "$LK" "${FLOP[$cfg]}" "rl-learn_$prec" &&
                keep "$cfg"; then :; else fail "$key"; fi
            rm -rf "$CKPT"
        fi
        tflag=()
        [[ $prec == tf32 ]] && tflag=(--tf32)
        measure "learn $cfg $prec torch" "$cfg" "$PY" "$LREF" train "$m" "$recs" --batch "$N" --steps "$LK" \
            --warmup "$LW" --lr 1e-5 --device "$DEVICE" "${tflag[@]}"
    done
done

# ---- decoding ------------------------------------------------------------------------------
slot_list=$(IFS=,; echo "${SLOTS[*]}")
for cfg in "${CFGS[@]}"; do
    m=$W/gpu-model-$cfg
    for dt in bf16 f32; do
        echo "decoding $cfg $dt" >&2
        measure "decode $cfg $dt ours" "$cfg" "$FWD" decode --device "$DEVICE" --model "$m" --dtype $dt --sample \
            --slots "$slot_list" --prompt $DP --warmup $DW --steps "$DN" --reps "$DR"
    done
    measure "decode $cfg torch" "$cfg" "$PY" "$REF" decode "$m" --dtype bf16,f32 --slots "$slot_list" --prompt $DP \
        --warmup $DW --steps "$DN" --reps "$DR" --device "$DEVICE"
done

# ---- scoring --------------------------------------------------------------------------------
# ratio_run KEY CFG PREC: one rl-ratio process; its summary line's seconds.
ratio_run() {
    local key=$1 cfg=$2 prec=$3 line s t0 tf=()
    [[ $prec == tf32 ]] && tf=(RLPIPE_TF32=1)
    due "$key" || return
    t0=$(date +%s.%N)
    if ! run env "${tf[@]}" "$RATIO" --device "$DEVICE" --model "$W/gpu-model-$cfg" -o /dev/null \
        "$W/gpu-model-$cfg-score.rlr"; then fail "$key"; return; fi
    line=$(grep '^rl-ratio: ' "$ERR" | tail -n1)
    s=$(sed -n "s/.*, \([0-9.]*\) s on $DEVICE.*/\1/p" <<<"$line")
    [[ -n $s ]] || { fail "$key" "no summary line ending 's on $DEVICE'"; return; }
    awk -v s="$s" 'BEGIN { exit !(s + 0 >= 0.05) }' ||
        { fail "$key" "$s s is too short for the summary's 10 ms resolution: more records (NREC)"; return; }
    awk -v w="rl-ratio_$prec" -v n=$((NREC[$cfg] * (P + T))) -v s="$s" -v f="${FLOPS_FWD[$cfg]}" -v t0="$t0" \
        -v t1="$(date +%s.%N)" 'BEGIN {
        printf "RESULT what=%s tokens=%d flop=%.6g median_s=%.4f tok_s=%.2f wall_s=%.2f times=%.4f\n",
            w, n, f, s, n / s, t1 - t0, s }' >"$OUTF"
    keep "$cfg"
}
declare -A FLOPS_FWD=()
for cfg in "${CFGS[@]}"; do
    # forward FLOPs of the scoring records: 2 x (layer matrices x tokens + V x C x
    # completion tokens); the layer matrices are 4 C² + 3 C F (kv heads = heads)
    FLOPS_FWD[$cfg]=$(awk -v r="${NREC[$cfg]}" -v L="${C_L[$cfg]}" -v C="${C_HID[$cfg]}" -v F="${C_FF[$cfg]}" \
        -v P=$P -v T=$T -v V=$V 'BEGIN { printf "%.6g", 2 * r * (L * (4 * C * C + 3 * C * F) * (P + T) + V * C * T) }')
done
for cfg in "${CFGS[@]}"; do
    m=$W/gpu-model-$cfg
    echo "scoring $cfg" >&2
    for prec in f32 tf32; do ratio_run "score $cfg $prec ours" "$cfg" $prec; done
    measure "score $cfg torch" "$cfg" "$PY" "$REF" score "$m" "$m-score.rlr" --precisions f32,tf32 --batch 32 \
        --reps 2 --device "$DEVICE"
    measure "score $cfg model_score" "$cfg" "$FWD" score --device "$DEVICE" --model "$m" --records "${NSCORE[$cfg]}" \
        --prompt $P --completion $T --reps 3
done

# ---- rl-sample, end to end ------------------------------------------------------------------
for cfg in "${CFGS[@]}"; do
    for S in "${SLOTS[@]}"; do
        key="rl-sample $cfg $S" n=$((S > 2 ? S : 2))
        due "$key" || continue
        echo "rl-sample $cfg $S slots" >&2
        if ! run "$SAMPLE" --device "$DEVICE" --model "$W/gpu-sample-$cfg" --dtype bf16 --slots "$S" -n 1 \
            --max-prompts "$n" --max-new-tokens "$SN" --verifier none --seed 1 -o /dev/null "$W/gpu-prompts.jsonl"; then
            fail "$key"; continue
        fi
        line=$(grep '^rl-sample: .* tokens/s' "$ERR" | tail -n1)
        read -r toks tps < <(sed -n 's/.* \([0-9]*\) tokens, \([0-9.]*\) tokens\/s.*/\1 \2/p' <<<"$line")
        [[ ${toks:-} == $((n * SN)) && $line == *" on $DEVICE"* ]] ||
            { fail "$key" "expected $((n * SN)) tokens on $DEVICE: $line"; continue; }
        echo "$cfg RESULT what=rl-sample_bf16_$S tokens=$toks tok_s=$tps slots=$S" >>"$RES"
    done
done
echo "done after $SECONDS s" >>"$LOG"

# ---- table ------------------------------------------------------------------------------------
num() { awk -v v="${1:-}" -v d="$2" 'BEGIN { if (v == "" || v + 0 <= 0) print "-"; else printf "%.*f", d, v }'; }
ratio() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
# cell VALUE DECIMALS KEY...: VALUE formatted, or FAILED / SKIPPED when one of the keys is
cell() {
    local v=$1 d=$2 k; shift 2
    if awk -v v="$v" 'BEGIN { exit !(v != "" && v + 0 > 0) }'; then num "$v" "$d"; return; fi
    for k; do [[ -n ${FAILED[$k]:-} ]] && { echo FAILED; return; }; done
    for k; do [[ -n ${SKIPPED[$k]:-} ]] && { echo SKIPPED; return; }; done
    echo -
}
TFMT='%-46s %12s %12s %7s  %s\n'
# row FIGURE OURS REFERENCE RATIO WHAT-THE-REFERENCE-IS
row() { printf "$TFMT" "$1" "$2" "$3" "$4" "$5"; }
# tflops FLOP SECONDS
tflops() { awk -v f="${1:-}" -v s="${2:-}" 'BEGIN { if (f + 0 > 0 && s + 0 > 0) printf "%.6g", f / s / 1e12 }'; }
# gbs CFG WHAT: bytes read per step (weights + slots x KV) x steps/s, GB/s
gbs() {
    local w kv S n s
    w=$(get "$1" "$2" wbytes) kv=$(get "$1" "$2" kvbytes) S=$(get "$1" "$2" slots) n=$(get "$1" "$2" tokens)
    s=$(get "$1" "$2" median_s)
    awk -v w="$w" -v kv="$kv" -v S="$S" -v n="$n" -v s="$s" 'BEGIN {
        if (w + 0 > 0 && s + 0 > 0 && S + 0 > 0) printf "%.1f", (w + S * kv) * (n / S) / s / 1e9 }'
}
plural() { (($1 > 1)) && echo "$1 slots" || echo "$1 slot"; }
{
    echo "rlpipe GPU benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'): $("$LEARN" --version 2>&1 | head -n1)" \
         "($(git -C "$root" describe --always --dirty 2>/dev/null || echo 'no git'))"
    echo "GPU: ${GPU:-?}${SMI:+ (nvidia-smi: $SMI)}; $(sed -n 's/^gpu=[^ ]* \(.*\)/\1/p' <<<"${INFO:-}")"
    echo "host: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), $(nproc) cores; $(uname -sr); Python $PY"
    echo "took $SECONDS s; RLPIPE_TF32 in the environment: ${RLPIPE_TF32:-(not set)}; checkpoints in $(dirname "$CKPT")"
    echo
    echo "cuBLAS through PyTorch (F.linear, x (M, K) · Wᵀ, M x N x K), TFLOP/s, median of 10:"
    for dt in f32 tf32 bf16; do
        line="  $dt:"
        for sh in ${shapes//,/ }; do line+=" ${sh} $(num "$(get ref "gemm_${dt}_$sh" tflop_s)" 1);"; done
        echo "$line best $(cell "$(best_gemm $dt)" 1 "references (GEMM, copy)")"
    done
    echo "copy (device to device, $COPY_MIB MiB, bytes read + written): $(cell "$COPY_GBS" 0 "references (GEMM, copy)") GB/s"
    if [[ -n ${PK_F32:-} ]]; then
        echo "datasheet peaks (dense): f32 $PK_F32, tf32 $PK_TF32, bf16 $PK_BF16 TFLOP/s, memory $PK_TBS TB/s;" \
             "measured / peak: f32 $(ratio "$G_F32" "$PK_F32"), tf32 $(ratio "$G_TF32" "$PK_TF32")," \
             "bf16 $(ratio "$G_BF16" "$PK_BF16"), copy $(ratio "$COPY_GBS" "$(awk -v t="$PK_TBS" 'BEGIN{print t * 1000}')")"
    fi
    line="models (random weights):"
    for cfg in "${CFGS[@]}"; do
        line+=" $cfg: hidden ${C_HID[$cfg]}, intermediate ${C_FF[$cfg]}, ${C_L[$cfg]} layers, ${TIED[$cfg]} output layer,"
        line+=" $(awk -v n="${PARAMS[$cfg]:-0}" 'BEGIN{printf "%.1f", n / 1e6}')M parameters;"
    done
    echo "$line vocab $V"
    line="learner: N x ($P + $T) tokens a step; medians of $LK steps after W untimed;"
    for cfg in "${CFGS[@]}"; do line+=" $cfg N = ${NSEQ[$cfg]}, W = ${LWC[$cfg]};"; done
    echo "$line"
    echo "decoding: runs of $DN steps (median of $DR) after a $DP-token prefill and $DW steps;" \
         "rl-sample: max(S, 2) prompts x $SN new tokens"
    echo "step-1 losses (both learners take the same step):"
    for cfg in "${CFGS[@]}"; do
        echo "  $cfg: rl-learn f32 $(get "$cfg" rl-learn_f32 loss1), tf32 $(get "$cfg" rl-learn_tf32 loss1);" \
             "PyTorch f32 $(get "$cfg" torch_train_f32 loss1), tf32 $(get "$cfg" torch_train_tf32 loss1)"
    done
    echo "ratio: ours / reference (> 1: ours ahead); for TFLOP/s and GB/s rows the fraction of the GPU's measured rate"
    echo
    row figure ours reference ratio "reference"
    row ---------------------------------------------- ------------ ------------ ------- ---------
    for cfg in "${CFGS[@]}"; do
        f=${FLOP[$cfg]:-}
        for prec in f32 tf32; do
            o=rl-learn_$prec t=torch_train_$prec ko="learn $cfg $prec ours" kt="learn $cfg $prec torch"
            os=$(get "$cfg" "$o" median_s) ts=$(get "$cfg" "$t" median_s) g=$G_F32 pk=${PK_F32:-}
            [[ $prec == tf32 ]] && g=$G_TF32 pk=${PK_TF32:-}
            kg="references (GEMM, copy)"
            row "learn $cfg $prec: tokens/s" "$(cell "$(get "$cfg" "$o" tok_s)" 0 "$ko")" \
                "$(cell "$(get "$cfg" "$t" tok_s)" 0 "$kt")" "$(ratio "$ts" "$os")" "PyTorch eager, $prec"
            row "learn $cfg $prec: TFLOP/s (ratio: MFU)" "$(cell "$(tflops "$f" "$os")" 1 "$ko")" "$(cell "$g" 1 "$kg")" \
                "$(ratio "$(tflops "$f" "$os")" "$g")" "cuBLAS $prec; of peak: $(ratio "$(tflops "$f" "$os")" "$pk")"
            row "  PyTorch's TFLOP/s (ratio: MFU)" "$(cell "$(tflops "$f" "$ts")" 1 "$kt")" "$(cell "$g" 1 "$kg")" \
                "$(ratio "$(tflops "$f" "$ts")" "$g")" "cuBLAS $prec; of peak: $(ratio "$(tflops "$f" "$ts")" "$pk")"
        done
    done
    for cfg in "${CFGS[@]}"; do
        for dt in bf16 f32; do
            ko="decode $cfg $dt ours" kt="decode $cfg torch"
            for S in "${SLOTS[@]}"; do
                o=sample_${dt}_$S t=torch_decode_${dt}_$S
                row "decode $cfg $dt, $(plural "$S"): tokens/s" "$(cell "$(get "$cfg" "$o" tok_s)" 0 "$ko")" \
                    "$(cell "$(get "$cfg" "$t" tok_s)" 0 "$kt")" "$(ratio "$(get "$cfg" "$o" tok_s)" "$(get "$cfg" "$t" tok_s)")" \
                    "PyTorch eager $dt, KV cache"
                if ((S == 1)); then
                    b=$(gbs "$cfg" "$o")
                    row "decode $cfg $dt, 1 slot: GB/s read" "$(cell "$b" 0 "$ko")" \
                        "$(cell "$COPY_GBS" 0 "references (GEMM, copy)")" "$(ratio "$b" "$COPY_GBS")" "copy bandwidth"
                fi
            done
        done
    done
    for cfg in "${CFGS[@]}"; do
        kt="score $cfg torch"
        for prec in f32 tf32; do
            o=rl-ratio_$prec t=torch_score_$prec g=$G_F32 ko="score $cfg $prec ours"
            [[ $prec == tf32 ]] && g=$G_TF32
            tf=$(tflops "$(get "$cfg" "$o" flop)" "$(get "$cfg" "$o" median_s)")
            row "score $cfg $prec, rl-ratio: tokens/s" "$(cell "$(get "$cfg" "$o" tok_s)" 0 "$ko")" \
                "$(cell "$(get "$cfg" "$t" tok_s)" 0 "$kt")" "$(ratio "$(get "$cfg" "$o" tok_s)" "$(get "$cfg" "$t" tok_s)")" \
                "PyTorch eager forward, $prec"
            row "score $cfg $prec, rl-ratio: TFLOP/s" "$(cell "$tf" 1 "$ko")" "$(cell "$g" 1 "references (GEMM, copy)")" \
                "$(ratio "$tf" "$g")" "cuBLAS $prec"
        done
        row "score $cfg f32, model_score alone: tokens/s" "$(cell "$(get "$cfg" score_f32 tok_s)" 0 "score $cfg model_score")" \
            "$(cell "$(get "$cfg" torch_score_f32 tok_s)" 0 "$kt")" \
            "$(ratio "$(get "$cfg" score_f32 tok_s)" "$(get "$cfg" torch_score_f32 tok_s)")" "PyTorch eager forward, f32"
    done
    for cfg in "${CFGS[@]}"; do
        for S in "${SLOTS[@]}"; do
            o=rl-sample_bf16_$S t=torch_decode_bf16_$S
            row "rl-sample $cfg bf16, $(plural "$S"): tokens/s" "$(cell "$(get "$cfg" "$o" tok_s)" 0 "rl-sample $cfg $S")" \
                "$(cell "$(get "$cfg" "$t" tok_s)" 0 "decode $cfg torch")" \
                "$(ratio "$(get "$cfg" "$o" tok_s)" "$(get "$cfg" "$t" tok_s)")" "PyTorch eager bf16 decode steps alone"
        done
    done
    echo
    echo "notes:"
    for cfg in "${CFGS[@]}"; do
        line="  $cfg decoding, GB/s read (weights once a step + every sequence's KV cache), by slots:"
        for dt in bf16 f32; do
            line+=" $dt"
            for S in "${SLOTS[@]}"; do line+=" $S: $(num "$(gbs "$cfg" "sample_${dt}_$S")" 0)"; done
            line+=";"
        done
        echo "$line copy $(num "$COPY_GBS" 0)"
        a=$(awk -v n="${PARAMS[$cfg]:-0}" -v b="${COPY_GBS:-0}" 'BEGIN { if (b > 0) printf "%.1f", 28 * n / (b * 1e9) * 1e3 }')
        echo "  $cfg learner: AdamW's kernels (28 bytes a parameter) would take ~${a:-?} ms a step at copy bandwidth," \
             "after rl-learn's \"seconds\" ends (median step f32 $(num "$(get "$cfg" rl-learn_f32 median_s)" 4) s," \
             "tf32 $(num "$(get "$cfg" rl-learn_tf32 median_s)" 4) s)"
        echo "  $cfg rl-ratio processes, model load included: f32 $(get "$cfg" rl-ratio_f32 wall_s) s," \
             "tf32 $(get "$cfg" rl-ratio_tf32 wall_s) s; PyTorch's mean completion logp $(get "$cfg" torch_score_f32 logp_mean)"
    done
    for k in "${!NOTES[@]}"; do echo "  ${NOTES[$k]}"; done
    ((${#SKIPPED[@]})) && echo "  SKIPPED, past DEADLINE=$DEADLINE s: $(printf '%s; ' "${!SKIPPED[@]}")"
    ((NFAIL)) && echo "  FAILED: $(printf '%s; ' "${!FAILED[@]}")(their commands and errors: $LOG)"
    echo "  aims: learner >= PyTorch eager; decoding at 1 slot >= 0.70 of copy bandwidth"
} | tee "$W/gpu.txt"
echo "cuda.sh: table in $W/gpu.txt, RESULT lines in $RES, commands in $LOG" >&2
((NFAIL == 0)) || { echo "cuda.sh: $NFAIL measurements failed (see $LOG)" >&2; exit 1; }
