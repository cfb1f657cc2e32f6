#!/usr/bin/env bash
# bench/sync.sh [15m|110m|1b|all] -- weight pushes (rl-sync into receivers
# that keep working): push throughput over unix and tcp sockets next to the
# memcpy bandwidth measured in the same run, and the stall a swap costs a
# generating sampler next to the time of one of its decode steps.
#
# Models: random weights written by bench/forward.c (llama, tied embeddings,
# f32 safetensors), 15m (15.2M parameters, 61 MB) and 110m (109.5M, 438 MB)
# as bench/forward.sh makes them, and 1b (Llama-3.2-1B's shapes: hidden 2048,
# intermediate 8192, 16 layers, 32 heads, 8 kv heads, vocab 128256; 1.24B
# parameters, 4.94 GB). No argument: 15m and 110m; all: the three. 1b needs
# ~16 GB of available memory (the receiver's weights, its standby copy and
# the sender's mapped file, 4.94 GB each) and 5 GB of disk in BENCH_OUT.
# For each model:
#   - memcpy: bench/membw --copy, one thread copying a 1 GiB buffer into
#     another (far over the last-level cache), median of 5 passes, GB/s of
#     bytes copied. A push copies the weights at least once at each end
#     (file to socket, socket to the standby weights), so memcpy's rate is
#     the bound a push is measured against ("push/cpy").
#   - rl-ratio --listen (f32, idle: nothing on its standard input) over
#     unix:PATH and over tcp:127.0.0.1:PORT (--token-file, HMAC
#     challenge-response): one receiver per transport, then R + 1 one-shot
#     `rl-sync MODEL --to ADDR --as-version N`, N = 1, 2, ... (the same file
#     announced as ever newer versions). The first push also allocates the
#     receiver's standby copy (first touch of every page: slow in a VM) and is
#     shown apart ("1st GB/s"); the other figures are medians over the R
#     pushes after it. "push GB/s": rl-sync's report, bytes / seconds from
#     connect to the receiver's result (greeting, hello, data, checksum, the
#     wait for a boundary); "recv GB/s": the receiver's report, bytes / time
#     from its first data byte to the checksum verified (conversion into the
#     standby copy included).
#   - 15m and 110m only: rl-sample --listen unix:PATH (f32 and bf16; the
#     sender converts the matrices to bf16 for a bf16 receiver) generating
#     with --slots 16 (random 16-token prompts, 64 new tokens each, no eos,
#     --epochs 0) while R + 1 pushes arrive (0.2 s apart), then SIGTERM.
#     "stall" is the receiver's own figure: the time its generation loop was
#     blocked by a swap (median per push; max over those lines and the
#     "longest" of its summary, which covers every push); "bnd us" is how long
#     a verified push waited for the next decode-step boundary (latency, not
#     a stall). The reference "step us" is one decode step of the same model,
#     dtype and 16 sequences measured alone before (bench/forward decode:
#     model_step, median of 3 runs of 16 steps after a 16-token prefill;
#     sampling not included, so rl-sample's own steps are longer); "st/step"
#     = stall median / step.
#   - 15m and 110m only: the same rl-sample receivers (f32, bf16) taking
#     adapter pushes (lib/sync/push_lora.h) instead: a LoRA adapter of r 16
#     on every linear module (PEFT's "all-linear"), random, written here in
#     PEFT's layout (adapter_config.json, adapter_model.safetensors, F32), its
#     tensors alone sent, merged by the receiver into the standby weights
#     from its base's files before the swap. "bytes" is the adapter's; "merge
#     us" the receiver's merge (median), which precedes the wait for a
#     boundary and is no stall.
# Targets: push >= 1 GB/s on unix sockets; stall <= one decode step.
#
# Environment: RUNS=N (timed pushes per receiver for 15m and 110m, default 5),
# RUNS1B=N (for 1b, default 3), SLOTS=S (rl-sample's slots, default 16),
# KEEP=1 (keep the models and reuse them next time), BENCH_OUT=DIR (default
# bench/out), BUILD / BIN (build and tool folders, as the Makefile), TMPDIR
# (where the sockets go).
# Results: the table on stdout and in BENCH_OUT/sync.txt, RESULT lines in
# BENCH_OUT/sync.results (one per push), the receivers' logs in
# BENCH_OUT/sync-*.log. Takes ~40 s on 2 idle cores for 15m and 110m without
# the adapter rows (2.5 minutes with them at a load average of 13); 1b adds
# ~2-3 minutes (1 to write the model, ~10 s for each first push).
set -uo pipefail

NAME=sync
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WHICH=${1:-default}
RUNS=${RUNS:-5}
RUNS1B=${RUNS1B:-3}
SLOTS=${SLOTS:-16}
KEEP=${KEEP:-0}
FWD=$BUILD/bench/forward
MEMBW=$BUILD/bench/membw
SYNC=$BIN/rl-sync RATIO=$BIN/rl-ratio SAMPLE=$BIN/rl-sample

case $WHICH in default) CFGS=(15m 110m) ;; 15m | 110m | 1b) CFGS=("$WHICH") ;; all) CFGS=(15m 110m 1b) ;;
    *) die "usage: bench/sync.sh [15m|110m|1b|all] (default: 15m and 110m)" ;; esac
positive RUNS RUNS1B SLOTS
[[ -x $FWD && -x $MEMBW ]] || die "$FWD or $MEMBW not found (run: make aux)"
for t in "$SYNC" "$RATIO" "$SAMPLE"; do [[ -x $t ]] || die "$t not found (run: make)"; done

# 1b: memory for three copies of 4.94 GB and disk for one.
if [[ " ${CFGS[*]} " == *" 1b "* ]]; then
    avail=$(awk '/^MemAvailable:/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
    ((avail >= 16)) || die "1b needs ~16 GB of available memory (its receiver holds the weights and a standby copy, the sender maps the file: 4.94 GB each); MemAvailable is $avail GB"
    mkdir -p "$W" || die "cannot create $W"
    if [[ ! -s $W/sync-model-1b/model.safetensors ]]; then
        disk=$(df -Pk "$W" | awk 'NR == 2 {printf "%.0f", $4 / 1048576}')
        ((disk >= 6)) || die "1b needs ~5 GB of disk in $W for its model; $disk GB free"
    fi
fi

SOCK=$(mktemp -d "${TMPDIR:-/tmp}/rlpipe-sync.XXXXXX") || die "cannot create a folder for the sockets"
FIFO=$SOCK/stdin TOKEN=$SOCK/token RPID=
cleanup() {
    [[ -n $RPID ]] && kill -TERM "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
    exec 8>&-
    rm -rf "$SOCK"
    rm -f "$W/sync-prompts.jsonl"
    if [[ $KEEP != 1 ]]; then rm -rf "$W"/sync-model-15m "$W"/sync-model-110m "$W"/sync-model-1b; fi
}
bench_start cleanup
mkfifo "$FIFO" || die "cannot create a FIFO in $SOCK"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TOKEN") || die "cannot write the token"

declare -A MEMCPY=() PARAMS=() BYTES=() FIRST=() PUSH=() RECV=() STALL=() STALLMAX=() BND=() STEP=() MERGE=() SECS=()
ROWS=()

# The figure of a rate as cli_bytes prints it ("4.14 GB/s", "504.3 MB/s") in GB/s.
gbs() {
    awk -v x="$1" -v u="$2" 'BEGIN{ m = (u == "GB") ? 1 : (u == "MB") ? 1e-3 : (u == "kB") ? 1e-6 : 1e-9; printf "%.4g", x * m }'
}

# Parameters of the model in DIR from its config.json (llama; tied embeddings or not).
params() {
    awk -F'[:,]' '/"hidden_size"/{C=$2} /"intermediate_size"/{F=$2} /"num_hidden_layers"/{L=$2}
        /"num_attention_heads"/{H=$2} /"num_key_value_heads"/{KV=$2} /"head_dim"/{D=$2} /"vocab_size"/{V=$2}
        /"tie_word_embeddings"/{T=($2 ~ /true/)}
        END{ printf "%.0f", V * C * (T ? 1 : 2) + L * (2 * C + 2 * C * H * D + 2 * C * KV * D + 3 * C * F) + C }' "$1/config.json"
}

# start_receiver LOG IN CMD...: starts CMD (standard input IN: the FIFO, which
# fd 8 then holds open, or a file) and waits for its "listening for weights on
# ADDR" line; sets RPID and RADDR. Non-zero when it dies or takes 10 minutes.
start_receiver() {
    local log=$1 in=$2 i; shift 2
    : >"$log"
    "$@" <"$in" >/dev/null 2>"$log" &
    RPID=$!
    [[ $in == "$FIFO" ]] && exec 8>"$FIFO"
    for ((i = 0; i < 6000; i++)); do
        RADDR=$(sed -n 's/.*listening for weights on \([^ ]*\)$/\1/p' "$log")
        [[ -n $RADDR ]] && return 0
        kill -0 "$RPID" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}

# stop_receiver: SIGTERM (rl-sample ends cleanly with status 0 and prints its
# summary; rl-ratio has no handler: 143); non-zero on any other status.
stop_receiver() {
    local rc
    kill -TERM "$RPID" 2>/dev/null
    wait "$RPID"
    rc=$?
    RPID=
    exec 8>&-
    ((rc == 0 || rc == 143))
}

# push KEY MODEL LOG VERSION [OPTION...]: one rl-sync of MODEL (a model or an
# adapter directory) to $RADDR as VERSION; its figures (GB/s, receiver GB/s,
# stall us, us to a boundary, an adapter's merge us, seconds from connect to
# result) in P_GBS P_RECV P_STALL P_BND P_MERGE P_SEC and P_SIZE, a RESULT line
# in $RES. Non-zero when the push fails or either end does not report it.
push() {
    local key=$1 model=$2 log=$3 v=$4 s r i; shift 4
    : >"$ERR"
    "$SYNC" "$model" --to "$RADDR" --as-version "$v" --retry 0 "$@" 2>"$ERR" || return 1
    s=$(grep "^rl-sync: v0*$v -> " "$ERR") || return 1
    for ((i = 0; i < 100; i++)); do   # the receiver prints its line after sending its result
        r=$(grep -E " weights v$v installed from an? (adapter )?push: " "$log") && break
        sleep 0.05
    done
    [[ -n $r ]] || { echo "the receiver did not report v$v" >>"$ERR"; return 1; }
    local re_s=': ([0-9.]+ [kMG]?B)( of adapter)? in ([0-9.]+) s \(([0-9.]+) ([kMG]?B)/s\)(, merged in ([0-9]+) us)?, receiver stall'
    local re_r=' in [0-9.]+ s \(([0-9.]+) ([kMG]?B)/s\)(, merged in [0-9.]+ s)?, ([0-9]+) us to a boundary, stall ([0-9]+) us'
    [[ $s =~ $re_s ]] || { echo "cannot read: $s" >>"$ERR"; return 1; }
    P_SIZE=${BASH_REMATCH[1]} P_SEC=${BASH_REMATCH[3]} P_GBS=$(gbs "${BASH_REMATCH[4]}" "${BASH_REMATCH[5]}")
    P_MERGE=${BASH_REMATCH[7]}
    [[ $r =~ $re_r ]] || { echo "cannot read: $r" >>"$ERR"; return 1; }
    P_RECV=$(gbs "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}") P_BND=${BASH_REMATCH[4]} P_STALL=${BASH_REMATCH[5]}
    echo "RESULT key=\"$key\" version=$v bytes=\"$P_SIZE\" push_s=$P_SEC push_gb_s=$P_GBS recv_gb_s=$P_RECV" \
         "boundary_us=$P_BND${P_MERGE:+ merge_us=$P_MERGE}" \
         "stall_us=$P_STALL sync=\"${s#rl-sync: }\" receiver=\"${r#*: }\"" >>"$RES"
}

# pushes KEY MODEL LOG N PAUSE [OPTION...]: pushes versions 1..N+1 to the
# receiver at $RADDR (logging to LOG), PAUSE seconds apart; the first apart,
# medians of the others in FIRST, PUSH, SECS, RECV, STALL, BND, MERGE
# (adapters); max stall in STALLMAX.
pushes() {
    local key=$1 model=$2 log=$3 n=$4 pause=$5 v gbs="" secs="" recv="" stall="" bnd="" merge=""; shift 5
    for ((v = 1; v <= n + 1; v++)); do
        if ! push "$key" "$model" "$log" "$v" "$@"; then   # the receiver's log, then rl-sync's error
            cat "$log" "$ERR" >"$ERR.push" && mv "$ERR.push" "$ERR"
            fail "$key" "push v$v"
            return 1
        fi
        BYTES[$key]=$P_SIZE
        if ((v == 1)); then FIRST[$key]=$P_GBS; else
            gbs+="$P_GBS " secs+="$P_SEC " recv+="$P_RECV " stall+="$P_STALL " bnd+="$P_BND " merge+="${P_MERGE:+$P_MERGE }"
        fi
        sleep "$pause"
    done
    printf '  %-24s push GB/s %s| recv GB/s %s| stall us %s\n' "$key" "$gbs" "$recv" "$stall" >&2
    PUSH[$key]=$(median <<<"$gbs") SECS[$key]=$(median <<<"$secs") RECV[$key]=$(median <<<"$recv")
    STALL[$key]=$(median <<<"$stall") BND[$key]=$(median <<<"$bnd")
    [[ -n $merge ]] && MERGE[$key]=$(median <<<"$merge")
    STALLMAX[$key]=$(tr ' ' '\n' <<<"$stall" | grep . | sort -g | tail -n1)
}

# adapter MODEL DIR: a random LoRA adapter of MODEL (r 16, every linear module,
# F32) in PEFT's layout, as a version of rl-learn --lora-rank holds it.
adapter() {
    "$PY" - "$1" "$2" <<'PYEOF'
import json, os, sys
import numpy as np
from safetensors.numpy import save_file
model, out = sys.argv[1], sys.argv[2]
c = json.load(open(os.path.join(model, "config.json")))
C, F, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
H, KV = c["num_attention_heads"], c["num_key_value_heads"]
D = c.get("head_dim", C // H)
r, rng, t = 16, np.random.default_rng(1), {}
dims = {"self_attn.q_proj": (H * D, C), "self_attn.k_proj": (KV * D, C), "self_attn.v_proj": (KV * D, C),
        "self_attn.o_proj": (C, H * D), "mlp.gate_proj": (F, C), "mlp.up_proj": (F, C), "mlp.down_proj": (C, F)}
for l in range(L):
    for m, (o, i) in dims.items():
        p = f"base_model.model.model.layers.{l}.{m}"
        t[p + ".lora_A.weight"] = rng.normal(0, 0.01, (r, i)).astype(np.float32)
        t[p + ".lora_B.weight"] = rng.normal(0, 0.01, (o, r)).astype(np.float32)
os.makedirs(out, exist_ok=True)
save_file(t, os.path.join(out, "adapter_model.safetensors"))
json.dump({"peft_type": "LORA", "r": r, "lora_alpha": 32, "use_rslora": False, "bias": "none",
           "task_type": "CAUSAL_LM", "lora_dropout": 0.0,
           "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
          open(os.path.join(out, "adapter_config.json"), "w"))
PYEOF
}

awk 'BEGIN { srand(1); for (i = 0; i < 512; i++) {
    printf "{\"prompt\": \"\", \"prompt_ids\": ["
    for (j = 0; j < 16; j++) printf "%s%d", (j ? ", " : ""), int(rand() * 32000)
    print "]}" } }' >"$W/sync-prompts.jsonl"

for cfg in "${CFGS[@]}"; do
    reps=$RUNS; [[ $cfg == 1b ]] && reps=$RUNS1B
    m=$W/sync-model-$cfg
    if [[ $KEEP == 1 && -s $m/model.safetensors ]]; then
        echo "reusing $m" >&2
    else
        echo "$cfg: writing $m" >&2
        "$FWD" write --model "$m" --config "$cfg" >&2 || die "forward write $cfg failed"
        sed -i '/"bos_token_id"\|"eos_token_id"/d' "$m/config.json" || die "cannot edit $m/config.json"
        cp "$root/models/tiny/tokenizer.json" "$m/" || die "cannot copy the tokenizer"
    fi
    PARAMS[$cfg]=$(params "$m")
    echo "$cfg: memcpy" >&2
    : >"$ERR"
    if out=$("$MEMBW" --copy --threads 1 --mib 1024 --reps 5 2>"$ERR" | grep '^RESULT'); then
        echo "RESULT key=\"$cfg memcpy\" ${out#RESULT }" >>"$RES"
        MEMCPY[$cfg]=$(sed -n 's/.* gb_s=\([^ ]*\).*/\1/p' <<<"$out")
    else
        fail "$cfg memcpy"
    fi

    # rl-ratio, idle, over each transport
    for tr in unix tcp; do
        key="$cfg|$tr|rl-ratio f32" log=$W/sync-$cfg-$tr-ratio.log
        ROWS+=("$key")
        echo "$cfg: rl-ratio over $tr, 1 + $reps pushes" >&2
        if [[ $tr == unix ]]; then
            addr=unix:$SOCK/ratio.sock opts=()
        else
            addr=tcp:127.0.0.1:0 opts=(--token-file "$TOKEN")
        fi
        if ! start_receiver "$log" "$FIFO" "$RATIO" --model "$m" --listen "$addr" "${opts[@]}"; then
            cp "$log" "$ERR"; fail "$key" "the receiver did not start"; stop_receiver; continue
        fi
        pushes "$key" "$m" "$log" "$reps" 0 "${opts[@]}"
        stop_receiver || { cp "$log" "$ERR"; fail "$key" "rl-ratio did not end as asked"; }
    done

    if [[ $cfg == 1b ]]; then
        [[ $KEEP == 1 ]] || rm -rf "$m"
        continue
    fi
    # rl-sample, generating
    for dt in f32 bf16; do
        key="$cfg|unix|rl-sample $dt" log=$W/sync-$cfg-sample-$dt.log
        ROWS+=("$key")
        echo "$cfg: decode step, $dt, $SLOTS slots" >&2
        : >"$ERR"
        if out=$("$FWD" decode --model "$m" --dtype "$dt" --slots "$SLOTS" --prompt 16 --steps 16 --reps 3 2>"$ERR" |
                 grep '^RESULT'); then
            echo "RESULT key=\"$key step\" ${out#RESULT }" >>"$RES"
            STEP[$key]=$(sed -n 's/.* median_s=\([^ ]*\).*/\1/p' <<<"$out" | awk '{printf "%.0f", $1 / 16 * 1e6}')
        else
            fail "$key step"
        fi
        for src in model adapter; do
            k=$key lg=$log what=$m
            if [[ $src == adapter ]]; then
                k="$key|adapter r16" lg=${log%.log}-adapter.log what=$W/sync-adapter-$cfg
                ROWS+=("$k")
                STEP[$k]=${STEP[$key]:-}
                if [[ ! -s $what/adapter_model.safetensors ]] && ! adapter "$m" "$what" 2>"$ERR"; then
                    fail "$k" "writing the adapter"; continue
                fi
            fi
            echo "$cfg: rl-sample $dt generating, 1 + $reps pushes of the $src" >&2
            if ! start_receiver "$lg" /dev/null "$SAMPLE" --model "$m" --dtype "$dt" --slots "$SLOTS" \
                --max-new-tokens 64 --verifier none --seed 1 --epochs 0 -o /dev/null \
                --listen "unix:$SOCK/sample.sock" "$W/sync-prompts.jsonl"; then
                cp "$lg" "$ERR"; fail "$k" "the receiver did not start"; stop_receiver; continue
            fi
            sleep 0.5   # generating
            pushes "$k" "$what" "$lg" "$reps" 0.2
            if ! stop_receiver; then cp "$lg" "$ERR"; fail "$k" "rl-sample did not end as asked"; continue; fi
            sum=$(grep '^rl-sample: stopped by a signal: ' "$lg" | tail -n1)
            longest=$(sed -n 's/.* (longest \([0-9]*\) us).*/\1/p' <<<"$sum")
            echo "RESULT key=\"$k summary\" summary=\"${sum#rl-sample: }\"" >>"$RES"
            if [[ -n $longest && -n ${STALLMAX[$k]:-} ]] && ((longest > STALLMAX[$k])); then STALLMAX[$k]=$longest; fi
        done
    done
    [[ $KEEP == 1 ]] || rm -rf "$W/sync-adapter-$cfg"
done

# ---- table -----------------------------------------------------------------
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" -v f="${3:-%.2f}" 'BEGIN{ if (a > 0 && b > 0) printf f, a / b; else printf "-" }'; }
f2() { [[ -n ${1:-} ]] && printf '%.2f' "$1" || printf -- '-'; }
hum() { awk -v n="$1" 'BEGIN{ if (n >= 1e9) printf "%.2fB", n / 1e9; else printf "%.1fM", n / 1e6 }'; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    echo "rlpipe sync benchmark: $("$SYNC" --version 2>&1 | head -n1)"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores (shared machine), $(awk '/^MemTotal:/ {printf "%.0f", $2 / 1048576}' /proc/meminfo) GB; $(uname -sr); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg) (other work on the cores distorts every figure)"
    echo "environment: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(not set)} RLPIPE_THREADS=${RLPIPE_THREADS:-(not set)}"
    echo "medians of $RUNS (15m, 110m) / $RUNS1B (1b) pushes per row after a first one (1st GB/s: it also allocates the"
    echo "receiver's standby copy); memcpy: 1 thread, 1 GiB, median of 5; rl-sample: $SLOTS slots, generating while pushed to;"
    echo "push/cpy = push GB/s / memcpy GB/s; step us: one decode step alone (model_step, $SLOTS sequences); st/step = stall / step"
    echo "push s: connect to result (median); merge us: an adapter push's merge into the receiver's standby weights"
    echo
    fmt='%-5s %7s %8s %-5s %-26s %8s %8s %8s %8s %8s %8s %8s %7s %7s %8s %8s %8s\n'
    printf "$fmt" model params bytes trans receiver "1st GB/s" "push GB/s" "push s" "recv GB/s" "memcpy" push/cpy "merge us" "stall" "st max" "bnd us" "step us" "st/step"
    printf "$fmt" ----- ------- -------- ----- -------------------------- -------- -------- -------- -------- -------- -------- -------- ------- ------- -------- -------- --------
    for key in "${ROWS[@]}"; do
        IFS='|' read -r cfg tr rcv more <<<"$key"
        rcv+=${more:+, $more}
        if [[ -z ${PUSH[$key]:-} ]]; then printf '%-5s %7s %8s %-5s %-26s FAILED\n' "$cfg" "$(hum "${PARAMS[$cfg]}")" - "$tr" "$rcv"; continue; fi
        printf "$fmt" "$cfg" "$(hum "${PARAMS[$cfg]}")" "${BYTES[$key]}" "$tr" "$rcv" "$(f2 "${FIRST[$key]:-}")" \
            "$(f2 "${PUSH[$key]}")" "${SECS[$key]}" "$(f2 "${RECV[$key]}")" "$(f2 "${MEMCPY[$cfg]:-}")" "$(ratio "${PUSH[$key]}" "${MEMCPY[$cfg]:-}")" \
            "${MERGE[$key]:--}" "${STALL[$key]}" "${STALLMAX[$key]}" "${BND[$key]}" "${STEP[$key]:--}" \
            "$( [[ -n ${STEP[$key]:-} ]] && awk -v s="${STALL[$key]}" -v t="${STEP[$key]}" 'BEGIN{printf (s > 0 ? "%.1e" : "0"), s / t}' || echo -)"
    done
    echo
    echo "aims: push >= 1 GB/s on unix sockets; stall <= one decode step"
    line="push GB/s on unix:"
    for key in "${ROWS[@]}"; do
        [[ $key == *"|unix|"* && $key != *"|adapter"* && -n ${PUSH[$key]:-} ]] && line+=" ${key%%|*} ${key##*|} $(f2 "${PUSH[$key]}");"
    done
    echo "${line%;}"
    line="stall max / decode step:"
    for key in "${ROWS[@]}"; do
        label=${key#*|*|}
        [[ -n ${STEP[$key]:-} && -n ${STALLMAX[$key]:-} ]] &&
            line+=" ${key%%|*} ${label//|/, } ${STALLMAX[$key]}/${STEP[$key]} us;"
    done
    [[ $line == *";" ]] && echo "${line%;}"
} | tee "$W/sync.txt"
((NFAIL == 0)) || { echo "sync.sh: $NFAIL measurements failed" >&2; exit 1; }
