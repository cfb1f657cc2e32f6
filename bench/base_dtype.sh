#!/usr/bin/env bash
# bench/base_dtype.sh MODEL PROMPTS -- the learner's own mismatch with a
# bf16 base (rl-learn --lora-rank R --base-dtype bf16): its log-probabilities
# against an f32 sampler's, as the k3 of --tis.
#
# rl-sample --dtype f32 draws N samples of each of the first P prompts of
# PROMPTS (temperature 0.7, 32 new tokens, seed 1); then one rl-learn step
# with LoRA (rank 16, alpha 32, all-linear, B = 0 at that step: the learner
# computes as its base) and --tis 2 takes them, once with --base-dtype f32
# and once with bf16. Its metrics' k3 is mean(ρ − 1 − log ρ) over the
# completion tokens, ρ = π_learner / μ_sampler, the learner's π from the
# forward of that step: with an f32 base the sampler's and the learner's
# products differ only in their order of sums; with bf16 the base's matrices
# are rounded (the activations stay f32).
#
# Environment: N (samples a prompt, default 8), P (prompts, default 32),
# BENCH_OUT, BIN (as the Makefile). Results: the lines on stdout and in
# BENCH_OUT/base_dtype.txt.
set -uo pipefail

NAME=base_dtype
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
settings_help "$@"
MODEL=${1:-} PROMPTS=${2:-}
[[ -n $MODEL && -n $PROMPTS ]] || die "usage: bench/base_dtype.sh MODEL PROMPTS.jsonl"
N=${N:-8} P=${P:-32}
positive N P
bench_start true

head -n "$P" "$PROMPTS" >"$W/base_dtype.prompts.jsonl"
"$BIN/rl-sample" --model "$MODEL" --dtype f32 -n "$N" --temperature 0.7 --max-new-tokens 32 --seed 1 \
    "$W/base_dtype.prompts.jsonl" >"$W/base_dtype.rlr" 2>"$ERR" || die "rl-sample failed: $(tail -n 3 "$ERR")"
{
    echo "rlpipe $("$BIN/rl-learn" --version 2>&1 | head -n1); $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1); $(date -u +%Y-%m-%d)"
    echo "model $MODEL, $P prompts x $N samples from an f32 sampler; one rl-learn --tis 2 step, LoRA r 16 (B = 0)"
    for bd in f32 bf16; do
        rm -rf "$W/base_dtype.ckpt"
        "$BIN/rl-learn" --init "$MODEL" --out "$W/base_dtype.ckpt" --lora-rank 16 --lora-alpha 32 --base-dtype "$bd" \
            --tis 2 --batch $((N * P)) --max-steps 1 --metrics "$W/base_dtype.$bd.jsonl" -q "$W/base_dtype.rlr" \
            2>"$ERR" || die "rl-learn --base-dtype $bd failed: $(tail -n 3 "$ERR")"
        "$PY" -c 'import json, sys; m = json.loads(open(sys.argv[1]).readline())
print("--base-dtype %-4s: k3 %.3g over %d tokens, capped %.3g" % (sys.argv[2], m["k3"], m["tokens"], m["capped"]))' \
            "$W/base_dtype.$bd.jsonl" "$bd"
    done
} | tee "$W/base_dtype.txt"
rm -rf "$W/base_dtype.ckpt"
