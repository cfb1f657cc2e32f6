#!/usr/bin/env bash
# bench/memory.sh [ROW...] -- peak resident memory of rl-learn, and of the
# pipeline rl-sample | rl-learn --tis (no rl-ratio) as the sum of the two
# processes' peaks, next to the bytes planned from lib/model's tables.
#
# Models: random BF16 weights (bench/memory_model.py weights: N(0, 0.02²)
# matrices and biases, norms 1) in the exact configs of Qwen2.5-0.5B (hidden
# 896, intermediate 4864, 24 layers, 14 heads over 2 kv heads, vocab 151936,
# tied, q/k/v biases, rope_theta 1e6; 494.0M parameters), Qwen2.5-1.5B (1536,
# 8960, 28 layers, 12 heads over 2, vocab 151936, tied, q/k/v biases; 1543.7M)
# and Llama-3.2-3B (3072, 8192, 28 layers, 24 heads over 8, head_dim 128, vocab
# 128256, tied, rope llama3 factor 32 low 1 high 4 original 8192, theta 5e5;
# 3212.7M), as Hugging Face ships them (bench/memory_model.py config), with
# models/tiny's tokenizer (the records carry ids; no text is needed).
# Learner rows, MODEL:MODE[:SEQS[:MICRO]] (MODEL 0.5b, 1.5b, 3b; SEQS default
# $SEQS; MICRO: rl-learn --micro, micro-batches a step, default 1):
#   full      rl-learn, every parameter trained in f32
#   full-rc   the same with --recompute
#   lora      --lora-rank 16 --lora-targets all-linear --base-dtype bf16
#   lora-rc   the same with --recompute
# each one step of --loss pg --tis 2 --batch SEQS --micro MICRO --max-steps 1
# on SEQS records of 64 prompt + 448 completion tokens (random ids; groups
# of 8 that share a prompt, rewards 0..7 within a group, the sampler's logp
# random in [-15, -5]). A step's sequences take 64 + 448 - 1 = 511 tokens
# through the model, so at most 32 fit one micro-batch of LRN_MICRO_TOKENS
# = 16384: 64 sequences are two micro-batches of 32, each with the
# activations of a step of 32 sequences; with MICRO 4, four of 16.
# Sampler rows, sample:MODEL: rl-sample --dtype bf16 --slots 64 -n 8
# --max-new-tokens 448 --ignore-eos on 8 prompts of 64 random ids (64
# sequences of 512 tokens), stopped by SIGTERM after SAMPLE_TIMEOUT seconds
# if not done (its figure is then the peak of a shorter generation: the
# tokens it generated are in its RESULT line).
# No rows: every learner row in the order 0.5b:lora-rc 0.5b:full-rc
# 1.5b:lora-rc 0.5b:lora 0.5b:full 1.5b:full-rc 1.5b:lora 1.5b:full 3b:lora-rc
# 3b:full-rc 3b:lora 3b:full, then sample:0.5b sample:1.5b sample:3b.
# Plan (bench/memory_model.py plan, which mirrors mdl_work_table and
# mdl_train_table): weights (f32; or bf16 matrices, f32 norms and biases),
# RoPE's table, LoRA's adapters, gradient + AdamW's two moments of the
# trained parameters (f32), and the two workspaces, at 16384 tokens ("plan")
# and at the tokens of this batch's micro-batch ("plan here": work at the
# 32 x 511 key/value rows, train at the 4 x (511 + 7 x 447) tokens computed
# once each group's prompt is shared; with MICRO 4, 16 x 511 and 2 groups).
# A row whose plan exceeds LIMIT_GIB is not run ("not run: plan X GiB >
# this machine's memory"), nor one whose plan exceeds MemAvailable - 1 GiB
# at its start (other work holds the rest).
# Sampler plan: bf16 weights, RoPE's table, the bf16 KV cache of 64 x 512
# rows (no workspace). Every run: nice -n 19 /usr/bin/time -f %M (the
# child's ru_maxrss: its VmHWM) under timeout; "peak" is that figure.
#
# Environment: SEQS=N (sequences of a learner row without its own, default
# 64), TIMEOUT=S (seconds a learner run may take, default 3600),
# SAMPLE_TIMEOUT=S (for a sampler run, default 1200), LIMIT_GIB=G (default
# 20), LEARN_OPTS="..." (more rl-learn options for every learner row),
# KEEP=1 (keep the models and reuse them next time), BENCH_OUT=DIR
# (default bench/out), BUILD / BIN (build and tool folders, as the Makefile),
# PYTHON (default .deps/venv/bin/python: numpy, ml_dtypes, zstandard).
# Results: the table on stdout and in BENCH_OUT/memory.txt, RESULT lines in
# BENCH_OUT/memory.results, each run's log in BENCH_OUT/memory-*.log. On 2
# shared cores a step of 32 x 512 took 9 minutes (0.5B full --recompute) to
# 28 minutes (1.5B LoRA --recompute), each sampler run 8-9 minutes; the
# learner rows that run need up to ~12 GiB free (0.5B full --recompute).
set -uo pipefail

NAME=memory
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
settings_help "$@"
USAGE_ARGS="[MODEL:MODE[:SEQS] | sample:MODEL]..."
SEQS=${SEQS:-64}
TIMEOUT=${TIMEOUT:-3600}
SAMPLE_TIMEOUT=${SAMPLE_TIMEOUT:-1200}
LIMIT_GIB=${LIMIT_GIB:-20}
KEEP=${KEEP:-0}
LEARN_OPTS=${LEARN_OPTS:-}
LEARN=$BIN/rl-learn SAMPLE=$BIN/rl-sample
HELP=$here/memory_model.py

positive SEQS TIMEOUT SAMPLE_TIMEOUT LIMIT_GIB
for t in "$LEARN" "$SAMPLE"; do [[ -x $t ]] || die "$t not found (run: make)"; done
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (GNU time: apt-get install time)"
"$PY" -c 'import numpy, ml_dtypes, zstandard, msgpack' 2>/dev/null ||
    die "$PY cannot import numpy, ml_dtypes, zstandard and msgpack"

ROWS=("$@")
if ((${#ROWS[@]} == 0)); then
    ROWS=(0.5b:lora-rc 0.5b:full-rc 1.5b:lora-rc 0.5b:lora 0.5b:full 1.5b:full-rc 1.5b:lora 1.5b:full
          3b:lora-rc 3b:full-rc 3b:lora 3b:full sample:0.5b sample:1.5b sample:3b)
fi
declare -A CFG=([0.5b]=qwen2.5-0.5b [1.5b]=qwen2.5-1.5b [3b]=llama3.2-3b)
declare -A OPTS=([full]="" [full-rc]="--recompute" [lora]="--lora-rank 16 --lora-targets all-linear --base-dtype bf16"
                 [lora-rc]="--lora-rank 16 --lora-targets all-linear --base-dtype bf16 --recompute")
declare -A PLANOPTS=([full]="" [full-rc]="--recompute" [lora]="--lora-rank 16 --base-dtype bf16"
                     [lora-rc]="--lora-rank 16 --base-dtype bf16 --recompute")
for r in "${ROWS[@]}"; do
    IFS=: read -r a b c d <<<"$r"
    if [[ $a == sample ]]; then
        [[ -n ${CFG[$b]:-} && -z $c ]] || settings_usage "$r: expected sample:0.5b, sample:1.5b or sample:3b"
    else
        [[ -n ${CFG[$a]:-} && -n $b && -n ${OPTS[$b]+x} && ( -z $c || $c =~ ^[1-9][0-9]*$ ) &&
           ( -z $d || ( -n $c && $d =~ ^[1-9][0-9]*$ ) ) ]] ||
            settings_usage "$r: expected MODEL:MODE[:SEQS[:MICRO]], MODEL 0.5b, 1.5b or 3b, MODE full, full-rc, lora or lora-rc"
    fi
done

cleanup() {
    rm -rf "$W/memory-ckpt" "$W/memory-metrics.jsonl" "$W"/memory-records-*.rlr "$W/memory-prompts.jsonl"
    if [[ $KEEP != 1 ]]; then rm -rf "$W"/memory-model-*; fi
}
bench_start cleanup

P=64 T=448 G=8
declare -A PLAN=() HERE=() PEAK=() SECS=() STATUS=() NSEQ=()
gib() { awk -v b="$1" 'BEGIN{ printf "%.2f", b / 2^30 }'; }
avail() { awk '/^MemAvailable:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo; }

# model NAME: the model directory of NAME (0.5b, ...), written if absent.
model() {
    local m=$W/memory-model-$1
    if [[ ! -s $m/model.safetensors ]]; then
        echo "$1: writing $m" >&2
        rm -rf "$m"
        "$PY" "$HELP" config "${CFG[$1]}" "$m" && nice -n 19 "$PY" "$HELP" weights "$m" >&2 &&
            cp "$root/models/tiny/tokenizer.json" "$m/" || return 1
    fi
    echo "$m"
}

# vocab DIR: its config's vocab_size.
vocab() { sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$1/config.json"; }

# plan_field FIELD LINE: the value of FIELD in a PLAN line.
plan_field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$2"; }

# timed KEY LOG LIMIT CMD...: runs CMD under nice -n 19, /usr/bin/time and
# timeout LIMIT (SIGTERM), its standard error in LOG; sets PK (peak bytes)
# and RC (CMD's status; 124: stopped by the timeout).
timed() {
    local key=$1 log=$2 lim=$3 kb; shift 3
    nice -n 19 /usr/bin/time -f 'maxrss_kb=%M wall_s=%e' timeout -s TERM "$lim" "$@" >/dev/null 2>"$log"
    RC=$?
    kb=$(sed -n 's/^maxrss_kb=\([0-9]*\) .*/\1/p' "$log" | tail -n1)
    PK=$((${kb:-0} * 1024))
}

# learner KEY MODEL MODE SEQS MICRO
learner() {
    local key=$1 name=$2 mode=$3 n=$4 micro=$5 m v pl ph line log=$W/memory-${1//[: ]/-}.log
    local mb=$((16384 / (P + T - 1))) per=$(((n + micro - 1) / micro)) nkv nown
    ((mb > per)) && mb=$per
    nkv=$((mb * (P + T - 1))) nown=$((mb / G * (P + T - 1 + (G - 1) * (T - 1)) + mb % G * (P + T - 1)))
    local cfgdir=$W/memory-config-$name
    "$PY" "$HELP" config "${CFG[$name]}" "$cfgdir" || die "memory_model.py config failed"
    # shellcheck disable=SC2086
    pl=$("$PY" "$HELP" plan "$cfgdir" ${PLANOPTS[$mode]} --tokens 16384) || die "memory_model.py plan failed"
    # shellcheck disable=SC2086
    ph=$("$PY" "$HELP" plan "$cfgdir" ${PLANOPTS[$mode]} --tokens "$nkv" --train-tokens "$nown") ||
        die "memory_model.py plan failed"
    rm -rf "$cfgdir"
    PLAN[$key]=$(plan_field total "$pl") HERE[$key]=$(plan_field total "$ph")
    echo "RESULT key=\"$key\" what=plan tokens=16384 ${pl#PLAN }" >>"$RES"
    echo "RESULT key=\"$key\" what=plan_here work_tokens=$nkv train_tokens=$nown ${ph#PLAN }" >>"$RES"
    if awk -v p="${PLAN[$key]}" -v l="$LIMIT_GIB" 'BEGIN{ exit !(p > l * 2^30) }'; then
        STATUS[$key]="not run: plan $(gib "${PLAN[$key]}") GiB > this machine's memory (limit $LIMIT_GIB GiB)"
        echo "$key: ${STATUS[$key]}" >&2
        return
    fi
    v=$(avail)
    if ((PLAN[$key] + (1 << 30) > v)); then
        STATUS[$key]="not run: plan $(gib "${PLAN[$key]}") GiB > MemAvailable $(gib "$v") GiB - 1 at its start"
        echo "$key: ${STATUS[$key]}" >&2
        return
    fi
    m=$(model "$name") || { fail "$key" "model"; STATUS[$key]="FAILED: model"; return; }
    local recs=$W/memory-records-$name-$n.rlr
    [[ -s $recs ]] || "$PY" "$HELP" records "$recs" "$(vocab "$m")" --seqs "$n" --prompt $P --completion $T --group $G ||
        die "memory_model.py records failed"
    rm -rf "$W/memory-ckpt" "$W/memory-metrics.jsonl"
    echo "$key: rl-learn, $n x $((P + T)) tokens ($(date -u +%H:%M:%S))" >&2
    # shellcheck disable=SC2086
    timed "$key" "$log" "$TIMEOUT" "$LEARN" --init "$m" --out "$W/memory-ckpt" --keep 1 --batch "$n" --max-steps 1 \
        --micro "$micro" --loss pg --tis 2 ${OPTS[$mode]} $LEARN_OPTS --metrics "$W/memory-metrics.jsonl" "$recs"
    PEAK[$key]=$PK
    SECS[$key]=$(sed -n 's/.*"seconds":\([0-9]*\).*/\1/p' "$W/memory-metrics.jsonl" 2>/dev/null | head -n1)
    if ((RC == 124)); then
        STATUS[$key]="stopped at ${TIMEOUT} s (TIMEOUT): peak of the part done"
    elif ((RC != 0)); then
        cp "$log" "$ERR"; fail "$key" "status $RC"; STATUS[$key]="FAILED: status $RC"
    else
        STATUS[$key]=ok
    fi
    line="RESULT key=\"$key\" what=rl-learn seqs=$n micro=$micro learn_opts=\"$LEARN_OPTS\" peak_bytes=$PK status=$RC step_s=${SECS[$key]:-}"
    line+=" plan_bytes=${PLAN[$key]} plan_here_bytes=${HERE[$key]} log=\"$(grep '^rl-learn: ' "$log" | tail -n1)\""
    echo "$line" >>"$RES"
    echo "  $key: peak $(gib "$PK") GiB, plan $(gib "${PLAN[$key]}") (here $(gib "${HERE[$key]}")), step ${SECS[$key]:--} s, ${STATUS[$key]}" >&2
}

# sampler KEY MODEL
sampler() {
    local key=$1 name=$2 m pl log=$W/memory-${1//[: ]/-}.log sum
    m=$(model "$name") || { fail "$key" "model"; STATUS[$key]="FAILED: model"; return; }
    pl=$("$PY" "$HELP" sampler "$m" 64 $((P + T))) || die "memory_model.py sampler failed"
    PLAN[$key]=$(plan_field total "$pl") HERE[$key]=${PLAN[$key]}
    echo "RESULT key=\"$key\" what=plan_sampler slots=64 len=$((P + T)) ${pl#PLAN }" >>"$RES"
    if ((PLAN[$key] + (1 << 30) > $(avail))); then
        STATUS[$key]="not run: plan $(gib "${PLAN[$key]}") GiB > MemAvailable - 1 GiB at its start"; return
    fi
    "$PY" "$HELP" prompts "$W/memory-prompts.jsonl" "$(vocab "$m")" --prompts 8 --prompt $P || die "prompts failed"
    echo "$key: rl-sample, 64 slots, 448 new tokens ($(date -u +%H:%M:%S))" >&2
    timed "$key" "$log" "$SAMPLE_TIMEOUT" "$SAMPLE" --model "$m" --dtype bf16 --slots 64 -n 8 --max-new-tokens $T \
        --ignore-eos --verifier none --seed 1 -o /dev/null "$W/memory-prompts.jsonl"
    PEAK[$key]=$PK
    sum=$(grep '^rl-sample: ' "$log" | tail -n1)
    if ((RC == 124)); then
        STATUS[$key]="stopped at ${SAMPLE_TIMEOUT} s: ${sum#rl-sample: }"
    elif ((RC != 0)); then
        cp "$log" "$ERR"; fail "$key" "status $RC"; STATUS[$key]="FAILED: status $RC"
    else
        STATUS[$key]="ok: ${sum#rl-sample: }"
    fi
    echo "RESULT key=\"$key\" what=rl-sample peak_bytes=$PK status=$RC plan_bytes=${PLAN[$key]} summary=\"${sum#rl-sample: }\"" >>"$RES"
    echo "  $key: peak $(gib "$PK") GiB, plan $(gib "${PLAN[$key]}"), ${STATUS[$key]}" >&2
}

KEYS=()
for r in "${ROWS[@]}"; do
    IFS=: read -r a b c d <<<"$r"
    if [[ $a == sample ]]; then
        key="sample:$b"; KEYS+=("$key"); sampler "$key" "$b"
    else
        n=${c:-$SEQS} micro=${d:-1} key="$a:$b:$n"
        ((micro > 1)) && key+=":$micro"
        KEYS+=("$key"); NSEQ[$key]=$n; learner "$key" "$a" "$b" "$n" "$micro"
    fi
done

# ---- table -----------------------------------------------------------------
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    echo "rlpipe memory benchmark: $("$LEARN" --version 2>&1 | head -n1); commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores (shared machine), $(awk '/^MemTotal:/ {printf "%.1f", $2 / 1048576}' /proc/meminfo) GiB; $(uname -sr); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg)"
    echo "peak: /usr/bin/time %M (ru_maxrss) of each process under nice -n 19; GiB = 2^30 bytes"
    echo "learner: one step of --loss pg --tis 2 on SEQS x (64 + 448) tokens (row MODEL:MODE:SEQS[:MICRO], --micro MICRO); plan at 16384 tokens, plan here at this micro-batch's"
    echo
    fmt='%-16s %9s %9s %9s %7s %8s  %s\n'
    printf "$fmt" row "plan GiB" "here GiB" "peak GiB" "pk/here" "step s" status
    printf "$fmt" ---------------- --------- --------- --------- ------- -------- ------
    for key in "${KEYS[@]}"; do
        pk=${PEAK[$key]:-}
        printf "$fmt" "$key" "$(gib "${PLAN[$key]:-0}")" "$(gib "${HERE[$key]:-0}")" "$([[ -n $pk ]] && gib "$pk" || echo -)" \
            "$([[ -n $pk ]] && awk -v a="$pk" -v b="${HERE[$key]}" 'BEGIN{printf "%.2f", a / b}' || echo -)" \
            "${SECS[$key]:--}" "${STATUS[$key]:-}"
    done
    echo
    echo "pipeline (rl-sample --dtype bf16 + rl-learn --tis; the sum of the two peaks):"
    for key in "${KEYS[@]}"; do
        [[ $key == sample:* || -z ${PEAK[$key]:-} || -z ${PEAK[sample:${key%%:*}]:-} ]] && continue
        s=${PEAK[sample:${key%%:*}]}
        echo "  $key: $(gib "${PEAK[$key]}") + $(gib "$s") = $(gib $((PEAK[$key] + s))) GiB"
    done
    echo "aims: the 1.5B LoRA pipeline and the 0.5B full pipeline under 16 GB (16e9 bytes = 14.90 GiB)"
} | tee "$W/memory.txt"
((NFAIL == 0)) || { echo "memory.sh: $NFAIL measurements failed" >&2; exit 1; }
