#!/usr/bin/env bash
# bench/sample.sh [15m|110m|all] -- generation throughput of rl-sample (CPU
# backend) at 1, 16, 64 and 256 slots and f32, bf16 and int8 weights, next to
# a PyTorch KV-cache decode loop on the same machine and, at 1 slot, next to
# the bound that the measured memory bandwidth puts on it.
#
# Models: those of bench/forward.sh (llama, vocab 32000, tied embeddings,
# random weights from bench/forward.c), 15m (15.2M parameters) and 110m
# (109.5M), with models/tiny/tokenizer.json (448 tokens; sampled ids above
# them decode to no text) and no bos/eos in config.json, so that every
# completion runs to its length: 16 prompt tokens (random ids, "prompt_ids")
# and T = 64 (15m) or 32 (110m) generated, the same in every row, so that
# rows differ only in slots and dtype. For each (config, slots S, dtype) it times
#   - rl-sample --slots S --dtype D -n 1 --max-prompts N --max-new-tokens T
#     --verifier none at temperature 1, records zstd-compressed to /dev/null,
#     N >= S prompts (the "prompts" column): "tok/s" is its summary line's
#     figure, N x T generated tokens over the time from its first step to the
#     end -- prefill steps, sampling, record writing included, model load not;
#   - PyTorch (bench/forward_ref.py generate): the same N prompts in batches of
#     S, each a prefill then T - 1 decode steps with a float32 KV cache,
#     sampling at temperature 1 (log_softmax, multinomial); N x T tokens over
#     the time from the first prefill to the last token. PyTorch on the CPU
#     has no bf16 or int8 path worth the name, so its float32 loop is the
#     reference of every row; torch.no_grad, set_num_threads(2),
#     OMP_WAIT_POLICY=PASSIVE, torch.mv for one-row products (faster than the
#     sgemm it picks otherwise);
#   - memory read bandwidth (bench/membw: 2 threads summing a 1 GiB buffer).
#     The bound at 1 slot is bandwidth / weight bytes read per token: every
#     layer matrix and the tied output layer once (f32 4 B per parameter, bf16
#     2, int8 (W8A8) 1 and its output layer bf16), not the one
#     embedding row gathered nor the f32 KV cache (at most 2% of the bytes
#     of f32 weights here, 7% of int8's).
#     Weights smaller than the last-level cache can beat it (15m int8, bf16).
# Every figure is the median over rounds; each round runs every measurement
# of a configuration once, ours next to PyTorch's.
#
# Environment: RUNS=N (rounds for 15m, default 3), RUNS110=N (rounds for
# 110m, default 2), KEEP=1 (keep the models and reuse them next time),
# BENCH_OUT=DIR (default bench/out), BUILD / BIN (build and tool folders, as
# the Makefile), PYTHON (default /usr/bin/python3).
# Results: the table on stdout and in BENCH_OUT/sample.txt, RESULT lines in
# BENCH_OUT/sample.results (one per measurement and round). Takes ~8 minutes
# on 2 cores.
set -uo pipefail

NAME=sample
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WHICH=${1:-all}
RUNS=${RUNS:-3}
RUNS110=${RUNS110:-2}
KEEP=${KEEP:-0}
FWD=$BUILD/bench/forward
MEMBW=$BUILD/bench/membw
SAMPLE=$BIN/rl-sample

case $WHICH in 15m) CFGS=(15m) ;; 110m) CFGS=(110m) ;; all) CFGS=(15m 110m) ;;
    *) die "usage: bench/sample.sh [15m|110m|all]" ;; esac
positive RUNS RUNS110
[[ -x $FWD && -x $MEMBW ]] || die "$FWD or $MEMBW not found (run: make aux)"
[[ -x $SAMPLE ]] || die "$SAMPLE not found (run: make)"
"$PY" -c 'import torch, safetensors' 2>/dev/null || die "$PY cannot import torch and safetensors (PYTHONPATH=$PYTHONPATH)"

cleanup() {
    if [[ $KEEP != 1 ]]; then rm -rf "$W"/sample-model-15m "$W"/sample-model-110m; fi
    rm -f "$W/sample-prompts.jsonl"
}
bench_start cleanup

P=16
SLOTS=(1 16 64 256)
DTYPES=(f32 bf16 int8)
declare -A NEW=([15m]=64 [110m]=32)    # generated tokens per completion
# prompts per run, by config and slots: a few seconds each
declare -A NPROMPT=([15m 1]=8 [15m 16]=32 [15m 64]=64 [15m 256]=256
                    [110m 1]=2 [110m 16]=16 [110m 64]=64 [110m 256]=256)
declare -A C_HID=([15m]=288 [110m]=768) C_FF=([15m]=768 [110m]=2048) C_L=([15m]=6 [110m]=12)
declare -A VALS=() MED=()

# add KEY VALUE LINE: one round's figure (tok/s or GB/s) and its RESULT line.
add() { echo "$1 $3" >>"$RES"; VALS[$1]+="$2 "; }

# ours CFG S DTYPE: one rl-sample run; its summary line gives tokens and tok/s.
ours() {
    local cfg=$1 S=$2 dt=$3 key="$1 $3 $2" n=${NPROMPT[$1 $2]} T=${NEW[$1]} line toks tps
    [[ -n ${FAILED[$key]:-} ]] && return
    : >"$ERR"
    if ! "$SAMPLE" --model "$W/sample-model-$cfg" --dtype "$dt" --slots "$S" -n 1 --max-prompts "$n" \
        --max-new-tokens "$T" --verifier none --seed 1 -o /dev/null "$W/sample-prompts.jsonl" 2>"$ERR"; then
        fail "$key"; return
    fi
    line=$(grep '^rl-sample: .* tokens/s' "$ERR" | tail -n1)
    read -r toks tps < <(sed -n 's/.* \([0-9]*\) tokens, \([0-9.]*\) tokens\/s.*/\1 \2/p' <<<"$line")
    [[ ${toks:-} == $((n * T)) ]] || { fail "$key" "expected $((n * T)) tokens: $line"; return; }
    add "$key" "$tps" "RESULT what=rl-sample_${dt}_$S tokens=$toks tok_s=$tps summary=\"${line#rl-sample: }\""
}

# measure KEY FIELD CMD...: CMD prints a RESULT line whose FIELD= value is the figure.
measure() {
    local key=$1 field=$2 out v; shift 2
    [[ -n ${FAILED[$key]:-} ]] && return
    if out=$("$@" 2>"$ERR" | grep '^RESULT' | tail -n1) && v=$(sed -n "s/.* $field=\([^ ]*\).*/\1/p" <<<"$out") && [[ -n $v ]]; then
        add "$key" "$v" "$out"
    else
        fail "$key"
    fi
}

awk -v P=$P 'BEGIN { srand(1); for (i = 0; i < 512; i++) {
    printf "{\"prompt\": \"\", \"prompt_ids\": ["
    for (j = 0; j < P; j++) printf "%s%d", (j ? ", " : ""), int(rand() * 32000)
    print "]}" } }' >"$W/sample-prompts.jsonl"

for cfg in "${CFGS[@]}"; do
    reps=$RUNS; [[ $cfg == 110m ]] && reps=$RUNS110
    m=$W/sample-model-$cfg
    if [[ $KEEP == 1 && -s $m/model.safetensors && -s $m/tokenizer.json ]]; then
        echo "reusing $m" >&2
    else
        "$FWD" write --model "$m" --config "$cfg" >&2 || die "forward write $cfg failed"
        sed -i '/"bos_token_id"\|"eos_token_id"/d' "$m/config.json" || die "cannot edit $m/config.json"
        cp "$root/models/tiny/tokenizer.json" "$m/" || die "cannot copy the tokenizer"
    fi
    for ((r = 1; r <= reps; r++)); do
        echo "$cfg: round $r of $reps" >&2
        measure "$cfg membw" gb_s "$MEMBW" --mib 1024 --threads 2 --reps 7
        for S in "${SLOTS[@]}"; do
            measure "$cfg torch $S" tok_s env OMP_WAIT_POLICY=PASSIVE "$PY" "$here/forward_ref.py" generate "$m" \
                --slots "$S" --prompts "${NPROMPT[$cfg $S]}" --prompt $P --steps "${NEW[$cfg]}" --reps 1
            for dt in "${DTYPES[@]}"; do ours "$cfg" "$S" "$dt"; done
        done
    done
done
for key in "${!VALS[@]}"; do
    [[ -n ${FAILED[$key]:-} ]] && continue
    MED[$key]=$(median <<<"${VALS[$key]}")
done
printf '%s\n' "${!VALS[@]}" | sort -k1,1 -k2,2 -k3,3n | while read -r key; do printf '  %-16s %s\n' "$key" "${VALS[$key]}" >&2; done

# ---- table -----------------------------------------------------------------
# bytes of weights read per generated token at 1 slot (see the header):
# per layer q, k, v, o (C x C each: kv heads = heads here) and the MLP, plus the output layer
wbytes() {
    local cfg=$1 dt=$2 C=${C_HID[$1]} F=${C_FF[$1]} L=${C_L[$1]}
    awk -v C="$C" -v F="$F" -v L="$L" -v dt="$dt" 'BEGIN{
        b = (dt == "f32") ? 4 : (dt == "bf16" || dt == "bf16w") ? 2 : (dt == "int8w") ? 1 + 4 / 32 : 1
        h = (dt == "int8" || dt == "fp8") ? 2 : b   # W8A8 keeps the output layer bf16
        printf "%.0f", L * (4 * C * C + 3 * C * F) * b + 32000 * C * h }'
}
f1() { [[ -n $1 ]] && printf '%.1f' "$1" || printf '%s' "$2"; }
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN{ if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    l3=$(cat /sys/devices/system/cpu/cpu0/cache/index3/size 2>/dev/null || echo "?")
    echo "rlpipe sample benchmark: $("$SAMPLE" --version 2>&1 | head -n1); torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores (shared machine), L3 $l3; $(uname -sr); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg) (other work on the cores distorts every figure)"
    echo "environment: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(not set)} RLPIPE_THREADS=${RLPIPE_THREADS:-(not set)}" \
         "OMP_NUM_THREADS=${OMP_NUM_THREADS:-(not set)} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-(not set)}"
    echo "PyTorch: float32 eager KV-cache decode loop (the reference of every dtype), torch.no_grad, set_num_threads(2), OMP_WAIT_POLICY=PASSIVE"
    echo "medians of $RUNS (15m) / $RUNS110 (110m) rounds; prompts of $P tokens, completions of ${NEW[15m]} (15m) / ${NEW[110m]} (110m); tok/s = generated tokens / time from the first step (prefill included, model load not)"
    for cfg in "${CFGS[@]}"; do
        echo "memory read bandwidth ($cfg rounds, 2 threads, 1 GiB): ${MED[$cfg membw]:-FAILED} GB/s (rounds: ${VALS[$cfg membw]:-})"
    done
    echo "vs PyTorch = ours / PyTorch f32 at the same slots; vs 1 slot = ours / ours at 1 slot, same dtype; vs f32 = ours / ours f32, same slots;"
    echo "bound = bandwidth / weight bytes per token (1 slot only); of bound = ours / bound"
    echo
    fmt='%-6s %5s %-5s %7s %4s %10s %11s %8s %8s %6s %7s %6s\n'
    printf "$fmt" config slots dtype prompts new "ours tok/s" "torch tok/s" "vs torch" "vs 1slot" "vs f32" bound "of bnd"
    printf "$fmt" ------ ----- ----- ------- ---- ---------- ----------- -------- -------- ------ ------- ------
    for cfg in "${CFGS[@]}"; do
        for S in "${SLOTS[@]}"; do
            for dt in "${DTYPES[@]}"; do
                o=${MED[$cfg $dt $S]:-} pt=${MED[$cfg torch $S]:-} bound=- of=-
                if ((S == 1)) && [[ -n ${MED[$cfg membw]:-} ]]; then
                    bound=$(awk -v g="${MED[$cfg membw]}" -v b="$(wbytes "$cfg" "$dt")" 'BEGIN{printf "%.0f", g * 1e9 / b}')
                    of=$(ratio "$o" "$bound")
                fi
                printf "$fmt" "$cfg" "$S" "$dt" "${NPROMPT[$cfg $S]}" \
                    "${NEW[$cfg]}" "$(f1 "$o" FAILED)" "$(f1 "$pt" -)" "$(ratio "$o" "$pt")" \
                    "$(ratio "$o" "${MED[$cfg $dt 1]:-}")" "$(ratio "$o" "${MED[$cfg f32 $S]:-}")" "$bound" "$of"
            done
        done
    done
    echo
    echo "aims: 1 slot >= 1.2x PyTorch; 64 slots >= 8x 1 slot; int8 >= 1.5x f32 at 1 slot"
    for cfg in "${CFGS[@]}"; do
        line="$cfg: 1 slot vs PyTorch"
        for dt in "${DTYPES[@]}"; do line+=" $dt $(ratio "${MED[$cfg $dt 1]:-}" "${MED[$cfg torch 1]:-}")"; done
        line+="; 64 slots vs 1 slot"
        for dt in "${DTYPES[@]}"; do line+=" $dt $(ratio "${MED[$cfg $dt 64]:-}" "${MED[$cfg $dt 1]:-}")"; done
        echo "$line; int8 vs f32 at 1 slot $(ratio "${MED[$cfg int8 1]:-}" "${MED[$cfg f32 1]:-}")"
    done
} | tee "$W/sample.txt"
((NFAIL == 0)) || { echo "sample.sh: $NFAIL measurements failed" >&2; exit 1; }
