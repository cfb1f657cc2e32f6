#!/bin/bash
# Several samplers, one learner (doc/design.md §5): two rl-sample on the tiny
# model (models/tiny, random weights), each with --max-lag K and its share of
# the learner's batch (--batch B/2), merged by rl-cat --merge --round N into
# rl-ratio and rl-learn --batch B (two data-parallel ranks under mpirun
# where there is one and the build has MPI), with rl-sync --watch pushing every version
# to both samplers and the scorer while they work. The learner's measured lag
# never exceeds K, batch b is round b (N groups of each sampler), and every
# record sampled is accounted for: trained on, or left over.
# (man/rl-cat.1 "Rounds and the lag bound"; sample/admission.h.)
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$T"' EXIT
export PYTHONPATH=$RLPIPE_ROOT/tests/py

# The learner: mpirun -np 2 rl-learn, or one process where mpi_ready (lib.sh)
# says it cannot run.
learner=(rl-learn)
mpi_ready && learner=(mpirun -np 2 -x RLPIPE_THREADS=1 rl-learn)
echo "# the learner: ${learner[*]}"

K=1          # --max-lag
G=2          # samples per prompt
N=2          # groups of each sampler per round
S=2          # samplers
B=$((S * N * G))   # records per learner step: 8; each sampler's share B/S = 4
P=12         # prompts per sampler: 24 records each, 6 rounds, 6 steps

tiny=(--config "$RLPIPE_ROOT/models/tiny/config.json" --seed 3 --init-std 0.08)
rl-learn -q "${tiny[@]}" --device cpu --out m </dev/null || { fail setup "rl-learn could not write the tiny model"; finish; }
for s in 1 2; do
    for i in $(seq 0 19); do printf '{"prompt": "%d+%d=", "answer": "%d"}\n' $((i * s)) $((i + 3)) $((i * s + i + 3)); done >p$s.jsonl
done
mkfifo s1 s2
sample() {  # sample S: sampler S into pipe sS, taking weights at unix:aS.sock
    timeout 120 rl-sample --model m --device cpu -n $G --slots 4 --max-new-tokens 8 --max-prompts $P --seed "$1" \
        --listen "unix:$T/a$1.sock" --max-lag $K --batch $((B / S)) p$1.jsonl >s$1 2>sample$1.err
    echo $? >sample$1.status
}
sample 1 &
sample 2 &
(
    timeout 120 rl-cat --merge --round $N s1 s2 2>merge.err |
        timeout 120 rl-ratio --model m --device cpu --listen "unix:$T/r.sock" --batch $B 2>ratio.err |
        tee scored.rlr |
        timeout 120 "${learner[@]}" --init m --out ck --device cpu --batch $B --lr 3e-2 --keep 0 --metrics met.jsonl 2>learn.err
    echo "${PIPESTATUS[*]}" >pipe.status
) &
for _ in $(seq 300); do [ -e ck/latest ] && break; sleep 0.1; done
timeout 120 rl-sync --watch ck --to "unix:$T/a1.sock" --to "unix:$T/a2.sock" --to "unix:$T/r.sock" 2>sync.err
echo $? >sync.status
wait

tails() { for f in sample1 sample2 merge ratio learn sync; do printf -- '--- %s: %s\n' $f "$(tail -n 3 $f.err | tr '\n' ' ')"; done; }
[ "${learner[0]}" = mpirun ] && check "the learner ran as 2 ranks" "$(tail -n 2 learn.err)" grep -q ', 2 ranks$' learn.err
check "every tool exits 0: two samplers, merge, rl-ratio, tee, the learner, rl-sync" "$(cat *.status) $(tails)" \
    eval '[ "$(cat sample1.status sample2.status pipe.status sync.status | tr "\n" " ")" = "0 0 0 0 0 0 0 " ]'
check "the samplers took pushed weights" "$(tails)" \
    eval 'grep -qE "weights v[0-9]+ installed from a push" sample1.err && grep -qE "weights v[0-9]+ installed from a push" sample2.err'
check "the merge: 2 sources, 48 records in and out, none dropped, 6 rounds of 2" "$(tail -n 1 merge.err)" \
    grep -qE '^rl-cat: merge of 2 sources: 48 records in, 48 out in 24 groups, 0 dropped in 0 incomplete groups, 6 rounds of 2; s1 24 in, s2 24 in; ' merge.err
pycheck "lag_max <= --max-lag on every step, batch b = round b, every record sampled trained or left" \
    "$K" "$N" "$S" "$B" <<'EOF'
import json, re, sys
from rltest import read_stream
K, N, S, B = map(int, sys.argv[1:])
m = [json.loads(l) for l in open("met.jsonl")]
lags = [x["lag_max"] for x in m]
print(f"# lag_max per step {lags}")
assert all(x <= K for x in lags), f"lag_max per step {lags} exceeds --max-lag {K}"
assert len(m) == 6 and all(x["samples"] == B for x in m), [(x["step"], x["samples"]) for x in m]
# batch b of the learner is round b: N groups of each sampler, its groups j with j // N == b
[(h, recs, _)] = read_stream(open("scored.rlr", "rb").read())
for r in recs:
    b, j = r["group"] // (S * N), r["source_group"]
    assert b == j // N, f"group {r['group']} (sampler {r['source']}'s group {j}) in batch {b}, not round {j // N}"
    assert b - min(r["ver"]) <= K, f"record {r['id']} of sampler {r['source']}: trained at v{b}, ver {r['ver']}"
    assert r["ver_learner"] <= b, r
# every record sampled is trained on or left over
sampled = sum(int(re.search(r"^rl-sample: (\d+) prompts, (\d+) samples,", open(f).read(), re.M).group(2))
              for f in ("sample1.err", "sample2.err"))
left = int(re.search(r"(\d+) records left unused", open("learn.err").read()).group(1))
trained = sum(x["samples"] for x in m)
print(f"# {sampled} sampled = {trained} trained + {left} left; {len(recs)} through rl-ratio")
assert sampled == trained + left == len(recs) == 48, (sampled, trained, left, len(recs))
EOF
finish
