#!/usr/bin/env bash
# bench/env.sh -- multi-turn rollouts (rl-sample --env): how much decoding
# throughput a slow environment costs, with and without the extra KV-cache
# slots that hold the conversations waiting for their environment.
#
# Protocol (fixed before the first run): the 15m model of bench/forward.sh
# (llama, random weights, f32; models/tiny/tokenizer.json and a chat template
# of its own), 128 conversations (-n 1), 3 assistant turns of 32 tokens each
# (--ignore-eos: every turn runs to its length), 64 slots, seed 1. The
# environment answers each of the first two turns with a user's message and
# ends the rollout at the third; it answers
#   - instant: at once (the reference);
#   - slow:    1 s after each request (a thread per request), as a tool that
#              takes a second would.
# Rows: instant with --env-slots 64 (the default), slow with --env-slots 64,
# slow with --env-slots 0 (a waiting conversation holds one of the 64 decode
# slots). The figure is the model's tokens per second: the 12288 tokens the
# model generated over the time from rl-sample's first step to its end
# (the summary line's tokens/s counts the environment's tokens too, and is
# scaled by 12288 / its token count). Median of RUNS rounds (default 3), each
# round running the three rows once in turn.
# Aim: slow with the extra slots at least half the instant figure.
#
# Environment: RUNS=N, BENCH_OUT=DIR (default bench/out), BUILD / BIN.
# Results: the table on stdout and in BENCH_OUT/env.txt, RESULT lines in
# BENCH_OUT/env.results. Takes ~3 minutes on 2 cores.
set -uo pipefail

NAME=env
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=${RUNS:-3}
positive RUNS
FWD=$BUILD/bench/forward
SAMPLE=$BIN/rl-sample
[[ -x $FWD ]] || die "$FWD not found (run: make aux)"
[[ -x $SAMPLE ]] || die "$SAMPLE not found (run: make)"

cleanup() { rm -rf "$W/env-model" "$W/env-prompts.jsonl" "$W/env-instant.py" "$W/env-slow.py"; }
bench_start cleanup

N=128 T=32 TURNS=3 S=64
MODEL_TOKENS=$((N * TURNS * T))
m=$W/env-model
"$FWD" write --model "$m" --config 15m >&2 || die "forward write 15m failed"
sed -i '/"bos_token_id"\|"eos_token_id"/d' "$m/config.json" || die "cannot edit $m/config.json"
cp "$root/models/tiny/tokenizer.json" "$m/" || die "cannot copy the tokenizer"
cat >"$m/tokenizer_config.json" <<'EOF' || die "cannot write the chat template"
{"bos_token": "<|bos|>", "eos_token": "<|eos|>", "chat_template": "{{ '<|bos|>' }}{% for m in messages %}{{ m['role'] + ':\n' + m['content'] + '<|eos|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant:\n' }}{% endif %}"}
EOF
for ((i = 0; i < N; i++)); do
    echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Task $i: what is $((i * 37 % 100)) + $((i * 11 % 50))?\"}]}"
done >"$W/env-prompts.jsonl"
cat >"$W/env-instant.py" <<'EOF'
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    out = {"id": r["id"], "done": True, "reward": 1.0} if r.get("final") else \
          {"id": r["id"], "messages": [{"role": "user", "content": "Go on."}]}
    print(json.dumps(out), flush=True)
EOF
cat >"$W/env-slow.py" <<'EOF'
import json, sys, threading, time
lock = threading.Lock()
def answer(r):
    time.sleep(1.0)
    out = {"id": r["id"], "done": True, "reward": 1.0} if r.get("final") else \
          {"id": r["id"], "messages": [{"role": "user", "content": "Go on."}]}
    with lock:
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
for line in sys.stdin:
    threading.Thread(target=answer, args=(json.loads(line),), daemon=True).start()
EOF

declare -A VALS=() MED=()
ROWS=("instant 64" "slow 64" "slow 0")

# run ENV EXTRA: one rl-sample run; the model's tokens per second.
run() {
    local env=$1 extra=$2 key="$1 $2" line toks tps mtps
    [[ -n ${FAILED[$key]:-} ]] && return
    : >"$ERR"
    if ! "$SAMPLE" --model "$m" --slots $S --env-slots "$extra" -n 1 --max-prompts $N --max-new-tokens $T \
        --max-turns $TURNS --ignore-eos --seed 1 --env "python3 -u $W/env-$env.py" -o /dev/null \
        "$W/env-prompts.jsonl" 2>"$ERR"; then
        fail "$key"; return
    fi
    line=$(grep '^rl-sample: .* tokens/s' "$ERR" | tail -n1)
    read -r toks tps < <(sed -n 's/.* \([0-9]*\) tokens, \([0-9.]*\) tokens\/s.*/\1 \2/p' <<<"$line")
    [[ -n ${toks:-} && $toks -gt $MODEL_TOKENS ]] || { fail "$key" "unexpected summary: $line"; return; }
    mtps=$(awk -v t="$tps" -v a="$toks" -v m=$MODEL_TOKENS 'BEGIN{printf "%.1f", t * m / a}')
    echo "RESULT what=env_${env}_extra$extra model_tokens=$MODEL_TOKENS tokens=$toks model_tok_s=$mtps summary=\"${line#rl-sample: }\"" >>"$RES"
    VALS[$key]+="$mtps "
}

for ((r = 1; r <= RUNS; r++)); do
    echo "round $r of $RUNS" >&2
    for row in "${ROWS[@]}"; do run $row; done
done
for key in "${!VALS[@]}"; do MED[$key]=$(median <<<"${VALS[$key]}"); done
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN{ if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    echo "rlpipe env benchmark: $("$SAMPLE" --version 2>&1 | head -n1); commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores (shared machine); $(uname -sr); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg)"
    echo "15m f32, $S slots, $N conversations of $TURNS turns of $T tokens; medians of $RUNS rounds"
    echo
    fmt='%-8s %10s %14s %12s  %s\n'
    printf "$fmt" env "env-slots" "model tok/s" "vs instant" rounds
    for row in "${ROWS[@]}"; do
        read -r env extra <<<"$row"
        printf "$fmt" "$env" "$extra" "${MED[$row]:-FAILED}" "$(ratio "${MED[$row]:-}" "${MED[instant 64]:-}")" "${VALS[$row]:-}"
    done
    echo
    echo "aim: slow with --env-slots 64 >= 0.5 x instant: $(ratio "${MED[slow 64]:-}" "${MED[instant 64]:-}")"
} | tee "$W/env.txt"
((NFAIL == 0)) || { echo "env.sh: $NFAIL measurements failed" >&2; exit 1; }
