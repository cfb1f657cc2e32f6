#!/bin/bash
# eval.sh TEST OUT MODEL... — greedy held-out accuracy of each model (a model
# or checkpoint directory), in f32 (the learner's own policy, not the
# sampler's precision): rl-sample --temperature 0 TEST | rl-cat --stats --json.
# Appends one JSON line per model to OUT: {"model": DIR, "version": V,
# "accuracy": A, "problems": N, "tokens_mean": T}. Exit 1 if one fails.
set -u
BIN=${RLPIPE_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/bin}
MAX_NEW=${MAX_NEW:-48}
[ $# -ge 3 ] || { echo "usage: eval.sh TEST OUT MODEL..." >&2; exit 2; }
test=$1 out=$2
shift 2
for m; do
    stats=$("$BIN/rl-sample" -q --model "$m" --temperature 0 --max-new-tokens "$MAX_NEW" "$test" |
        "$BIN/rl-cat" -q --stats --json) || { echo "eval.sh: $m: evaluation failed" >&2; exit 1; }
    # {"records":500,...,"accuracy":0.678,"tokens_mean":27.5,...,"ver_min":630,...}
    field() { printf '%s' "$stats" | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
    acc=$(field accuracy) n=$(field records) v=$(field ver_min) tm=$(field tokens_mean)
    [ -n "$acc" ] && [ -n "$n" ] && [ -n "$v" ] || { echo "eval.sh: $m: no accuracy in: $stats" >&2; exit 1; }
    printf '{"model": "%s", "version": %s, "accuracy": %s, "problems": %s, "tokens_mean": %s}\n' \
        "$m" "$v" "$acc" "$n" "$tm" >>"$out"
    echo "eval.sh: $m: version $v, held-out accuracy $acc ($n problems)" >&2
done
