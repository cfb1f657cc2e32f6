#!/usr/bin/env bash
# bench/agent.sh [SEEDS [STEPS]] -- multi-turn RL with a tool against TRL's
# GRPOTrainer and its own tool loop: experiments/agent's calculator task
# (SmolLM2-135M-Instruct, 3-digit x 2-digit products, a `calculator` tool
# called in the Hermes format the system message describes, reward 1 for the
# right final answer), from the same warm start, on the same machine, one
# seed after another (defaults: seeds "1 2 3", STEPS 10 optimizer steps each).
# About 25 minutes a seed on 2 cores (TRL's 10 steps take most of it).
#
# rlpipe: experiments/agent's in-flight pipeline (its Makefile, RL_STEPS=STEPS,
# KEEP_EVERY=EVERY, the runs under BENCH_OUT/agent/rlpipe): rl-sample --env
# calc_env.py at f32, rl-ratio --clip 2, rl-learn GRPO, --max-lag 2.
# TRL: bench/trl.sh with TASK=calc (its header, and trl_grpo.py's, say what
# TRL needs for the task and what differs), its K = EVERY, into
# BENCH_OUT/trl/calc-s<SEED>. Both: 32 samples a step (4 questions x 8),
# at most 3 turns, temperature 0.7, lr 1e-5, f32, 2 threads; each engine its
# own question order from the same training file.
#
# Every kept version of both (every EVERY-th, default 2, and the last) is
# evaluated by the same program: experiments/agent/evaluate.py, greedy,
# f32, through rl-sample --env calc_env.py on the 200 held-out questions
# (TRL's checkpoints are Hugging Face directories that rl-sample loads).
# Step 0 is the warm start (experiments/agent's own evaluation of it).
#
# The report, on stdout and in BENCH_OUT/agent.txt (bench/agent_report.py):
# each run's steps, seconds a step (median), wall time; held-out success at
# every evaluated step with the time it was reached (rl-learn's `elapsed`,
# TRL's `elapsed_s`: seconds from the process start, set-up included); and
# for each of TARGETS (default "0.9 0.95") the steps and seconds to the first
# version at or above it per seed, with TRL's time over rlpipe's.
#
# ENGINES="rlpipe" (or "TRL") makes that engine's runs alone (default
# "rlpipe TRL"); the report takes the other's as they were. Run on a quiet
# machine: the times are wall times.
# Environment: SEEDS, STEPS, EVERY, ENGINES, TARGETS; BENCH_OUT (default
# bench/out), BIN (as the Makefile), PYTHON (lib.sh). Bad settings: exit 2.
set -uo pipefail

NAME=agent USAGE_ARGS="[SEEDS [STEPS]]"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
usage() { settings_usage "$@"; }
settings_help "$@"
(($# <= 2)) || usage "at most 2 arguments (SEEDS, STEPS), not $#"
SEEDS=${1:-${SEEDS:-1 2 3}}
STEPS=${2:-${STEPS:-10}}
EVERY=${EVERY:-2}
ENGINES=${ENGINES:-rlpipe TRL}
TARGETS=${TARGETS:-0.9 0.95}
for v in STEPS EVERY; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || usage "$v must be a positive integer, not '${!v}'"; done
[[ -n ${SEEDS// /} ]] || usage "SEEDS: no seed"
for s in $SEEDS; do [[ $s =~ ^[0-9]+$ ]] || usage "SEEDS: non-negative integers, not '$s'"; done
[[ -n ${ENGINES// /} ]] || usage "ENGINES: rlpipe, TRL or both, not nothing"
for e in $ENGINES; do [[ $e == rlpipe || $e == TRL ]] || usage "ENGINES: rlpipe and/or TRL, not '$e'"; done
[[ -n ${TARGETS// /} ]] || usage "TARGETS: no success rate"
for t in $TARGETS; do [[ $t =~ ^(0(\.[0-9]+)?|1(\.0*)?)$ ]] || usage "TARGETS: success rates in [0, 1], not '$t'"; done
[[ -x $BIN/rl-sample ]] || die "$BIN/rl-sample not found (run: make all)"

AG=$root/experiments/agent
EXP_OUT=$AG/out
bench_start true
mk() { make -s -C "$AG" BIN="$BIN" ENVS=calc "$@" || die "make -C experiments/agent $* failed (its log: $EXP_OUT/log)"; }
echo "agent.sh: the model and the warm start (experiments/agent, made once)" >&2
mk "$EXP_OUT/.warm"
warm=$EXP_OUT/sft/$(cat "$EXP_OUT/sft/latest") || die "$EXP_OUT/sft/latest: unreadable"

for s in $SEEDS; do
    if [[ " $ENGINES " == *" rlpipe "* ]]; then
        echo "agent.sh: seed $s: rlpipe, $STEPS steps, then its evaluations" >&2
        rm -rf "$W/agent/rlpipe/calc-s$s" || die "cannot remove $W/agent/rlpipe/calc-s$s"
        mk SEEDS="$s" RL_STEPS="$STEPS" KEEP_EVERY="$EVERY" RUNS_DIR="$W/agent/rlpipe" "$W/agent/rlpipe/calc-s$s/.done"
        # the versions' AdamW state (1.1 GB of each 1.6) once they are evaluated
        find "$W/agent/rlpipe/calc-s$s/ckpt" -name optimizer.safetensors -delete || die "cannot remove the AdamW states"
    fi
    if [[ " $ENGINES " == *" TRL "* ]]; then
        echo "agent.sh: seed $s: TRL, $STEPS steps, then its evaluations" >&2
        run=$W/trl/calc-s$s
        TASK=calc MODEL=$warm BENCH_OUT=$W "$here/trl.sh" "$STEPS" "$s" "$EVERY" >"$ERR" 2>&1 ||
            { tail -n 20 "$ERR" >&2; die "seed $s: bench/trl.sh failed"; }
        mv "$ERR" "$run/trl.log" || die "cannot keep $run/trl.log"
        rm -f "$run/eval.jsonl"
        RLPIPE_BIN=$BIN python3 "$AG/evaluate.py" --max-turns 3 --max-new-tokens 48 --env "python3 -u $AG/calc_env.py" \
            "$EXP_OUT/data/calc/test.jsonl" "$run/eval.jsonl" "$run"/ckpt/v* || die "seed $s: TRL's evaluation failed"
    fi
done

"$PY" "$here/agent_report.py" --warm "$EXP_OUT/sft/calc.eval.jsonl" --init-version "${warm##*/v}" \
    --rlpipe "$W/agent/rlpipe" --trl "$W/trl" --seeds "$SEEDS" --targets "$TARGETS" >"$W/agent.txt" ||
    die "bench/agent_report.py failed"
cat "$W/agent.txt"
