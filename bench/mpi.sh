#!/usr/bin/env bash
# bench/mpi.sh [15m|tiny|all] -- rl-learn's data-parallel ranks (man/rl-learn.1,
# DATA-PARALLEL RANKS) on this machine's cores: the step time and tokens/s of
# one process on every core next to mpirun -np 2 with a core each; each
# rank's peak resident size next to its part of AdamW's state; the bytes the
# ranks exchange in a step; and from those, on paper, the time the
# collectives take at 8 and 64 ranks over 100 and 400 Gb/s links next to the
# step time.
#
# Models (llama, random weights), bench/learn.sh's:
#   15m:  hidden 288, intermediate 768, 6 layers, vocab 32000, tied (15.19M
#         parameters), written by bench/forward.c;
#   tiny: models/tiny/config.json (0.80M), rl-learn --config --seed 1.
# Batches: bench/learn_ref.py records, groups of 4 sequences of 64 prompt +
# 192 completion random ids; S = 16 (15m) or 32 (tiny) sequences a step, a
# new batch every step; --loss sft --lr 1e-5, the other options default.
# In each of ROUNDS rounds, one after the other:
#   np1   RLPIPE_THREADS=2 rl-learn --batch S: one process, no MPI (the
#         reference of every ratio);
#   mpi1  RLPIPE_THREADS=2 mpirun --bind-to none -np 1 rl-learn --batch S:
#         one rank, which takes the one-process path (all of AdamW's state,
#         no collectives) with MPI initialized (Open MPI binds a job of 1 or
#         2 ranks to a core a rank: without --bind-to none, both threads
#         would share one core);
#   np2   RLPIPE_THREADS=1 mpirun -np 2 rl-learn --batch S: two ranks, each
#         bound to a core of its own, S/2 sequences (whole groups) each;
#   half  RLPIPE_THREADS=1 mpirun -np 1 rl-learn --batch S/2: one rank doing
#         alone what each rank of np2 computes, holding all of AdamW's state:
#         np2's memory reference (same activations, twice the moments), and
#         its step time less np2's is what the collectives and the sharing of
#         the machine cost np2;
# plus bench/learn.c's sgemm (the better of the MLP's and the output layer's
# three training products at the step's shapes, OpenBLAS with a thread per
# core: the machine's rate). Each process takes WARMUP untimed steps, then
# STEPS timed ones; a step's time is its metrics line's "seconds" (forward,
# backward, the collectives, clipping and AdamW; not the checkpoint written
# after every step); every figure is the median over the timed steps of all
# rounds (sgemm and peak sizes: over rounds). tok/s = fwd_tokens (S x 255, the
# tokens through the model) / step time; GFLOP/s = learn_ref.py train_flop
# x S / step time. The ranks talk through Open MPI's shared memory (btl
# self,vader,tcp), as in tests/cli/mpi.sh.
#
# Memory: every process runs under /usr/bin/time -f %M, its peak resident
# size. AdamW's state of a rank is 8 bytes (two f32 moments) x the parameters
# of its part: 8P in one process, 8K on rank 0 of np2 (K of P parameters, its
# start-up line) and 8(P - K) on rank 1. A rank's peak is set either by the
# activations of its sequences or by the checkpoint (rank 0 gathers all the
# moments into one 8P buffer to write them), so np2 against np1 differs by
# more than the moments (half the sequences a rank); np2's rank 0 against
# half, which holds the same sequences and writes the same checkpoints,
# should differ by the moments alone: 8K - 8P, -4P.
#
# Bytes: mpirun -np 2 again for each model, its ranks on TCP over the
# loopback of a network namespace of its own (unshare -n: needs root), for 1
# and for 3 steps: the loopback's transmitted bytes of the second run less
# the first's, halved, are one step's traffic (TCP/IP headers included); less
# the checkpoint's gather of rank 1's moments (8(P - K) bytes a version), the
# step's own: the gradient's reduce-scatter, the parameters' all-gather, a
# few sums and the batch's records from rank 0. A ring would move
# 2(N - 1) x 4P bytes over all ranks (below), 8P at N = 2.
#
# On paper: a ring reduce-scatter of the f32 gradient (4P bytes) takes N - 1
# steps in which every rank sends a chunk of 4P/N bytes (and receives one):
# (N - 1)/N x 4P bytes out of every rank; the ring all-gather of the updated
# f32 parameters the same. A step: 8P (N - 1)/N bytes out of every rank in
# 2(N - 1) messages, over a full-duplex link of B bit/s
#   t = 8P (N - 1)/N x 8 / B + 2(N - 1) x alpha    (alpha = ALPHA_US, 5 us)
# for N = 8 and 64, B = 100 and 400 Gb/s, next to the step time of one
# process on this machine's cores for S sequences (every rank keeps S, the
# global batch grows with N): for the bench model measured (np1), for
# SmolLM2-135M and Qwen2.5-1.5B computed, their learn_ref.py train_flop of the
# same S sequences over the bench model's measured GFLOP/s (15m's, or tiny's
# when 15m did not run). rl-learn does
# not overlap the collectives with the backward pass: t adds to the step.
#
# Environment: ROUNDS=R (default 3), STEPS=K (timed steps a process, default
# 3), WARMUP=W (untimed steps before them, default 2), ALPHA_US (default 5),
# KEEP=1 (keep the models and reuse them next time), BENCH_OUT=DIR (default
# bench/out), BUILD / BIN (build and tool folders, as the Makefile), PYTHON
# (default .deps/venv/bin/python: learn_ref.py needs torch).
# Results: the tables on stdout and in BENCH_OUT/mpi.txt, RESULT lines in
# BENCH_OUT/mpi.results (one per measurement and round). Takes ~3.5 minutes
# on 2 cores.
set -uo pipefail

NAME=mpi
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WHICH=${1:-all}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-2}
KEEP=${KEEP:-0}
ALPHA_US=${ALPHA_US:-5}
FWD=$BUILD/bench/forward
SGEMM=$BUILD/bench/learn
LEARN=$BIN/rl-learn
REF=$here/learn_ref.py

case $WHICH in 15m | tiny) CFGS=("$WHICH") ;; all) CFGS=(15m tiny) ;;
    *) die "usage: bench/mpi.sh [15m|tiny|all]" ;; esac
positive ROUNDS STEPS
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be an integer >= 0"
[[ $ALPHA_US =~ ^[0-9]+([.][0-9]+)?$ ]] || die "ALPHA_US must be a number of microseconds"
[[ -x $FWD && -x $SGEMM ]] || die "$FWD or $SGEMM not found (run: make aux)"
[[ -x $LEARN ]] || die "$LEARN not found (run: make)"
command -v mpirun >/dev/null 2>&1 || die "no mpirun (Open MPI: apt-get install openmpi-bin libopenmpi-dev)"
grep -q MPI_Init <(nm -D "$LEARN" 2>/dev/null) || die "$LEARN was built without MPI (build it where mpicc is)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
"$PY" -c 'import torch, zstandard, msgpack' 2>/dev/null ||
    die "$PY cannot import torch, zstandard and msgpack (scripts/deps.sh test makes .deps/venv)"
# Open MPI refuses root without these; -np 2 on fewer cores would need --oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader,tcp

cleanup() {
    if [[ $KEEP != 1 ]]; then rm -rf "$W"/mpi-model-* "$W"/mpi-records-*.rlr; fi
    rm -rf "$W"/mpi-ckpt* "$W"/mpi-metrics*.jsonl "$W"/mpi-rss.* "$W"/mpi-cfg-*
}
bench_start cleanup

P=64 T=192
RUNS=(np1 mpi1 np2 half)
declare -A NSEQ=([tiny]=32 [15m]=16) C_HID=([tiny]=128 [15m]=288) C_FF=([tiny]=352 [15m]=768)
declare -A C_V=([tiny]=448 [15m]=32000)
declare -A CMD=([np1]="RLPIPE_THREADS=2 rl-learn" [mpi1]="RLPIPE_THREADS=2 mpirun --bind-to none -np 1 rl-learn"
                [np2]="RLPIPE_THREADS=1 mpirun -np 2 rl-learn" [half]="RLPIPE_THREADS=1 mpirun -np 1 rl-learn")
declare -A TIMES=() MED=() FLOP=() PARAMS=() TOKS=() LOSS1=() MOM=() RSS0=() RSS1=() BATCH=() BYTES=()

# add KEY FIELD LINE: one round's RESULT line; the values of its FIELD
# (times: the timed steps; gflop_s: sgemm's rate) join KEY's.
add() {
    echo "$1 $3" >>"$RES"
    TOKS[$1]=$(field tokens "$3") MOM[$1]=$(field moments "$3")
    [[ -n $(field loss1 "$3") ]] && LOSS1[$1]+="$(field loss1 "$3") "
    local rss; rss=$(field rss_kb "$3")
    [[ -n $rss ]] && RSS0[$1]+="${rss%%,*} " && [[ $rss == *,* ]] && RSS1[$1]+="${rss#*,} "
    TIMES[$1]+="$(field "$2" "$3" | tr ',' ' ') "
}

# learn CFG RANKS THREADS BATCH STEPS [MPIRUN OPTION...]: rl-learn under
# /usr/bin/time (RANKS 0: without mpirun), its checkpoints in $W/mpi-ckpt,
# metrics in $W/mpi-metrics.jsonl, each rank's peak size (KiB) in
# $W/mpi-rss.RANK, its standard error in $ERR.
learn() {
    local cfg=$1 np=$2 threads=$3 batch=$4 steps=$5
    local rss=(sh -c 'exec /usr/bin/time -f %M -o "$0.${OMPI_COMM_WORLD_RANK:-0}" "$@"' "$W/mpi-rss")
    local mpi=()
    shift 5
    ((np > 0)) && mpi=(mpirun "$@" -np "$np")
    rm -rf "$W/mpi-ckpt" "$W"/mpi-rss.* "$W/mpi-metrics.jsonl"
    RLPIPE_THREADS=$threads "${mpi[@]}" "${rss[@]}" "$LEARN" --init "$W/mpi-model-$cfg" --out "$W/mpi-ckpt" --keep 1 \
        --batch "$batch" --lr 1e-5 --loss sft --max-steps "$steps" --metrics "$W/mpi-metrics.jsonl" \
        "$W/mpi-records-$cfg.rlr" 2>"$ERR"
}

# run CFG RUN: one process (or job) of WARMUP + STEPS steps as the header says.
run() {
    local cfg=$1 what=$2 key="$1 $2" np threads batch=${NSEQ[$1]} line k rss opt=()
    [[ -n ${FAILED[$key]:-} ]] && return
    case $what in
        np1) np=0 threads=2 ;; mpi1) np=1 threads=2 opt=(--bind-to none) ;; np2) np=2 threads=1 ;;
        half) np=1 threads=1 batch=$((batch / 2)) ;;
    esac
    BATCH[$key]=$batch
    learn "$cfg" "$np" "$threads" "$batch" $((WARMUP + STEPS)) "${opt[@]}" || { fail "$key"; return; }
    # "rl-learn: 2 ranks (mpi); AdamW's moments of K of P parameters on each ..."; one process: all P
    k=$(sed -n "s/^rl-learn: [0-9]* ranks ([^)]*); AdamW.s moments of \([0-9]*\) of.*/\1/p" "$ERR")
    ((np < 2)) && k=${k:-${PARAMS[$cfg]}}   # one rank: no start-up line, all the moments
    [[ -n $k ]] || { fail "$key" "no start-up line naming AdamW's moments"; return; }
    rss=$(cat "$W/mpi-rss.0" 2>/dev/null)
    ((np == 2)) && rss+=,$(cat "$W/mpi-rss.1" 2>/dev/null)
    [[ $rss =~ ^[0-9]+(,[0-9]+)?$ ]] || { fail "$key" "no peak size from /usr/bin/time: $rss"; return; }
    line=$("$PY" -c "$LEARN_METRICS_PY" "$W/mpi-metrics.jsonl" "$WARMUP" "$STEPS" "config=$cfg" "run=$what" \
        "ranks=$((np ? np : 1))" "threads=$threads" "batch=$batch" "params=${PARAMS[$cfg]}" "moments=$k" "rss_kb=$rss" \
        2>"$ERR") || { fail "$key" metrics; return; }
    add "$key" times "$line"
}

# lo_bytes CFG STEPS: the bytes the loopback transmitted while mpirun -np 2
# took STEPS steps in a network namespace of its own, its ranks on TCP.
LO_SH='ip link set lo up || exit 1
"$@" || exit 1
tr ":" " " </proc/net/dev | awk '\''$1 == "lo" { print $10 }'\'''
lo_bytes() {
    local cfg=$1 steps=$2
    rm -rf "$W/mpi-ckpt"
    OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo RLPIPE_THREADS=1 \
        unshare -n bash -c "$LO_SH" lo_bytes mpirun -np 2 "$LEARN" --init "$W/mpi-model-$cfg" --out "$W/mpi-ckpt" \
        --keep 1 --batch "${NSEQ[$cfg]}" --lr 1e-5 --loss sft --max-steps "$steps" -q "$W/mpi-records-$cfg.rlr" 2>"$ERR"
}

# bytes CFG: one step's traffic between the two ranks (the header says how).
bytes() {
    local cfg=$1 key="$1 bytes" b1 b3 k=${MOM[$1 np2]:-}
    [[ -n $k ]] || { fail "$key" "np2 failed"; return; }
    if ! unshare -n true 2>/dev/null || ! command -v ip >/dev/null; then
        fail "$key" "unshare -n (root) or ip not available"; return
    fi
    b1=$(lo_bytes "$cfg" 1 | tail -n1) && b3=$(lo_bytes "$cfg" 3 | tail -n1) && [[ $b1 =~ ^[0-9]+$ && $b3 =~ ^[0-9]+$ ]] ||
        { fail "$key"; return; }
    BYTES[$cfg]=$(awk -v b1="$b1" -v b3="$b3" -v p="${PARAMS[$cfg]}" -v k="$k" 'BEGIN{
        s = (b3 - b1) / 2; g = 8 * (p - k)
        printf "bytes_1step_run=%d bytes_3step_run=%d per_step=%.0f ckpt_gather=%d collectives=%.0f ring=%d of_ring=%.4f",
            b1, b3, s, g, s - g, 8 * p, (s - g) / (8 * p) }')
    echo "$key RESULT what=lo_bytes config=$cfg ranks=2 params=${PARAMS[$cfg]} moments=$k ${BYTES[$cfg]}" >>"$RES"
}

# The published shapes of the two models the collectives are costed for (their config.json's).
declare -A REAL=(
    [SmolLM2-135M]='{"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "tie_word_embeddings": true}'
    [Qwen2.5-1.5B]='{"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
        "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": true}')
REALS=(SmolLM2-135M Qwen2.5-1.5B)

# flop DIR: "FLOP_PER_SEQ PARAMS" of the config in DIR, per sequence of P + T tokens.
flop() { "$PY" "$REF" flop "$1" --prompt $P --completion $T | sed -n 's/^flop_per_seq=\([^ ]*\) params=\([^ ]*\)$/\1 \2/p'; }

for cfg in "${CFGS[@]}"; do
    N=${NSEQ[$cfg]} m=$W/mpi-model-$cfg recs=$W/mpi-records-$cfg.rlr
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
    nsteps=$((WARMUP + STEPS > 3 ? WARMUP + STEPS : 3))   # 3: the bytes' run
    "$PY" "$REF" records "$recs" --records $((N * nsteps)) --prompt $P --completion $T --vocab "${C_V[$cfg]}" ||
        die "records for $cfg failed"
    read -r f PARAMS[$cfg] < <(flop "$m")
    [[ -n ${f:-} ]] || die "learn_ref.py flop $cfg failed"
    FLOP[$cfg]=$(awk -v f="$f" -v n="$N" 'BEGIN{printf "%.6g", f * n}')
    for ((r = 1; r <= ROUNDS; r++)); do
        echo "$cfg: round $r of $ROUNDS" >&2
        measure_result "$cfg sgemm mlp" gflop_s "$SGEMM" sgemm --m $((N * (P + T - 1))) --n "${C_FF[$cfg]}" --k "${C_HID[$cfg]}" --reps 5
        measure_result "$cfg sgemm head" gflop_s "$SGEMM" sgemm --m $((N * T)) --n "${C_V[$cfg]}" --k "${C_HID[$cfg]}" --reps 5
        for what in "${RUNS[@]}"; do run "$cfg" "$what"; done
    done
    echo "$cfg: bytes between the ranks" >&2
    bytes "$cfg"
done
for key in "${!TIMES[@]}"; do
    [[ -n ${FAILED[$key]:-} ]] && continue
    MED[$key]=$(median <<<"${TIMES[$key]}")
    [[ -n ${RSS0[$key]:-} ]] && MED[$key rss0]=$(median <<<"${RSS0[$key]}")
    [[ -n ${RSS1[$key]:-} ]] && MED[$key rss1]=$(median <<<"${RSS1[$key]}")
done
printf '%s\n' "${!TIMES[@]}" | sort | while read -r key; do
    printf '  %-16s %s%s\n' "$key" "${TIMES[$key]}" "${RSS0[$key]:+ peak KB: ${RSS0[$key]}${RSS1[$key]:+/ ${RSS1[$key]}}}" >&2
done

# ---- on paper ---------------------------------------------------------------
# The bench model the paper scales from: 15m where it ran, else tiny.
BASE=
for cfg in "${CFGS[@]}"; do [[ -z $BASE && -n ${MED[$cfg np1]:-} ]] && BASE=$cfg; done
PAPER=()   # rows: NAME PARAMS FLOP STEP_S SOURCE
if [[ -n $BASE ]]; then
    PAPER+=("$BASE ${PARAMS[$BASE]} ${FLOP[$BASE]} ${MED[$BASE np1]} measured")
    for name in "${REALS[@]}"; do
        d=$W/mpi-cfg-$name
        mkdir -p "$d" && echo "${REAL[$name]}" >"$d/config.json" || die "cannot write $d"
        read -r f p < <(flop "$d")
        [[ -n ${f:-} ]] || die "learn_ref.py flop $name failed"
        PAPER+=("$(awk -v n="$name" -v f="$f" -v p="$p" -v b="${NSEQ[$BASE]}" -v bf="${FLOP[$BASE]}" -v bs="${MED[$BASE np1]}" \
            'BEGIN{ printf "%s %d %.6g %.6g computed", n, p, f * b, f * b / (bf / bs) }')")
    done
fi
# comm PARAMS RANKS GBPS: seconds of a ring reduce-scatter + all-gather of 4P bytes each
comm() {
    awk -v p="$1" -v n="$2" -v g="$3" -v a="$ALPHA_US" 'BEGIN{
        printf "%.6g", 8 * p * (n - 1) / n * 8 / (g * 1e9) + 2 * (n - 1) * a * 1e-6 }'
}
for row in "${PAPER[@]}"; do
    read -r name p f s src <<<"$row"
    for n in 8 64; do for g in 100 400; do
        echo "paper RESULT what=collectives_on_paper model=$name params=$p flop_step=$f step_s=$s step=$src ranks=$n" \
             "gbps=$g alpha_us=$ALPHA_US bytes_per_rank=$(awk -v p="$p" -v n="$n" 'BEGIN{printf "%.0f", 8 * p * (n - 1) / n}')" \
             "seconds=$(comm "$p" "$n" "$g")" >>"$RES"
    done; done
done

# ---- tables -----------------------------------------------------------------
mb() { awk -v b="${1:-0}" 'BEGIN{ printf "%.1f", b / 1e6 }'; }
kb() { awk -v k="${1:-0}" 'BEGIN{ printf "%.1f", k * 1024 / 1e6 }'; }          # KiB (time's %M) in MB
kbd() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN{ printf "%+.1f", (a - b) * 1024 / 1e6 }'; }
kbs() { local k o=; for k in $1; do o+="$(kb "$k") "; done; printf '%s' "${o% }"; }
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN{ if (a > 0 && b > 0) printf "%.3f", a / b; else printf "-" }'; }
sg() { awk -v a="${MED[$1 sgemm mlp]:-0}" -v b="${MED[$1 sgemm head]:-0}" 'BEGIN{ printf "%.1f", (a > b) ? a : b }'; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -n1) "
    simd=scalar
    for s in sse4_2 avx2 avx512f; do [[ $flags == *" $s "* ]] && simd=$s; done
    echo "rlpipe mpi benchmark: $("$LEARN" --version 2>&1 | head -n1); $(mpirun --version 2>&1 | head -n1)"
    echo "machine: ${cpu:-unknown CPU} (SIMD up to $simd), $(nproc) cores (shared machine); $(uname -sr); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg) (other work on the cores distorts every figure)"
    echo "environment: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(not set)} OMPI_MCA_btl=$OMPI_MCA_btl"
    echo "step: forward + backward + collectives + clipping + AdamW on S (batch) sequences of $P + $T tokens, loss sft, lr 1e-5;" \
         "medians of $ROUNDS rounds x $STEPS steps, the first $WARMUP steps of each process untimed"
    echo "tok/s = S x $((P + T - 1)) tokens through the model / median step; GFLOP/s = learn_ref.py train_flop x S / median step;"
    echo "sgemm = the better of bench/learn.c's MLP and output-layer training products, GFLOP/s (2 threads); vs np1 = tok/s / np1's"
    echo "step-1 loss per round (every run takes the same first step):"
    for cfg in "${CFGS[@]}"; do
        echo "  $cfg: $(for w in np1 mpi1 np2; do printf '%s %s ' "$w" "${LOSS1[$cfg $w]:-?}"; done)"
    done
    echo
    fmt='%-6s %-5s %-53s %6s %8s %7s %7s %7s %6s %7s\n'
    printf "$fmt" config run command batch "step s" tok/s GFLOP/s sgemm "of sg" "vs np1"
    printf "$fmt" ------ ----- ----------------------------------------------------- ------ -------- ------- ------- ------- ------ -------
    for cfg in "${CFGS[@]}"; do
        for w in "${RUNS[@]}"; do
            key="$cfg $w" s=${MED[$cfg $w]:-0}
            awk -v c="$cfg" -v w="$w" -v cmd="${CMD[$w]}" -v b="${BATCH[$key]:-?}" -v s="$s" -v n="${TOKS[$key]:-0}" \
                -v f="${FLOP[$cfg]:-0}" -v sg="$(sg "$cfg")" -v r="${MED[$cfg np1]:-0}" -v nr="${TOKS[$cfg np1]:-0}" \
                -v fmt="$fmt" 'BEGIN{
                if (w == "half") f /= 2
                if (s <= 0) { printf fmt, c, w, cmd, b, "FAILED", "-", "-", sg, "-", "-"; exit }
                gf = f / s / 1e9
                printf fmt, c, w, cmd, b, sprintf("%.4f", s), sprintf("%.0f", n / s), sprintf("%.1f", gf), sg,
                    (sg > 0) ? sprintf("%.2f", gf / sg) : "-", (r > 0) ? sprintf("%.3f", (n / s) / (nr / r)) : "-" }'
        done
    done
    for cfg in "${CFGS[@]}"; do
        [[ -n ${MED[$cfg np2]:-} && -n ${MED[$cfg half]:-} ]] || continue
        echo "  $cfg: np2's step - half's (a rank's share alone): $(awk -v a="${MED[$cfg np2]}" -v b="${MED[$cfg half]}" \
            'BEGIN{ printf "%+.4f s", a - b }') (the collectives, the wait for the slower rank, two processes on one memory)"
    done
    echo
    echo "memory: AdamW state a rank = 8 B x its part's parameters (np2: the start-up line's K of P; one rank: P);"
    echo "peak resident size of each rank (/usr/bin/time %M), median over rounds; MB (1e6 bytes)"
    fmt='%-6s %-5s %6s %13s %13s %8s %11s %11s  %s\n'
    printf "$fmt" config run batch "state rank 0" "state rank 1" "of np1" "peak rank 0" "peak rank 1" "peaks by round (rank 0 / 1)"
    printf "$fmt" ------ ----- ------ ------------- ------------- -------- ----------- ----------- ---------------------------
    for cfg in "${CFGS[@]}"; do
        p=${PARAMS[$cfg]}
        for w in np1 np2 half; do
            key="$cfg $w" k=${MOM[$cfg $w]:-}
            [[ -n ${MED[$key]:-} ]] || { printf "$fmt" "$cfg" "$w" - FAILED - - - - -; continue; }
            s1=- r1=-
            [[ $w == np2 ]] && s1=$(mb $((8 * (p - k)))) r1=$(kb "${MED[$key rss1]}")
            printf "$fmt" "$cfg" "$w" "${BATCH[$key]}" "$(mb $((8 * k)))" "$s1" "$(ratio "$k" "$p")" \
                "$(kb "${MED[$key rss0]}")" "$r1" "$(kbs "${RSS0[$key]}")${RSS1[$key]:+ / $(kbs "${RSS1[$key]}")}"
        done
        k=${MOM[$cfg np2]:-}
        [[ -n ${MED[$cfg np2]:-} && -n ${MED[$cfg np1]:-} && -n ${MED[$cfg half]:-} ]] || continue
        echo "  $cfg: AdamW state a rank, np2 / np1: $(ratio "$k" "$p") (rank 0), $(ratio $((p - k)) "$p") (rank 1);" \
             "a rank's peak less by the moments alone: $(mb $((8 * k - 8 * p))) MB (8K - 8P)"
        echo "  $cfg: peak np2 - np1 (moments and half the sequences' activations): rank 0" \
             "$(kbd "${MED[$cfg np2 rss0]}" "${MED[$cfg np1 rss0]}") MB, rank 1 $(kbd "${MED[$cfg np2 rss1]}" "${MED[$cfg np1 rss0]}") MB"
        echo "  $cfg: peak np2 - half (the same sequences a rank; both write the checkpoints): rank 0" \
             "$(kbd "${MED[$cfg np2 rss0]}" "${MED[$cfg half rss0]}") MB, expected $(mb $((8 * k - 8 * p))) MB;" \
             "rank 1 (writes none) $(kbd "${MED[$cfg np2 rss1]}" "${MED[$cfg half rss0]}") MB"
    done
    echo
    echo "bytes a step between 2 ranks, measured (TCP over a namespace's loopback, 3-step run less 1-step run, halved), MB:"
    for cfg in "${CFGS[@]}"; do
        b=${BYTES[$cfg]:-}
        [[ -n $b ]] || { echo "  $cfg: FAILED or not measured"; continue; }
        echo "  $cfg: P = ${PARAMS[$cfg]}: $(mb "$(field per_step " $b")") a step, of which the checkpoint's gather of rank 1's" \
             "moments $(mb "$(field ckpt_gather " $b")"); the step's collectives $(mb "$(field collectives " $b")")" \
             "= $(field of_ring " $b") x a ring's 2(N - 1) x 4P = $(mb "$(field ring " $b")")"
    done
    echo
    if ((${#PAPER[@]})); then
        echo "on paper: ring reduce-scatter + all-gather of 4P bytes each, t = 8P (N - 1)/N x 8 / B + 2(N - 1) x ${ALPHA_US} us," \
             "seconds (of the step time)"
        echo "step s: one process, ${NSEQ[$BASE]} sequences of $P + $T tokens, on this machine:" \
             "measured ($BASE np1) or computed (train_flop / $BASE np1's $(awk -v f="${FLOP[$BASE]}" -v s="${MED[$BASE np1]}" \
                 'BEGIN{printf "%.1f", f / s / 1e9}') GFLOP/s)"
        fmt='%-13s %8s %9s %9s %-9s %16s %16s %16s %16s\n'
        printf "$fmt" model params GFLOP/st "step s" step "N=8 100 Gb/s" "N=8 400 Gb/s" "N=64 100 Gb/s" "N=64 400 Gb/s"
        printf "$fmt" ------------- -------- --------- --------- --------- ---------------- ---------------- ---------------- ----------------
        for row in "${PAPER[@]}"; do
            read -r name p f s src <<<"$row"
            cells=()
            for n in 8 64; do for g in 100 400; do
                cells+=("$(awk -v t="$(comm "$p" "$n" "$g")" -v s="$s" 'BEGIN{ printf "%.4f (%.2f%%)", t, 100 * t / s }')")
            done; done
            printf "$fmt" "$name" "$(awk -v p="$p" 'BEGIN{printf "%.2fM", p / 1e6}')" "$(awk -v f="$f" 'BEGIN{printf "%.1f", f / 1e9}')" \
                "$(awk -v s="$s" 'BEGIN{printf "%.3f", s}')" "$src" "${cells[@]}"
        done
    fi
} | tee "$W/mpi.txt"
((NFAIL == 0)) || { echo "mpi.sh: $NFAIL measurements failed" >&2; exit 1; }
