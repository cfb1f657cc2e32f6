#!/bin/bash
# rl-learn as data-parallel ranks (man/rl-learn.1 DATA-PARALLEL RANKS): under
# mpirun -np 2 and 3 it takes the steps one process takes on the same global
# batches (the weights within 1e-5 of each tensor's largest, the losses within
# 1e-5 relative: the order of the gradient's sums is all that differs), its
# checkpoints are one process's, --resume continues it, and a rank that dies
# or hangs ends the job with a clear message instead of hanging it; so do
# LoRA adapters (rl-learn --lora-rank), the only parameters then.
# The single-rank path (RLPIPE_DIST=1) runs everywhere, also under the
# sanitizers; the multi-rank cases need mpirun and a build with MPI.
# also-asan
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py${PYTHONPATH:+:$PYTHONPATH}
# One thread per rank: the ranks share this machine's cores.
export RLPIPE_THREADS=1 OMPI_MCA_btl=self,vader,tcp

"$PY" - <<'EOF' || { fail setup "could not write the model and records"; finish; }
import random, rltest, llama_ref
llama_ref.random_model("m", hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=128, seed=3)
random.seed(1)
recs = []
for g in range(24):   # groups of 4, of different lengths, so that the shares differ in size
    for k in range(4):
        recs.append({"group": g, "prompt_ids": [random.randrange(128) for _ in range(random.randint(1, 6))],
                     "ids": [random.randrange(128) for _ in range(random.randint(2, 9))],
                     "reward": float(random.random() < 0.5)})
open("r.rlr", "wb").write(rltest.write_stream(recs))
# the same with the sampler's log-probabilities, for rl-learn --tis
lp = [dict(r, logp=[-random.uniform(0.5, 4) for _ in r["ids"]]) for r in recs]
open("tis.rlr", "wb").write(rltest.write_stream(lp))
open("long.rlr", "wb").write(rltest.write_stream([dict(r, group=r["group"] + 24 * i) for i in range(8) for r in recs]))
EOF
learn=(--init m --batch 32 --lr 1e-4 --max-steps 3 r.rlr)

# same_run NAME A B TOL: checkpoints A and B hold the same versions and files;
# every version's config.json and state.json are equal, its weights and AdamW
# moments (where it has them) within TOL of each tensor's largest value (0: bit for bit); the
# metrics A.jsonl and B.jsonl have the same steps with losses and gradient
# norms within TOL relative.
same_run() {
    pycheck "$1" "$2" "$3" "$4" <<'EOF'
import json, os, sys
import numpy as np
from safetensors.numpy import load_file
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
va, vb = sorted(os.listdir(a)), sorted(os.listdir(b))
assert va == vb, f"{a} holds {va}, {b} holds {vb}"
worst = 0.0
for v in va:
    if not v.startswith("v"):   # latest, and the writers' lock
        assert open(f"{a}/{v}").read() == open(f"{b}/{v}").read(), f"{v} differs"
        continue
    fa, fb = sorted(os.listdir(f"{a}/{v}")), sorted(os.listdir(f"{b}/{v}"))
    assert fa == fb, f"{v}: files {fa} and {fb}"
    for f in ("config.json", "adapter_config.json", "state.json"):
        if f in fa:   # (a LoRA run's versions hold an adapter instead of a model)
            assert open(f"{a}/{v}/{f}").read() == open(f"{b}/{v}/{f}").read(), f"{v}/{f} differs"
    for f in ("model.safetensors", "adapter_model.safetensors", "optimizer.safetensors"):
        if f not in fa:   # a version without AdamW's state (--state-every), in both
            continue
        ta, tb = load_file(f"{a}/{v}/{f}"), load_file(f"{b}/{v}/{f}")
        assert ta.keys() == tb.keys(), f"{v}/{f}: not the same tensors"
        for k in ta:
            d = float(np.abs(ta[k] - tb[k]).max()) / max(float(np.abs(ta[k]).max()), 1e-30)
            assert d <= tol, f"{v}/{f} {k}: max difference {d:.3g} of its largest value, bound {tol}"
            worst = max(worst, d)
ma, mb = ([json.loads(l) for l in open(p + ".jsonl")] for p in (a, b))
assert [m["step"] for m in ma] == [m["step"] for m in mb] and len(ma) == 3, f"steps {len(ma)} and {len(mb)}"
for x, y in zip(ma, mb):
    for k in ("samples", "groups", "trained", "tokens", "fwd_tokens"):
        assert x[k] == y[k], f"step {x['step']}: {k} {x[k]} and {y[k]}"
    for k in ("loss", "grad_norm", "entropy", "reward_mean", "adv_std", "k3", "capped"):
        if x[k] is None or y[k] is None:   # (k3 and capped: records with logp and logp_learner, or --tis)
            assert x[k] is None and y[k] is None, f"step {x['step']}: {k} {x[k]!r} and {y[k]!r}"
            continue
        d = abs(x[k] - y[k]) / max(abs(x[k]), 1e-30)
        assert d <= max(tol, 1e-12) or (tol == 0 and x[k] == y[k]), f"step {x['step']}: {k} {x[k]!r} and {y[k]!r}"
print(f"# {b} against {a}: {sum(v.startswith('v') for v in va)} versions, largest difference {worst:.2e} of a tensor's largest value")
EOF
}

rl-learn -q "${learn[@]}" --out one --metrics one.jsonl 2>err || fail "one process" "$(head -c 300 err)"

# ---- one rank without MPI (RLPIPE_DIST=1): the data-parallel path, bit for bit one process's
RLPIPE_DIST=1 rl-learn "${learn[@]}" --out self --metrics self.jsonl 2>err ||
    fail "RLPIPE_DIST=1" "$(head -c 300 err)"
check "RLPIPE_DIST=1: one rank, its collectives 'self', AdamW's moments of all parameters" "stderr: $(head -c 300 err)" \
    grep -q '^rl-learn: 1 ranks (self); AdamW.s moments of 78144 of 78144 parameters' err
same_run "RLPIPE_DIST=1: the checkpoints and metrics of one process, bit for bit" one self 0

# --state-every 2: AdamW's state in v0, v2 and the last, v3; the ranks leave out
# the moments' gather together (a rank that gathered alone would hang the job).
state_every() {  # state_every NAME DIR: v1 without optimizer.safetensors, v0, v2 and v3 with it
    check "$1: AdamW's state in v0, v2 and v3 only" "$(ls "$2"/v*/optimizer.safetensors 2>&1)" \
        eval '[ ! -e '"$2"'/v000001/optimizer.safetensors ] && [ -e '"$2"'/v000002/optimizer.safetensors ] &&
              [ -e '"$2"'/v000003/optimizer.safetensors ] && [ "$(cat '"$2"'/latest)" = v000003 ]'
}
rl-learn -q "${learn[@]}" --state-every 2 --out one_se --metrics one_se.jsonl 2>err ||
    fail "--state-every 2, one process" "$(head -c 300 err)"
RLPIPE_DIST=1 rl-learn -q "${learn[@]}" --state-every 2 --out self_se --metrics self_se.jsonl 2>err ||
    fail "--state-every 2, RLPIPE_DIST=1" "$(head -c 300 err)"
state_every "--state-every 2, RLPIPE_DIST=1" self_se
same_run "--state-every 2, RLPIPE_DIST=1: one process's checkpoints and metrics, bit for bit" one_se self_se 0

lora=(--lora-rank 4 --lora-targets q_proj,v_proj,down_proj --lr 1e-3)
rl-learn -q "${learn[@]}" "${lora[@]}" --out one_lora --metrics one_lora.jsonl 2>err ||
    fail "LoRA, one process" "$(head -c 300 err)"
RLPIPE_DIST=1 rl-learn -q "${learn[@]}" "${lora[@]}" --out self_lora --metrics self_lora.jsonl 2>err ||
    fail "LoRA, RLPIPE_DIST=1" "$(head -c 300 err)"
same_run "LoRA, RLPIPE_DIST=1: one process's adapters, AdamW's state and metrics, bit for bit" one_lora self_lora 0

rl-learn -q --init m --batch 32 --lr 1e-4 --max-steps 3 --tis 2 tis.rlr --out one_tis --metrics one_tis.jsonl 2>err ||
    fail "--tis 2, one process" "$(head -c 300 err)"
check "--tis 2: k3 and capped in every step's metrics" "$(head -c 300 one_tis.jsonl)" "$PY" -c '
import json
m = [json.loads(l) for l in open("one_tis.jsonl")]
assert len(m) == 3 and all(x["k3"] > 0 and 0 <= x["capped"] <= 1 for x in m), m'

# ---- several ranks
if ! mpi_ready; then   # (the single-rank path above ran)
    skip "mpirun -np 2 and 3" "$no_mpi"
    finish
fi
mpi() { timeout 120 mpirun -np "$@"; }

for n in 2 3; do
    mpi $n rl-learn "${learn[@]}" --out np$n --metrics np$n.jsonl 2>err_$n ||
        fail "mpirun -np $n" "$(head -c 400 err_$n)"
    check "mpirun -np $n: rank 0 names the ranks and its part of AdamW's moments" "stderr: $(head -c 300 err_$n)" \
        grep -q "^rl-learn: $n ranks (mpi); AdamW.s moments of [0-9]* of 78144" err_$n
    check "mpirun -np $n: one line per step and one summary, from rank 0 alone" "stderr: $(head -c 600 err_$n)" \
        eval '[ "$(grep -c "^rl-learn: step " err_'$n')" = 3 ] && [ "$(grep -c "^rl-learn: 3 steps " err_'$n')" = 1 ] &&
              grep -q ", $n ranks$" err_'$n
    same_run "mpirun -np $n: the checkpoints and metrics of one process, within 1e-5" one np$n 1e-5
done

mpi 2 rl-learn "${learn[@]}" --state-every 2 --out np2_se --metrics np2_se.jsonl 2>err ||
    fail "--state-every 2, mpirun -np 2" "$(head -c 400 err)"
state_every "--state-every 2, mpirun -np 2" np2_se
same_run "--state-every 2, mpirun -np 2: one process's checkpoints and metrics, within 1e-5" one_se np2_se 1e-5

# LoRA: the adapters' gradients reduce-scattered, their moments sharded
mpi 2 rl-learn "${learn[@]}" "${lora[@]}" --out np2_lora --metrics np2_lora.jsonl 2>err ||
    fail "LoRA, mpirun -np 2" "$(head -c 400 err)"
same_run "LoRA, mpirun -np 2: one process's adapters, AdamW's state and metrics, within 1e-5" one_lora np2_lora 1e-5

# --tis 2: the learner's own weights; k3 and capped summed over the ranks
mpi 2 rl-learn --init m --batch 32 --lr 1e-4 --max-steps 3 --tis 2 tis.rlr --out np2_tis --metrics np2_tis.jsonl 2>err ||
    fail "--tis 2, mpirun -np 2" "$(head -c 400 err)"
same_run "--tis 2, mpirun -np 2: one process's checkpoints and metrics (k3 and capped too), within 1e-5" one_tis np2_tis 1e-5

# ---- --resume under MPI: two steps, then the third, as the run that took three at once
mpi 2 rl-learn --init m --batch 32 --lr 1e-4 --max-steps 2 r.rlr --out res --metrics res.jsonl 2>err || fail "--resume: the first two steps" "$(head -c 300 err)"
mpi 2 rl-learn --resume --out res --batch 32 --lr 1e-4 --max-steps 3 --metrics res.jsonl r.rlr 2>err ||
    fail "--resume under mpirun -np 2" "$(head -c 300 err)"
check "--resume under mpirun -np 2: skips the 64 records its steps consumed" "stderr: $(head -c 300 err)" \
    grep -q 'skipping the 64 records' err
same_run "--resume under mpirun -np 2: the checkpoints and metrics of the run without a stop, bit for bit" np2 res 0

# ---- a rank that dies or hangs: the job ends, non-zero, saying so
# The input (768 records) stops after its first 1500 bytes until go_HOW
# exists: the signal reaches rank 1 between steps, and the rest of the input
# needs it for the next ones.
feed() { head -c 1500 long.rlr; while [ ! -e go_$1 ]; do sleep 0.1; done; tail -c +1501 long.rlr; }
# the rank-1 process of the job whose --out is $1
rank1() {
    local p
    for p in $(pgrep -f "rl-learn .*--out $1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && echo "$p"
    done
}
for how in KILL STOP; do
    out=dies_$how
    start=$SECONDS
    feed $how | mpi 2 rl-learn --init m --batch 8 --lr 1e-4 --collective-timeout 3 --out $out >/dev/null 2>err_$how &
    job=$!
    for _ in $(seq 300); do [ -e $out/latest ] && [ -n "$(rank1 $out)" ] && break; sleep 0.1; done
    pid=$(rank1 $out)
    [ -n "$pid" ] && kill -$how "$pid"
    touch go_$how
    wait $job
    rc=$?
    took=$((SECONDS - start))
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
    case $how in
    KILL) what="rank 1 killed (SIGKILL)"; says='exited on signal 9' ;;
    STOP) what="rank 1 stopped (SIGSTOP), --collective-timeout 3"
          says="rl-learn: error: rank 0 of 2: (reduce-scatter of the gradient|all-gather of the parameters|sum of the step.s statistics|broadcast of the input|gather of the optimizer state): no answer from the other ranks for 3 s \\(a rank has died or hangs\\)" ;;
    esac
    check "$what: the job ends with a non-zero status within 60 s" \
        "status $rc after $took s, rank 1 pid '${pid}'; stderr: $(head -c 400 err_$how)" \
        eval '[ -n "$pid" ] && [ '$rc' -ne 0 ] && [ '$took' -lt 60 ]'
    check "$what: the message says what happened" "stderr: $(head -c 600 err_$how)" grep -Eq "$says" err_$how
done
finish
