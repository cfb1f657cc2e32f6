#!/bin/bash
# rl-run.sh — one RL run as the shell pipeline rlpipe is made for:
#
#   rl-sample --listen S | rl-ratio --listen R | tee rollouts.rlr | rl-learn --out ckpt/
#   rl-sync --watch ckpt/ --to S --to R          (every new version pushed in flight)
#
# or, with --tis C, the learner weighing the tokens itself from its own
# forward (rl-learn --tis C) and no scorer:
#
#   rl-sample --listen S | tee rollouts.rlr | rl-learn --tis C --out ckpt/
#   rl-sync --watch ckpt/ --to S
#
# Usage: rl-run.sh --init DIR --prompts FILE --out RUN [OPTION]...
#   --dtype T          sampler precision (default bf16)
#   --head H           the sampler's output layer: dtype (default: as --dtype) or f32
#   --group G          samples per prompt (default 8)
#   --batch N          records per learner step (default 128)
#   --steps N          learner steps (default 300)
#   --lr X             learning rate (default 1e-4)
#   --max-lag K        in-flight, lag bounded by K (default 2); --sync: the baseline
#   --ratio "ARGS"     rl-ratio's weighting options (default "--clip 2")
#   --tis C            no rl-ratio: rl-learn --tis C weighs the tokens (its place in
#                      the pipe and in run.json's exit statuses is taken by cat)
#   --sample "ARGS"    more options of rl-sample (e.g. "--drop-uniform --top-p 0.95")
#   --learn "ARGS"     more options of rl-learn: the loss and its terms (e.g.
#                      "--loss cispo --norm tokens"; default: rl-learn's, pg)
#   --seed S           sampler and learner seed (default 1)
#   --keep-every E     versions kept for evaluation (default 25; N with --eval-every N)
#   --state-every N    versions with AdamW's state, for a resume (default: E's;
#                      the others hold the weights alone: rl-learn --state-every)
#   --save-dtype D     the weights of each version in f32 (default) or bf16 (what a
#                      bf16 sampler loads, half the bytes to write; AdamW's state
#                      keeps the f32 weights: rl-learn --save-dtype)
#   --max-new-tokens N (default 48)
#   --temperature T    the sampler's (default 1)
#   --env CMD          multi-turn rollouts with the environment CMD (rl-sample --env;
#                      it gives the rewards)
#   --max-turns N      with --env: assistant turns per rollout at most (default 4)
#   --samplers K       K samplers (default 1), each with --batch N/K and its own
#                      seed (S, S+1000, ...: its own order of the prompts), merged by
#                      rl-cat --merge --round (N/K)/G, so that --max-lag stays exact
#   --ranks R          the learner as R data-parallel ranks: mpirun -np R rl-learn
#   --eval FILE        held-out prompts to evaluate versions on while the run goes
#   --eval-every N     ... every version that is a multiple of N (with --eval;
#                      --keep-every defaults to N then, and must divide it, so
#                      that rl-learn keeps every version evaluated), and the last
#   --tensorboard DIR  learn.jsonl, ratio.jsonl and eval.jsonl as TensorBoard
#                      runs DIR/learn, DIR/ratio, DIR/eval, live (lib/tb.py, with
#                      $PYTHON, default python3, which needs the tensorboard package)
#
# The evaluator (--eval-every) runs beside the pipeline, under nice 19: each
# version that is a multiple of N, as soon as rl-learn has published it and
# written its metrics line, goes through lib/eval.sh (EVAL_GROUP,
# EVAL_TEMPERATURE, EVAL_DTYPE, EVAL_PASS_AT, MAX_NEW as there), one at a
# time, and so does the run's last version once the learner has ended. Each
# evaluation appends eval.sh's line to RUN/eval.jsonl with, besides:
# "wall_s", seconds from the run's start until the version was published;
# "time", that moment in Unix seconds; "learner_samples", the records the
# learner had trained on up to that version (learn.jsonl's "samples" over
# the steps up to it, a batch's epochs counted once). rl-run.sh waits for the
# evaluator before it ends; its log is log/eval.log.
#
# RUN receives: ckpt/ (rl-learn's checkpoints), learn.jsonl and ratio.jsonl (not with --tis)
# (metrics), sample.jsonl (a line per version the sampler installed: how much of
# each update survived its precision; sample1.jsonl ... with several samplers), rollouts.rlr (the records the learner trained on, for replay and
# lag statistics), log/{sample,ratio,learn,sync}.log (with several samplers
# log/sample1.log ... and log/merge.log; log/eval.log and log/tb.log with
# --eval-every and --tensorboard), eval.jsonl with --eval-every, and run.json (wall
# time, exit statuses, the options, the machine). The run ends when rl-learn has taken --steps steps:
# rl-ratio and rl-sample then end by SIGPIPE (status 141), or rl-sample by
# the SIGTERM sent it once rl-learn has exited and rl-ratio at the end of its
# input (status 0), and rl-sync once its receivers have gone: they could wait
# for the learner's weights and records for ever.
# Exit 0 when rl-learn and rl-sync exit 0 and the others 0 or 141.
set -u
BIN=${RLPIPE_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/bin}
init= prompts= out= dtype=bf16 head=dtype group=8 batch=128 steps=300 lr=1e-4 lag="--max-lag 2" ratio="--clip 2" seed=1
keep_every=25 state_every= max_new=48 temperature=1 samplers=1 ranks=1 tis= save_dtype=f32 env= max_turns=4
eval_file= eval_every= tb_dir= keep_every_set= sample_args= learn_args=
usage() { echo "usage: rl-run.sh --init DIR --prompts FILE --out RUN [--dtype T] [--head H] [--group G] [--batch N] [--steps N] [--lr X] [--max-lag K | --sync] [--ratio ARGS | --tis C] [--sample ARGS] [--learn ARGS] [--seed S] [--keep-every E] [--state-every N] [--save-dtype D] [--max-new-tokens N] [--temperature T] [--env CMD [--max-turns N]] [--eval FILE --eval-every N] [--tensorboard DIR]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --init) init=$2; shift ;;
    --prompts) prompts=$2; shift ;;
    --out) out=$2; shift ;;
    --dtype) dtype=$2; shift ;;
    --head) head=$2; shift ;;
    --group) group=$2; shift ;;
    --batch) batch=$2; shift ;;
    --steps) steps=$2; shift ;;
    --lr) lr=$2; shift ;;
    --max-lag) lag="--max-lag $2"; shift ;;
    --sync) lag="--sync" ;;
    --ratio) ratio=$2; shift ;;
    --tis) tis=$2; shift ;;
    --sample) sample_args=$2; shift ;;
    --learn) learn_args=$2; shift ;;
    --seed) seed=$2; shift ;;
    --keep-every) keep_every=$2; keep_every_set=1; shift ;;
    --state-every) state_every=$2; shift ;;
    --save-dtype) save_dtype=$2; shift ;;
    --max-new-tokens) max_new=$2; shift ;;
    --temperature) temperature=$2; shift ;;
    --env) env=$2; shift ;;
    --max-turns) max_turns=$2; shift ;;
    --samplers) samplers=$2; shift ;;
    --ranks) ranks=$2; shift ;;
    --eval) eval_file=$2; shift ;;
    --eval-every) eval_every=$2; shift ;;
    --tensorboard) tb_dir=$2; shift ;;
    *) usage ;;
    esac
    shift || usage
done
[ -n "$init" ] && [ -n "$prompts" ] && [ -n "$out" ] || usage
if [ -n "$eval_file$eval_every" ]; then
    case $eval_every in '' | 0* | *[!0-9]*)
        echo "rl-run.sh: --eval FILE and --eval-every N (N > 0) come together; got --eval-every '$eval_every'" >&2; exit 2 ;;
    esac
    [ -n "$eval_file" ] || { echo "rl-run.sh: --eval-every needs --eval FILE (the held-out prompts)" >&2; exit 2; }
    [ -r "$eval_file" ] || { echo "rl-run.sh: --eval $eval_file: cannot read it" >&2; exit 2; }
    [ -n "$keep_every_set" ] || keep_every=$eval_every
    if [ "$keep_every" = 0 ] || [ $((eval_every % keep_every)) != 0 ]; then
        echo "rl-run.sh: --eval-every $eval_every must be a multiple of --keep-every $keep_every: rl-learn keeps those versions alone" >&2
        exit 2
    fi
fi
state_every=${state_every:-$keep_every}
[ "$state_every" = 0 ] && state_every=1   # (--keep-every 0: the state in every version)
share=$((batch / samplers))
if [ "$samplers" -lt 1 ] || [ $((share * samplers)) != "$batch" ] || [ $((share % group)) != 0 ]; then
    echo "rl-run.sh: --batch $batch must split into --samplers $samplers shares of whole groups of $group" >&2
    exit 2
fi
# The learner: one process, or mpirun's ranks (one thread each; Open MPI
# wants these to run as root, and more ranks than cores).
learner=("$BIN/rl-learn")
if [ "$ranks" -gt 1 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    learner=(mpirun -np "$ranks" -x RLPIPE_THREADS=1 "$BIN/rl-learn")
fi

if [ -e "$out" ]; then rm -rf "$out" || exit 1; fi
mkdir -p "$out/log" || exit 1
log=$out/log
r_addr=unix:$out/ratio.sock
t0=$(date +%s.%N)
# The records the learner trained on up to version $1 (a batch's epochs
# once), and 1 when learn.jsonl has come to that version: "SEEN SAMPLES".
learned_by() {
    awk -v v="$1" '
        { ver = -1; ep = 1; n = 0
          if (match($0, /"version":[0-9]+/)) ver = substr($0, RSTART + 10, RLENGTH - 10) + 0
          if (match($0, /"epoch":[0-9]+/)) ep = substr($0, RSTART + 8, RLENGTH - 8) + 0
          if (match($0, /"samples":[0-9]+/)) n = substr($0, RSTART + 10, RLENGTH - 10) + 0
          if (ver >= v) seen = 1
          if (ver >= 0 && ver <= v && ep == 1) sum += n }
        END { printf "%d %d\n", seen, sum }' "$out/learn.jsonl" 2>/dev/null || echo "0 0"
}
# Evaluates version directory $1 (version $2) into eval.jsonl (see above).
evaluate() {
    local d=$1 v=$2 at line
    at=$(stat -c %.3Y "$d/state.json") || return 1   # written just before the version is published
    line=$("$(dirname "$0")/eval.sh" "$eval_file" /dev/stdout "$d") || return 1
    read -r _ seen <<<"$(learned_by "$v")"
    printf '%s, "wall_s": %s, "time": %s, "learner_samples": %s}\n' "${line%\}}" \
        "$(awk "BEGIN { printf \"%.3f\", $at - $t0 }")" "$at" "$seen" >>"$out/eval.jsonl"
}
# The evaluator: every published version that is a multiple of eval_every,
# once learn.jsonl has its line, then the last version; 1 if one failed.
evaluator() {
    local done_v=" " rc=0 ended d v name
    renice -n 19 -p $BASHPID >/dev/null   # (what it starts inherits it)
    while :; do
        ended=0
        [ -e "$out/pipe.status" ] && ended=1   # (read before the versions: none is missed)
        for d in "$out"/ckpt/v[0-9]*; do
            [ -d "$d" ] || continue
            v=$((10#${d##*/v}))
            [ $((v % eval_every)) = 0 ] || continue
            case $done_v in *" $v "*) continue ;; esac
            [ $ended = 1 ] || [ "$(learned_by "$v" | cut -d' ' -f1)" = 1 ] || continue
            evaluate "$d" "$v" || { echo "rl-run.sh: evaluating $d failed" >&2; rc=1; }
            done_v+="$v "
        done
        [ $ended = 1 ] && break
        kill -0 $$ 2>/dev/null || return 1   # (rl-run.sh killed)
        sleep 1
    done
    read -r name 2>/dev/null <"$out/ckpt/published"
    d=$out/ckpt/$name
    if [ -n "$name" ] && [ -d "$d" ]; then
        v=$((10#${d##*/v}))
        case $done_v in *" $v "*) ;; *) evaluate "$d" "$v" || { echo "rl-run.sh: evaluating $d failed" >&2; rc=1; } ;; esac
    fi
    return $rc
}
# sample I: the sampler of share I (1 .. K), its records on standard output
sample() {
    local i=$1 name=sample$1 multi=()
    [ "$samplers" = 1 ] && name=sample
    [ -n "$env" ] && multi=(--env "$env" --max-turns "$max_turns")
    "$BIN/rl-sample" --model "$init" -n "$group" --dtype "$dtype" --head "$head" --listen "unix:$out/$name.sock" "${multi[@]}" \
        --metrics "$out/$name.jsonl" $lag --batch "$share" \
        --max-new-tokens "$max_new" --temperature "$temperature" --epochs 0 --seed $((seed + 1000 * (i - 1))) $sample_args "$prompts" \
        2>"$log/$name.log"
}
# the records of every sampler, as one stream
rollouts() {
    if [ "$samplers" = 1 ]; then sample 1; return; fi
    local i fifos=()
    for i in $(seq "$samplers"); do
        mkfifo "$out/sample$i.fifo" || return 1
        fifos+=("$out/sample$i.fifo")
        sample "$i" >"$out/sample$i.fifo" &
    done
    "$BIN/rl-cat" --merge --round $((share / group)) "${fifos[@]}" 2>"$log/merge.log"
    local rc=$? src
    for i in $(seq "$samplers"); do wait -n; src=$?; case $src in 0 | 141) ;; *) rc=$src ;; esac; done
    return $rc
}
# the scorer: rl-ratio, or with --tis none (the learner weighs the tokens)
score() {
    if [ -n "$tis" ]; then cat; return; fi
    "$BIN/rl-ratio" --model "$init" --listen "$r_addr" --batch "$batch" $ratio --metrics "$out/ratio.jsonl" \
        2>"$log/ratio.log"
}
(
    rollouts |
        score |
        tee "$out/rollouts.rlr" |
        {
            "${learner[@]}" ${tis:+--tis "$tis"} --init "$init" --out "$out/ckpt" --batch "$batch" --lr "$lr" --max-steps "$steps" \
                --keep 1 --keep-every "$keep_every" --state-every "$state_every" --save-dtype "$save_dtype" --seed "$seed" --metrics "$out/learn.jsonl" $learn_args 2>"$log/learn.log"
            rc=$?
            # A learner that ended leaves the samplers waiting for its weights
            # (--sync, or at the lag bound) and the scorer waiting for records;
            # when what they wrote last fitted into the pipes' buffers, nothing
            # writes into the closed pipe, so no SIGPIPE ends them (a learner
            # that failed, or one that took its last steps while the next
            # batch came). Stop the samplers (SIGTERM: they close their
            # streams and exit 0, and rl-ratio then ends at its input's end),
            # and after a failure rl-ratio too; again while any is left (one
            # may have been starting).
            pat="--listen unix:$out/sample"
            [ $rc = 0 ] || pat="--listen unix:$out/"
            for _ in 1 2 3 4 5; do pkill -TERM -f -- "$pat" || break; sleep 1; done
            exit $rc
        }
    echo "${PIPESTATUS[*]}" >"$out/pipe.status"
) &
pipe=$!
evaluating=
if [ -n "$eval_every" ]; then
    evaluator 2>"$log/eval.log" &
    evaluating=$!
fi
tb=
if [ -n "$tb_dir" ]; then
    srcs=("learn=$out/learn.jsonl")
    [ -n "$tis" ] || srcs+=("ratio=$out/ratio.jsonl")
    [ -n "$eval_every" ] && srcs+=("eval=$out/eval.jsonl")
    "${PYTHON:-python3}" "$(dirname "$0")/tb.py" --logdir "$tb_dir" --follow --pid $$ --start "$t0" "${srcs[@]}" 2>"$log/tb.log" &
    tb=$!
fi
to=()
if [ "$samplers" = 1 ]; then to+=(--to "unix:$out/sample.sock")
else for i in $(seq "$samplers"); do to+=(--to "unix:$out/sample$i.sock"); done
fi
[ -n "$tis" ] || to+=(--to "$r_addr")
# rl-sync waits (--retry) for the receivers to listen and for version 0
"$BIN/rl-sync" --watch "$out/ckpt" "${to[@]}" --retry 60 2>"$log/sync.log" &
sync=$!
wait $pipe
t1=$(date +%s.%N)
read -r s_rc r_rc tee_rc l_rc <"$out/pipe.status"
# rl-sync ends by itself once the receivers it reached have gone; if the
# learner failed before its first version, it has reached none: stop it.
[ "$l_rc" = 0 ] || kill -TERM $sync 2>/dev/null
for _ in $(seq 300); do kill -0 $sync 2>/dev/null || break; sleep 0.1; done
kill -TERM $sync 2>/dev/null && echo "rl-run.sh: rl-sync still running 30 s after the pipeline: stopped" >&2
wait $sync
sync_rc=$?
eval_rc=0
if [ -n "$evaluating" ]; then wait $evaluating; eval_rc=$?; fi
tb_rc=0
if [ -n "$tb" ]; then kill -TERM $tb 2>/dev/null; wait $tb; tb_rc=$?; fi
# The machine the run was timed on: the CPU's model name and the cores this process may use.
machine() {
    local cpu
    cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n 1 | tr -d '"\\')
    printf '%s, %s cores' "${cpu:-$(uname -m)}" "$(nproc)"
}
weigh=$ratio
[ -z "$tis" ] || weigh="rl-learn --tis $tis"
ok=1
extra_rc=
[ -z "$evaluating" ] || extra_rc+=", \"evaluator\": $eval_rc"
[ -z "$tb" ] || extra_rc+=", \"tb.py\": $tb_rc"
case $s_rc in 0 | 141) ;; *) ok=0 ;; esac
case $r_rc in 0 | 141) ;; *) ok=0 ;; esac
case $tee_rc in 0 | 141) ;; *) ok=0 ;; esac
[ "$l_rc" = 0 ] && [ "$sync_rc" = 0 ] && [ "$eval_rc" = 0 ] && [ "$tb_rc" = 0 ] || ok=0
printf '{"wall_s": %s, "exit": {"rl-sample": %s, "rl-ratio": %s, "tee": %s, "rl-learn": %s, "rl-sync": %s%s}, "dtype": "%s", "head": "%s", "group": %s, "batch": %s, "steps": %s, "lr": "%s", "lag": "%s", "ratio": "%s", "sample": "%s", "learn": "%s", "seed": %s, "temperature": %s, "max_new_tokens": %s, "samplers": %s, "ranks": %s, "machine": "%s"%s}\n' \
    "$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")" "$s_rc" "$r_rc" "$tee_rc" "$l_rc" "$sync_rc" "$extra_rc" "$dtype" "$head" "$group" "$batch" "$steps" \
    "$lr" "$lag" "$weigh" "$sample_args" "$learn_args" "$seed" "$temperature" "$max_new" "$samplers" "$ranks" "$(machine)" \
    "${env:+, \"max_turns\": $max_turns}" >"$out/run.json"
if [ $ok = 0 ]; then
    echo "rl-run.sh: $out: the pipeline failed (exit statuses: rl-sample $s_rc, rl-ratio $r_rc, tee $tee_rc, rl-learn $l_rc, rl-sync $sync_rc${evaluating:+, evaluator $eval_rc}${tb:+, tb.py $tb_rc}); logs in $log" >&2
    for f in "$log"/*.log; do echo "== $f" >&2; tail -n 3 "$f" >&2; done
    exit 1
fi
tail -n 1 "$log/learn.log"
