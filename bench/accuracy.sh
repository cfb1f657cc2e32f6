#!/usr/bin/env bash
# bench/accuracy.sh [SEEDS [STEPS]] -- the time to a held-out accuracy, from
# each trainer's process start: rlpipe against TRL's GRPOTrainer on the same
# task, model and machine, one seed after another (defaults: seeds "1 2 3";
# each run STEPS steps, default 30, or MINUTES minutes, default 15, whichever
# comes first). Takes about 40 minutes a seed with the defaults on 2 cores
# shared with other work (TRL's 15 minutes and more than one step, rlpipe's
# 30 steps, 5 to 17 minutes, and the evaluations, 40 s each, 10 to 15 a seed);
# MODES="inflight sync" adds the --sync run and its evaluations.
#
# The task and settings are bench/step.sh's and bench/trl.sh's
# (experiments/smollm2: SmolLM2-135M-Instruct, add2 questions, GRPO 8 prompts
# x 8 samples a step, <= 32 new tokens at temperature 0.7, lr 1e-5). rlpipe
# runs through experiments/lib/rl-run.sh with the recipe of the README for an
# instruct model: the sampler at DTYPE (default f32: a bf16 sampler rounds
# most of lr 1e-5's updates away), rl-ratio --clip 2 --skip-uniform (TIS=C:
# no rl-ratio, rl-learn --tis C weighs the tokens from its own forward), in
# flight with --max-lag 2 (MODES, default "inflight"; "inflight sync" adds a
# --sync run, "sync" runs that alone). TRL runs through bench/trl.sh with its
# own defaults (LOSS, default trl; see bench/trl.sh) and takes its questions
# in its own order, its shuffle seeded with the seed, as its users run it
# (QUESTIONS=own, the default). QUESTIONS=rlpipe makes TRL train on the
# questions of the seed's rlpipe run (its --sync one when MODES has it), in
# the order its learner took them (bench/trl.sh's PROMPTS, TRL's shuffle
# off): runs that differ in their samples, not in their questions.
#
# Time is seconds from each trainer's process start: rl-learn's `elapsed`
# (its clock starts when its main begins, before its model load;
# rl-run.sh starts it with the sampler and the scorer, so the pipeline's
# filling and every checkpoint write are counted) and TRL's `elapsed_s`
# (bench/trl.sh starts the clock just before it launches Python: the
# imports, the model load, TRL's set-up and its checkpoint writes are
# counted). A version's time is when its checkpoint is on the disk. TRL stops
# at the end of the first step that ends after MINUTES (its last step is
# kept); rl-learn has no time limit: an rlpipe run still going at MINUTES
# runs its STEPS and is marked "over the limit" in the table of runs. Run on
# a quiet machine: the times are wall times.
#
# Evaluated: every EVERY-th rlpipe version (default 5) and its last, every
# TRL_EVERY-th TRL version (default 2) and its last, and the base model once
# (step 0 of every run, at 0 s): greedy held-out accuracy on the 200 test
# questions, f32, completions of up to EVAL_MAX_NEW tokens (default 48), by
# experiments/lib/eval.sh (rl-sample --temperature 0, the number verifier;
# its completions of the base model are those of bench/eval_hf.py,
# transformers' greedy generation, every one). The versions are removed once
# evaluated (rlpipe's 1.6 GB each with AdamW's state, TRL's 0.5 GB).
#
# The report, on stdout and in BENCH_OUT/accuracy.txt: the runs (steps, time,
# which limit ended them, time to the first step, seconds a step); each
# run's accuracy at every evaluated step with its minute; and for each of
# TARGETS (default "0.4 0.5 0.6") the seconds to the first evaluated version
# at or above it per seed ("not reached"), their median when every seed
# reached it, and TRL's time over rlpipe's per seed (a bound, "> x" or
# "< x", when only one of them reached it) with its median when every seed
# has one. Every run is reported. The evaluations are in BENCH_OUT/accuracy/acc.jsonl, a line per
# run in BENCH_OUT/accuracy/runs.jsonl, the runs' metrics under
# BENCH_OUT/accuracy/.
#
# ENGINES="rlpipe" (or "TRL") runs that engine alone (default "rlpipe TRL"):
# a run made again, the other's left as it was measured.
#
# Environment: SEEDS and STEPS (the arguments' defaults), MINUTES, ENGINES, MODES,
# DTYPE, TIS, EVERY, TRL_EVERY, TARGETS, EVAL_MAX_NEW, QUESTIONS, LOSS;
# MODEL and DATA (default experiments/smollm2/out/model and .../data: make
# -C experiments/smollm2 out/.base-eval makes them); BENCH_OUT (default
# bench/out), BUILD, BIN (as the Makefile), PYTHON (lib.sh). TRL's virtual
# environment is made by bench/trl.sh on first use (several GB, minutes).
# Bad arguments or settings: a message and exit 2.
set -uo pipefail

NAME=accuracy USAGE_ARGS="[SEEDS [STEPS]]"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
usage() { settings_usage "$@"; }
settings_help "$@"
(($# <= 2)) || usage "at most 2 arguments (SEEDS, STEPS), not $#: TRL's steps are STEPS too"
SEEDS=${1:-${SEEDS:-1 2 3}}
STEPS=${2:-${STEPS:-30}}
MINUTES=${MINUTES:-15}
MODES=${MODES:-inflight}
ENGINES=${ENGINES:-rlpipe TRL}
DTYPE=${DTYPE:-f32}
TIS=${TIS:-}
EVERY=${EVERY:-5}
TRL_EVERY=${TRL_EVERY:-2}
TARGETS=${TARGETS:-0.4 0.5 0.6}
EVAL_MAX_NEW=${EVAL_MAX_NEW:-48}
QUESTIONS=${QUESTIONS:-own}
MODEL=${MODEL:-$root/experiments/smollm2/out/model}
DATA=${DATA:-$root/experiments/smollm2/out/data}
for v in STEPS MINUTES EVERY TRL_EVERY EVAL_MAX_NEW; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || usage "$v must be a positive integer, not '${!v}'"
done
[[ -n ${SEEDS// /} ]] || usage "SEEDS: no seed"
for s in $SEEDS; do [[ $s =~ ^[0-9]+$ ]] || usage "SEEDS: non-negative integers, not '$s'"; done
[[ -n ${MODES// /} ]] || usage "MODES: inflight, sync or both, not nothing"
for m in $MODES; do [[ $m == inflight || $m == sync ]] || usage "MODES: inflight and/or sync, not '$m'"; done
[[ -n ${ENGINES// /} ]] || usage "ENGINES: rlpipe, TRL or both, not nothing"
for e in $ENGINES; do [[ $e == rlpipe || $e == TRL ]] || usage "ENGINES: rlpipe and/or TRL, not '$e'"; done
[[ $QUESTIONS == own || " $ENGINES " == *" rlpipe "* ]] || usage "QUESTIONS=rlpipe takes the questions of an rlpipe run: ENGINES must hold rlpipe"
for t in $TARGETS; do [[ $t =~ ^(0(\.[0-9]+)?|1(\.0*)?)$ ]] || usage "TARGETS: accuracies in [0, 1], not '$t'"; done
[[ -n ${TARGETS// /} ]] || usage "TARGETS: no accuracy"
[[ $QUESTIONS == own || $QUESTIONS == rlpipe ]] || usage "QUESTIONS: own or rlpipe, not '$QUESTIONS'"
[[ -z $TIS || $TIS =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage "TIS: a number (the cap C), not '$TIS'"
case ${LOSS:-trl} in trl | rlpipe) ;; *) usage "LOSS: trl or rlpipe, not '$LOSS'" ;; esac
weigh=(--ratio "--clip 2 --skip-uniform") weighs="rl-ratio --clip 2 --skip-uniform"
[[ -z $TIS ]] || weigh=(--tis "$TIS") weighs="no rl-ratio: rl-learn --tis $TIS"
qmode=sync   # the run whose questions TRL takes with QUESTIONS=rlpipe
[[ " $MODES " == *" sync "* ]] || qmode=inflight
[[ -x $BIN/rl-learn ]] || die "$BIN/rl-learn not found (run: make all)"
[[ -f $MODEL/config.json && -f $DATA/test.jsonl && -f $DATA/train.jsonl ]] ||
    die "$MODEL/config.json, $DATA/test.jsonl or $DATA/train.jsonl missing (make -C experiments/smollm2 out/.base-eval makes them; or set MODEL and DATA)"
D=$W/accuracy
clean() { rm -f "$D/eval.tmp" "$D/evals.tmp"; }
bench_start clean
mkdir -p "$D" || die "cannot create $D"
ACC=$D/acc.jsonl RUNS=$D/runs.jsonl
: >"$ACC"
: >"$RUNS"
now() { date +%s.%N; }

# evaluate VERSION_DIR... : the accuracy of each, a line each on stdout:
# {"step", "accuracy", "eval_s"} (step from the name vNNNNNN; 0 otherwise).
evaluate() {
    local v t0
    for v; do
        t0=$(now)
        rm -f "$D/eval.tmp"
        RLPIPE_BIN=$BIN MAX_NEW=$EVAL_MAX_NEW "$root/experiments/lib/eval.sh" "$DATA/test.jsonl" "$D/eval.tmp" "$v" >"$ERR" 2>&1 ||
            { cat "$ERR" >&2; die "eval.sh $v failed"; }
        "$PY" - "$v" "$D/eval.tmp" "$t0" "$(now)" <<'EOF' || die "reading $v's evaluation failed"
import json, re, sys
v, ev, t0, t1 = sys.argv[1:]
m = re.search(r"/v(\d+)$", v.rstrip("/"))
acc = json.loads(open(ev).read().splitlines()[-1])["accuracy"]
print(json.dumps({"step": int(m.group(1)) if m else 0, "accuracy": acc, "eval_s": round(float(t1) - float(t0), 1)}))
EOF
    done
    rm -f "$D/eval.tmp"
}

# record ENGINE SEED METRICS WALL_S EVALS [RUN_JSON]: the run's evaluations
# (EVALS, evaluate's lines) into $ACC, each with the time of its version from METRICS
# (rl-learn's `elapsed` or TRL's `elapsed_s`), the base model's as step 0 at
# 0 s, and a line into $RUNS: steps done, the last one's time, the first
# one's, the median seconds between steps, which limit ended the run.
record() {
    "$PY" - "$@" "$MINUTES" "$ACC" "$RUNS" "$D/base.json" <<'EOF' || die "reading the metrics of $1, seed $2, failed"
import json, statistics, sys
engine, seed, metrics, wall, evals, *rest = sys.argv[1:]
run_json, (minutes, acc_path, runs_path, base_path) = (rest[0] if len(rest) == 5 else None), rest[-4:]
steps = [json.loads(l) for l in open(metrics)]
t = {m["step"]: m.get("elapsed", m.get("elapsed_s")) for m in steps}
assert steps, f"{metrics}: no step"
base = json.load(open(base_path))
with open(acc_path, "a") as f:
    for e in [base] + [json.loads(l) for l in open(evals)]:
        if e["step"] != 0 and e["step"] not in t:
            sys.exit(f"{metrics}: no step {e['step']}")
        f.write(json.dumps({"engine": engine, "seed": int(seed), "step": e["step"], "elapsed_s": t.get(e["step"], 0.0),
                            "accuracy": e["accuracy"], "eval_s": e["eval_s"]}) + "\n")
last, times = steps[-1], [t[k] for k in sorted(t)]
run = json.load(open(run_json)) if run_json else {}
stopped = run.get("stopped", "steps")
if stopped == "steps" and t[last["step"]] > 60 * float(minutes):
    stopped = "over"
rec = {"engine": engine, "seed": int(seed), "steps": last["step"], "elapsed_s": t[last["step"]], "first_s": times[0],
       "step_s": round(statistics.median(b - a for a, b in zip(times, times[1:])), 2) if len(times) > 1 else None,
       "start_s": run.get("start_s"), "wall_s": round(float(wall), 2), "stopped": stopped}
for k in ("trl", "transformers", "torch"):
    if k in run:
        rec[k] = run[k]
open(runs_path, "a").write(json.dumps(rec) + "\n")
EOF
}

# questions ROLLOUTS OUT: the questions of the records a learner trained on
# (its STEPS batches of 64: the stream is cut where the pipeline stopped), a
# line each (messages and answer) in the order it took their groups.
questions() {
    "$BIN/rl-cat" -q --json --head $((STEPS * 64)) "$1" | "$PY" -c '
import json, sys
seen = set()
for line in sys.stdin:
    r = json.loads(line)
    if r["group"] not in seen:
        seen.add(r["group"])
        print(json.dumps({"messages": r["messages"], "answer": r["answer"]}))
' >"$2"
}

echo "accuracy.sh: the base model ..." >&2
evaluate "$MODEL" >"$D/base.json"
for seed in $SEEDS; do
    modes=$MODES
    [[ " $ENGINES " == *" rlpipe "* ]] || modes=
    for mode in $modes; do
        case $mode in inflight) lag=(--max-lag 2) engine="rlpipe in flight" ;; sync) lag=(--sync) engine="rlpipe --sync" ;; esac
        run=$D/$mode-s$seed
        rm -rf "$run"
        echo "accuracy.sh: seed $seed, $engine, $STEPS steps ..." >&2
        t0=$(now)
        RLPIPE_BIN=$BIN "$root/experiments/lib/rl-run.sh" --init "$MODEL" --prompts "$DATA/train.jsonl" --out "$run" \
            --dtype "$DTYPE" --group 8 --batch 64 --steps "$STEPS" --lr 1e-5 "${weigh[@]}" "${lag[@]}" \
            --temperature 0.7 --max-new-tokens 32 --keep-every "$EVERY" --seed "$seed" >"$ERR" 2>&1 ||
            { cat "$ERR" >&2; die "the $engine run, seed $seed, failed"; }
        wall=$(awk "BEGIN { print $(now) - $t0 }")
        versions=()
        for v in "$run"/ckpt/v[0-9]*; do [[ $v == */v000000 ]] || versions+=("$v"); done   # v000000: the base model
        evaluate "${versions[@]}" >"$D/evals.tmp"
        record "$engine" "$seed" "$run/learn.jsonl" "$wall" "$D/evals.tmp"
        if [[ $QUESTIONS == rlpipe && $mode == "$qmode" ]]; then
            questions "$run/rollouts.rlr" "$D/questions-s$seed.jsonl" || die "reading $run/rollouts.rlr's questions failed"
        fi
        rm -rf "$run/ckpt" "$run/rollouts.rlr"
    done
    [[ " $ENGINES " == *" TRL "* ]] || continue
    echo "accuracy.sh: seed $seed, TRL, $STEPS steps or $MINUTES minutes ..." >&2
    prompts=()
    [[ $QUESTIONS == rlpipe ]] && prompts=(PROMPTS="$D/questions-s$seed.jsonl")
    t0=$(now)
    env "${prompts[@]}" MODEL="$MODEL" DATA="$DATA" MINUTES="$MINUTES" LOSS="${LOSS:-trl}" BENCH_OUT="$D" \
        "$here/trl.sh" "$STEPS" "$seed" "$TRL_EVERY" >"$ERR" 2>&1 ||
        { cat "$ERR" >&2; die "the TRL run, seed $seed, failed"; }
    wall=$(awk "BEGIN { print $(now) - $t0 }")
    trl=$D/trl/s$seed
    evaluate "$trl"/ckpt/v[0-9]* >"$D/evals.tmp"
    record TRL "$seed" "$trl/train.jsonl" "$wall" "$D/evals.tmp" "$trl/run.json"
    rm -rf "$trl/ckpt" "$trl/trainer"
done

{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
    git -C "$root" diff --quiet HEAD -- 2>/dev/null || commit+=" with uncommitted changes"
    echo "rlpipe time-to-accuracy benchmark: rlpipe $commit, $("$BIN"/rl-learn --version 2>&1 | head -n1); sampler $DTYPE, $weighs; TRL ${LOSS:-trl} loss; questions: $QUESTIONS"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC'); load average at start: $LOAD0, at end: $(loadavg)"
    "$PY" - "$ACC" "$RUNS" "$EVAL_MAX_NEW" "$STEPS" "$MINUTES" $TARGETS <<'EOF'
import json, statistics, sys
acc_path, runs_path, max_new, steps, minutes, *targets = sys.argv[1:]
rows = [json.loads(l) for l in open(acc_path)]
runs = [json.loads(l) for l in open(runs_path)]
engines = list(dict.fromkeys(r["engine"] for r in runs))
seeds = list(dict.fromkeys(r["seed"] for r in runs))
run = {(r["engine"], r["seed"]): r for r in runs}
trl = next((r for r in runs if "trl" in r), None)
if trl:
    print(f"TRL {trl['trl']}, transformers {trl['transformers']}, torch {trl['torch']}")
print(f"\neach run: {steps} step{'s' * (steps != '1')} or {minutes} minute{'s' * (minutes != '1')} from its process's start, whichever comes first "
      "(rl-learn has no time limit: an rlpipe run past it is marked over the limit)\n")
print("| engine | seed | steps | minutes | ended by | first step done, s | s a step (median) |")
print("|---|---|---|---|---|---|---|")
end = {"steps": "its steps", "minutes": f"TRL's {minutes}-minute limit", "over": f"its steps, over the {minutes}-minute limit"}
for r in runs:
    first = f"{r['first_s']:.0f}" + (f" (start-up {r['start_s']:.0f})" if r.get("start_s") is not None else "")
    step_s = f"{r['step_s']:.1f}" if r["step_s"] is not None else "-"
    print(f"| {r['engine']} | {r['seed']} | {r['steps']} | {r['elapsed_s'] / 60:.1f} | {end[r['stopped']]} | {first} | {step_s} |")
ev = [r["eval_s"] for r in rows if r["step"]]
if ev:
    print(f"\nan evaluation took {statistics.median(ev):.0f} s (median of {len(ev)})")

print(f"\nheld-out accuracy (greedy, 200 questions, up to {max_new} new tokens) at each evaluated step, "
      "with the minute from the process's start in brackets:\n")
for e in engines:
    print(f"{e}:")
    for s in seeds:
        rs = sorted((r for r in rows if r["engine"] == e and r["seed"] == s), key=lambda r: r["step"])
        print(f"  seed {s}: " + "  ".join(f"{r['step']}: {r['accuracy']:.3f} ({r['elapsed_s'] / 60:.1f})" for r in rs))


def reach(e, s, target):
    """(seconds, step) of the first evaluated version at or above target, or None."""
    rs = sorted((r for r in rows if r["engine"] == e and r["seed"] == s), key=lambda r: r["step"])
    hit = next((r for r in rs if r["accuracy"] >= target), None)
    return (hit["elapsed_s"], hit["step"]) if hit else None


def ratio(e, s, target):
    """TRL's time over e's: (text, value or None); a bound when only one reached it."""
    h, t = reach(e, s, target), reach("TRL", s, target)
    if h and t:
        return f"{t[0] / h[0]:.2f}", t[0] / h[0]
    if h:   # TRL's time is past the end of its run
        return f"> {run['TRL', s]['elapsed_s'] / h[0]:.2f}", None
    if t:
        return f"< {t[0] / run[e, s]['elapsed_s']:.2f}", None
    return "-", None


print("\ntime to a held-out accuracy (the first evaluated version at or above it), seconds from the process's start, "
      "the step in brackets; TRL's time over rlpipe's, per seed and its median:\n")
print("| target | engine | " + " | ".join(f"seed {s}" for s in seeds) + " | median | TRL's time / this, per seed | its median |")
print("|---|---|" + "---|" * (len(seeds) + 3))
for target in targets:
    for e in engines:
        hits = [reach(e, s, float(target)) for s in seeds]
        cells = [f"{h[0]:.0f} ({h[1]})" if h else "not reached" for h in hits]
        med = f"{statistics.median(h[0] for h in hits):.0f}" if all(hits) else "-"
        rat, rmed = "", ""
        if e != "TRL" and "TRL" in engines:
            rs = [ratio(e, s, float(target)) for s in seeds]
            rat = ", ".join(r[0] for r in rs)
            rmed = f"**{statistics.median(r[1] for r in rs):.2f}x**" if all(r[1] for r in rs) else "-"
        print(f"| {target} | {e} | " + " | ".join(cells) + f" | {med} | {rat} | {rmed} |")
EOF
} | tee "$W/accuracy.txt"
