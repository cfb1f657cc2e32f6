#!/bin/bash
# eval.sh TEST OUT MODEL... — greedy held-out accuracy of each model (a model
# or checkpoint directory), in f32 (the learner's own policy, not the
# sampler's precision): rl-sample --temperature 0 TEST | rl-cat --stats --json.
# Appends one JSON line per model to OUT: {"model": DIR, "version": V,
# "accuracy": A, "samples": N, "tokens_mean": T, "dtype": D, "temperature": T}.
# Exit 1 if one fails. EVAL_DTYPE, EVAL_TEMPERATURE and EVAL_GROUP (samples
# per problem) change what is measured: the sampled reward at a precision.
# With EVAL_GROUP G > 1 the line also has "pass@K" and, when the records
# carry a verifier's "pred", "maj@K" for each K of EVAL_PASS_AT (default
# 1,G; rl-cat --stats --pass-at).
set -u
BIN=${RLPIPE_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/bin}
MAX_NEW=${MAX_NEW:-48}
dtype=${EVAL_DTYPE:-f32} temp=${EVAL_TEMPERATURE:-0} group=${EVAL_GROUP:-1}
pass_at=()
[ "$group" -gt 1 ] && pass_at=(--pass-at "${EVAL_PASS_AT:-1,$group}")
[ $# -ge 3 ] || { echo "usage: eval.sh TEST OUT MODEL..." >&2; exit 2; }
test=$1 out=$2
shift 2
for m; do
    stats=$("$BIN/rl-sample" -q --model "$m" --dtype "$dtype" --temperature "$temp" -n "$group" --seed 7 \
        --max-new-tokens "$MAX_NEW" "$test" |
        "$BIN/rl-cat" -q --stats --json "${pass_at[@]}") || { echo "eval.sh: $m: evaluation failed" >&2; exit 1; }
    # {"records":500,...,"accuracy":0.678,"tokens_mean":27.5,...,"ver_min":630,...}
    field() { printf '%s' "$stats" | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
    acc=$(field accuracy) n=$(field records) v=$(field ver_min) tm=$(field tokens_mean)
    [ -n "$acc" ] && [ -n "$n" ] && [ -n "$v" ] || { echo "eval.sh: $m: no accuracy in: $stats" >&2; exit 1; }
    extra=
    if [ ${#pass_at[@]} -gt 0 ]; then
        for k in ${pass_at[1]//,/ }; do
            for key in "pass@$k" "maj@$k"; do
                x=$(field "$key")
                [ -z "$x" ] || extra+=", \"$key\": $x"
            done
        done
    fi
    printf '{"model": "%s", "version": %s, "accuracy": %s, "samples": %s, "tokens_mean": %s, "dtype": "%s", "temperature": %s%s}\n' \
        "$m" "$v" "$acc" "$n" "$tm" "$dtype" "$temp" "$extra" >>"$out"
    echo "eval.sh: $m: version $v, $dtype, temperature $temp: accuracy $acc ($n samples)" >&2
done
