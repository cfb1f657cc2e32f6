#!/usr/bin/env bash
# bench/accuracy.sh [SEEDS [STEPS [TRL_STEPS]]] -- the time to a held-out
# accuracy: rlpipe in flight, rlpipe --sync and TRL's GRPOTrainer on the same
# task, model and machine, one seed after another (defaults: "1 2 3", 12
# rlpipe steps, 6 TRL steps).
#
# The task and settings are bench/step.sh's and bench/trl.sh's
# (experiments/smollm2: SmolLM2-135M-Instruct, add2 questions, GRPO 8 prompts
# x 8 samples a step, <= 32 new tokens at temperature 0.7, lr 1e-5): rlpipe
# through experiments/lib/rl-run.sh (bf16 sampler, TIS C = 2, the groups of
# equal rewards unscored (rl-ratio --skip-uniform), --max-lag 2 or
# --sync), TRL through bench/trl.sh with its own defaults (LOSS, default trl;
# see bench/trl.sh). TRL trains on the questions of rlpipe's --sync run of the
# same seed, in the order its learner took them (QUESTIONS=rlpipe, the
# default; bench/trl.sh's PROMPTS, TRL's shuffle off; TRL_STEPS <= STEPS),
# so that the engines' runs differ in their samples, not in their questions;
# QUESTIONS=own lets TRL shuffle them with its own generator. Every EVERY-th
# rlpipe version (default 2) and every TRL version are evaluated: greedy
# held-out accuracy on the 200 test questions, f32, completions of up to
# EVAL_MAX_NEW tokens (default 48), by experiments/lib/eval.sh (rl-sample
# --temperature 0, the number verifier; its completions of the base model are
# those of bench/eval_hf.py, transformers' greedy generation, every one). The
# versions are removed once evaluated (1.6 GB each).
#
# Time is each trainer's own clock of its run: rl-learn's `elapsed` (from its
# start, the pipeline's filling and every checkpoint write included) and
# TRL's `elapsed_s` (from the first step, its saves included, its model load
# not). Run on a quiet machine: the times are wall times.
#
# TIS=C: rlpipe without the scorer, the learner weighing the tokens from its
# own forward (rl-run.sh --tis C, rl-learn --tis C) instead of rl-ratio.
#
# Environment: TARGET (default 0.5): the accuracy whose time is compared; TIS;
# EVERY; EVAL_MAX_NEW; QUESTIONS; LOSS (TRL's, as bench/trl.sh); BENCH_OUT,
# BUILD, BIN (as the Makefile). Results: the table on stdout and in BENCH_OUT/accuracy.txt, the
# evaluations in BENCH_OUT/accuracy/acc.jsonl, the runs' metrics under
# BENCH_OUT/accuracy/. Takes about 22 minutes a seed on 2 cores.
set -uo pipefail

NAME=accuracy
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SEEDS=${1:-1 2 3}
STEPS=${2:-12}
TRL_STEPS=${3:-6}
EVERY=${EVERY:-2}
TARGET=${TARGET:-0.5}
EVAL_MAX_NEW=${EVAL_MAX_NEW:-48}
QUESTIONS=${QUESTIONS:-rlpipe}
TIS=${TIS:-}
weigh=(--ratio "--clip 2 --skip-uniform") weighs="rl-ratio --clip 2 --skip-uniform"
[[ -z $TIS ]] || weigh=(--tis "$TIS") weighs="no rl-ratio: rl-learn --tis $TIS"
[[ $QUESTIONS == rlpipe || $QUESTIONS == own ]] || die "QUESTIONS: rlpipe or own, not '$QUESTIONS'"
positive STEPS TRL_STEPS EVERY EVAL_MAX_NEW
[[ $QUESTIONS == own ]] || ((TRL_STEPS <= STEPS)) ||
    die "TRL_STEPS ($TRL_STEPS) > STEPS ($STEPS): TRL would run out of rlpipe's questions (or QUESTIONS=own)"
for s in $SEEDS; do [[ $s =~ ^[0-9]+$ ]] || die "SEEDS: non-negative integers, not '$s'"; done
[[ -x $BIN/rl-learn ]] || die "$BIN/rl-learn not found (run: make all)"
MODEL=$root/experiments/smollm2/out/model
DATA=$root/experiments/smollm2/out/data
[[ -f $MODEL/config.json && -f $DATA/test.jsonl ]] ||
    die "$MODEL or $DATA/test.jsonl missing (make -C experiments/smollm2 out/.base-eval makes them)"
bench_start :
D=$W/accuracy
mkdir -p "$D" || die "cannot create $D"
ACC=$D/acc.jsonl
: >"$ACC"

# evaluate ENGINE SEED RUN_METRICS VERSION_DIR...: one line a version into $ACC.
evaluate() {
    local engine=$1 seed=$2 metrics=$3 v
    shift 3
    for v; do
        RLPIPE_BIN=$BIN MAX_NEW=$EVAL_MAX_NEW "$root/experiments/lib/eval.sh" "$DATA/test.jsonl" "$D/eval.tmp" "$v" >"$ERR" 2>&1 ||
            { cat "$ERR" >&2; die "eval.sh $v failed"; }
        "$PY" - "$engine" "$seed" "$metrics" "$v" "$D/eval.tmp" >>"$ACC" <<'EOF' || die "reading $v's evaluation failed"
import json, os, re, sys
engine, seed, metrics, v, ev = sys.argv[1:]
m = re.search(r"/v(\d+)$", v.rstrip("/"))
step = int(m.group(1)) if m else 0   # a model directory: the model before training
acc = json.loads(open(ev).read().splitlines()[-1])["accuracy"]
t = 0.0
for line in open(metrics):
    m = json.loads(line)
    if m["step"] == step:
        t = m.get("elapsed", m.get("elapsed_s"))
print(json.dumps({"engine": engine, "seed": int(seed), "step": step, "elapsed_s": t, "accuracy": acc}))
EOF
        rm -f "$D/eval.tmp"
    done
}

# questions ROLLOUTS OUT: the questions of the records a learner trained on
# (its STEPS batches of 64: the stream is cut where the pipeline stopped), a
# line each (messages and answer) in the order it took their groups.
questions() {
    "$BIN/rl-cat" --json --head $((STEPS * 64)) "$1" | "$PY" -c '
import json, sys
seen = set()
for line in sys.stdin:
    r = json.loads(line)
    if r["group"] not in seen:
        seen.add(r["group"])
        print(json.dumps({"messages": r["messages"], "answer": r["answer"]}))
' >"$2"
}

for seed in $SEEDS; do
    for mode in inflight sync; do
        case $mode in inflight) lag=(--max-lag 2) ;; sync) lag=(--sync) ;; esac
        run=$D/$mode-s$seed
        rm -rf "$run"
        echo "accuracy.sh: seed $seed, rlpipe $mode, $STEPS steps ..." >&2
        RLPIPE_BIN=$BIN "$root/experiments/lib/rl-run.sh" --init "$MODEL" --prompts "$DATA/train.jsonl" --out "$run" \
            --dtype bf16 --group 8 --batch 64 --steps "$STEPS" --lr 1e-5 "${weigh[@]}" "${lag[@]}" \
            --temperature 0.7 --max-new-tokens 32 --keep-every "$EVERY" --seed "$seed" >"$ERR" 2>&1 ||
            { cat "$ERR" >&2; die "the rlpipe $mode run, seed $seed, failed"; }
        evaluate "rlpipe $mode" "$seed" "$run/learn.jsonl" "$run"/ckpt/v[0-9]*
        if [[ $mode == sync && $QUESTIONS == rlpipe ]]; then
            questions "$run/rollouts.rlr" "$D/questions-s$seed.jsonl" || die "reading $run/rollouts.rlr's questions failed"
        fi
        rm -rf "$run/ckpt" "$run/rollouts.rlr"
    done
    echo "accuracy.sh: seed $seed, TRL, $TRL_STEPS steps ..." >&2
    prompts=()
    [[ $QUESTIONS == rlpipe ]] && prompts=(PROMPTS="$D/questions-s$seed.jsonl")
    env "${prompts[@]}" BENCH_OUT="$D" "$here/trl.sh" "$TRL_STEPS" "$seed" 1 >"$ERR" 2>&1 ||
        { cat "$ERR" >&2; die "the TRL run, seed $seed, failed"; }
    evaluate "TRL" "$seed" "$D/trl/s$seed/train.jsonl" "$MODEL" "$D/trl/s$seed"/ckpt/v[0-9]*
    rm -rf "$D/trl/s$seed/ckpt" "$D/trl/s$seed/trainer"
done

{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    echo "rlpipe time-to-accuracy benchmark: $("$BIN"/rl-learn --version 2>&1 | head -n1), $weighs; TRL ${LOSS:-trl} loss"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores; $(date -u +%Y-%m-%d); load average at start: $LOAD0, at end: $(loadavg)"
    "$PY" - "$ACC" "$TARGET" "$EVAL_MAX_NEW" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
target = float(sys.argv[2])
engines = list(dict.fromkeys(r["engine"] for r in rows))
seeds = sorted({r["seed"] for r in rows})
print(f"\nheld-out accuracy (greedy, 200 questions, up to {sys.argv[3]} new tokens) at each evaluated step, with the run's minute in brackets:\n")
for e in engines:
    print(f"{e}:")
    for s in seeds:
        rs = sorted((r for r in rows if r["engine"] == e and r["seed"] == s), key=lambda r: r["step"])
        print(f"  seed {s}: " + "  ".join(f"{r['step']}: {r['accuracy']:.3f} ({r['elapsed_s'] / 60:.1f})" for r in rs))
print(f"\ntime to a held-out accuracy of {target} (the first evaluated version at or above it), seconds:\n")
print("| engine | " + " | ".join(f"seed {s}" for s in seeds) + " | median | TRL's / this |")
print("|---|" + "---|" * (len(seeds) + 2))
reach = {}
for e in engines:
    for s in seeds:
        rs = sorted((r for r in rows if r["engine"] == e and r["seed"] == s), key=lambda r: r["step"])
        hit = next((r for r in rs if r["accuracy"] >= target), None)
        reach[e, s] = (hit["elapsed_s"], hit["step"]) if hit else None
for e in engines:
    cells, ratios = [], []
    for s in seeds:
        h = reach[e, s]
        cells.append(f"{h[0]:.0f} (step {h[1]})" if h else "not reached")
        t = reach.get(("TRL", s))
        if h and t: ratios.append(t[0] / h[0])
    times = [reach[e, s][0] for s in seeds if reach[e, s]]
    med = f"{statistics.median(times):.0f}" if len(times) == len(seeds) else "-"
    rat = f"{statistics.median(ratios):.2f}x (" + ", ".join(f"{x:.2f}" for x in ratios) + ")" if ratios else "-"
    print(f"| {e} | " + " | ".join(cells) + f" | {med} | {rat} |")
EOF
} | tee "$W/accuracy.txt"
