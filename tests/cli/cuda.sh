#!/bin/bash
# The tools on the GPU (--device; man/rl-sample.1, rl-ratio.1, rl-learn.1).
# Everywhere, with any GPU hidden (CUDA_VISIBLE_DEVICES=): --device cuda is
# an error that says why (exit 1, nothing trained), and --device auto computes
# on the CPU. With a GPU: rl-sample on a fixed --seed gives the same bytes
# twice; its log-probabilities are those the CPU scores; rl-ratio's
# logp_learner and one rl-learn step (loss, gradient norm) agree with
# --device cpu on the same records; --device auto picks the GPU. Without a
# GPU (or in a build without CUDA) these GPU cases print SKIP.
# Tolerances: 1e-4 nats on log-probabilities (f32 through every layer in
# another summation order, as tests/unit/test_cuda.c allows), 1e-4 relative
# on the learner's loss and gradient norm.
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1


# The tiny model (models/tiny: config and tokenizer) with random weights
# large enough that log-probs spread over several nats; arithmetic prompts;
# records sampled on the CPU at temperatures 1 and 0.7 (8 groups of 4 each).
tiny=(--config "$RLPIPE_ROOT/models/tiny/config.json" --seed 3 --init-std 0.08)
rl-learn -q "${tiny[@]}" --device cpu --out m </dev/null || { fail setup "rl-learn could not write the tiny model"; finish; }
for i in 0 1 2 3 4 5 6 7; do
    printf '{"prompt": "%d+%d=", "answer": "%d"}\n' $((i * 7)) $((i * 3)) $((i * 10))
done >p.jsonl
if ! { rl-sample -q --model m --device cpu -n 4 --seed 1 --max-new-tokens 24 p.jsonl -o cpu.rlr &&
    rl-sample -q --model m --device cpu -n 4 --seed 2 --max-new-tokens 24 --temperature 0.7 p.jsonl -o cpu07.rlr; }; then
    fail setup "rl-sample --device cpu could not write the records"
    finish
fi

# ---- no GPU: with every GPU hidden, these run on any machine and build
nogpu='--device cuda: (this build has no CUDA backend|no GPU found|no usable CUDA device|CUDA device 0 cannot be used|cuBLAS cannot)'
expect "rl-sample --device cuda without a GPU: exit 1 saying why" 1 "^rl-sample: error: .*$nogpu" -- \
    env CUDA_VISIBLE_DEVICES= rl-sample --model m --device cuda p.jsonl -o x.rlr
expect "rl-ratio --device cuda without a GPU: exit 1 saying why" 1 "^rl-ratio: error: .*$nogpu" -- \
    env CUDA_VISIBLE_DEVICES= rl-ratio --model m --device cuda cpu.rlr -o x.rlr
expect "rl-learn --device cuda without a GPU: exit 1 saying why" 1 "^rl-learn: error: $nogpu" -- \
    env CUDA_VISIBLE_DEVICES= rl-learn --init m --device cuda --out ck --loss sft --batch 4 cpu.rlr
check "rl-learn --device cuda without a GPU: no checkpoint written" "ck: $(ls -d ck 2>&1)" [ ! -e ck ]
expect "rl-learn --config --device cuda without a GPU: exit 1 saying why" 1 "^rl-learn: error: $nogpu" -- \
    env CUDA_VISIBLE_DEVICES= rl-learn "${tiny[@]}" --device cuda --out ck2 cpu.rlr
expect "rl-sample --device auto without a GPU: computes on the CPU" 0 '; f32 on cpu, ' -- \
    env CUDA_VISIBLE_DEVICES= rl-sample --model m --device auto --max-prompts 1 --max-new-tokens 2 p.jsonl -o x.rlr
expect "rl-learn --device auto without a GPU: computes on the CPU" 0 ' s on cpu$' -- \
    env CUDA_VISIBLE_DEVICES= rl-learn --init m --device auto --out ck_auto --loss sft --batch 4 --max-steps 1 cpu.rlr

# ---- is there a GPU (and does this build have the CUDA backend)? rl-sample says.
gpu=0 why=
rl-sample -q --model m --device cuda --max-prompts 1 --max-new-tokens 1 p.jsonl -o probe.rlr 2>probe.err
rc=$?
if [ "$rc" -eq 0 ]; then
    gpu=1
elif [ "$rc" -eq 1 ] && grep -Eq -- "$nogpu" probe.err; then
    why="$(grep -Eo -- '--device cuda: .*' probe.err | head -n 1)"
else
    fail "rl-sample --device cuda runs, or says there is no GPU" "exit status $rc: $(head -c 400 probe.err)"
    why="rl-sample --device cuda failed"
fi
# on_gpu NAME: true with a GPU; without, prints "SKIP NAME: why" and is false.
on_gpu() { [ "$gpu" = 1 ] && return 0; skip "$1" "$why"; return 1; }

# sample_twice NAME OUT ARG...: rl-sample --device cuda twice with one --seed
# and --no-provenance (8 prompts, groups of 4, 5 slots): the same bytes, a
# valid stream of 32 records, kept as OUT.
sample_twice() {
    local name=$1 out=$2 k
    shift 2
    on_gpu "$name" || return
    for k in 1 2; do
        if ! rl-sample -q --model m --device cuda -n 4 --slots 5 --seed 7 --no-provenance --max-new-tokens 24 "$@" \
            p.jsonl -o "run$k.rlr" 2>err; then
            fail "$name" "run $k: exit status $?: $(head -c 400 err)"
            return
        fi
    done
    if ! cmp -s run1.rlr run2.rlr; then
        fail "$name" "the two outputs differ: $(cmp run1.rlr run2.rlr 2>&1)"
    elif [ "$(rl-cat --json run1.rlr 2>/dev/null | wc -l)" != 32 ]; then
        fail "$name" "not a valid stream of 32 records: $(rl-cat --check run1.rlr 2>&1 | head -c 300)"
    else
        pass "$name"
        mv run1.rlr "$out"
    fi
}

# ---- with a GPU
sample_twice "rl-sample --device cuda, one --seed twice: byte-identical output" a.rlr
sample_twice "rl-sample --device cuda at temperature 1 with top-p 0.9, one --seed twice: byte-identical output" b.rlr \
    --temperature 1 --top-p 0.9
sample_twice "rl-sample --device cuda, bf16 weights at temperature 0.7 with top-k 50, one --seed twice: byte-identical output" \
    c.rlr --dtype bf16 --temperature 0.7 --top-k 50

name="rl-sample --device cuda's logp (f32, temperature 1, no top-k/top-p) are the CPU scorer's within 1e-4 nats"
if on_gpu "$name"; then
    if [ ! -s a.rlr ]; then
        fail "$name" "no records: the first rl-sample case failed"
    elif ! rl-ratio -q --model m --device cpu a.rlr -o a_cpu.rlr 2>err || ! rl-cat --json a_cpu.rlr >a_cpu.jsonl 2>err; then
        fail "$name" "rl-ratio --device cpu: $(head -c 400 err)"
    else
        pycheck "$name" a_cpu.jsonl <<'EOF'
import json, sys
worst, n = 0.0, 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    for a, b in zip(r["logp"], r["logp_learner"]):
        worst, n = max(worst, abs(a - b)), n + 1
assert n >= 100, f"only {n} tokens"
assert worst <= 1e-4, f"max |logp - logp_learner(cpu)| = {worst:.3g} nats over {n} tokens, bound 1e-4"
print(f"# rl-sample --device cuda: max |logp - logp_learner(cpu)| {worst:.2e} nats over {n} tokens")
EOF
    fi
fi

name="rl-ratio --device cuda: logp_learner within 1e-4 nats of --device cpu, at temperatures 1 and 0.7"
if on_gpu "$name"; then
    for d in cpu cuda; do
        rl-ratio -q --model m --device $d cpu.rlr cpu07.rlr -o r_$d.rlr 2>err_$d && rl-cat --json r_$d.rlr >r_$d.jsonl 2>>err_$d
    done
    pycheck "$name" r_cpu.jsonl r_cuda.jsonl <<'EOF'
import json, sys
cpu, gpu = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
assert len(cpu) == len(gpu) == 64, f"{len(cpu)} records with --device cpu, {len(gpu)} with cuda; expected 64"
worst, n = 0.0, 0
for c, g in zip(cpu, gpu):
    assert c["ids"] == g["ids"] and len(g["logp_learner"]) == len(g["ids"]), f"record {c['id']}: not the same record"
    for a, b in zip(c["logp_learner"], g["logp_learner"]):
        worst, n = max(worst, abs(a - b)), n + 1
assert worst <= 1e-4, f"max |logp_learner cuda - cpu| = {worst:.3g} nats over {n} tokens, bound 1e-4"
print(f"# rl-ratio: max |logp_learner cuda - cpu| {worst:.2e} nats over {n} tokens")
EOF
fi

name="rl-learn --device cuda: one sft step from the tiny model, loss, grad_norm and entropy within 1e-4 relative of --device cpu"
if on_gpu "$name"; then
    for d in cpu cuda; do
        rl-learn -q "${tiny[@]}" --device $d --out ck_$d --loss sft --batch 32 --max-steps 1 --metrics m_$d.jsonl cpu.rlr \
            2>err_$d || fail "$name" "--device $d: $(head -c 400 err_$d)"
    done
    pycheck "$name" m_cpu.jsonl m_cuda.jsonl <<'EOF'
import json, sys
cpu, gpu = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
assert len(cpu) == len(gpu) == 1, f"{len(cpu)} metrics lines with --device cpu, {len(gpu)} with cuda; expected 1"
(c,), (g,) = cpu, gpu
assert c["trained"] == g["trained"] == 32 and c["tokens"] == g["tokens"], f"not the same batch: {c} {g}"
for k in ("loss", "grad_norm", "entropy"):
    e = abs(g[k] - c[k]) / abs(c[k])
    assert e <= 1e-4, f"{k}: {g[k]!r} with cuda, {c[k]!r} with cpu: relative difference {e:.3g}, bound 1e-4"
    print(f"# rl-learn {k}: cpu {c[k]:.9g}, cuda {g[k]:.9g}, relative difference {e:.2e}")
EOF
fi

name="rl-learn --device cuda as one data-parallel rank (RLPIPE_DIST=1): NCCL's reduce-scatter and all-gather, the same checkpoint as without"
if on_gpu "$name"; then
    for v in 0 1; do
        RLPIPE_DIST=$v rl-learn "${tiny[@]}" --device cuda --out ck_dist$v --loss sft --batch 32 --max-steps 1 \
            --metrics m_dist$v.jsonl cpu.rlr 2>err_dist$v || fail "$name" "RLPIPE_DIST=$v: $(head -c 400 err_dist$v)"
    done
    check "$name: the start-up line names NCCL" "stderr: $(head -c 400 err_dist1)" grep -q '1 ranks (nccl)' err_dist1
    check "$name: the same weights, moments and metrics (but the timings), bit for bit" \
        "latest: $(cat ck_dist0/latest) $(cat ck_dist1/latest); $(cmp ck_dist0/v000001/model.safetensors ck_dist1/v000001/model.safetensors 2>&1)" \
        eval '[ "$(cat ck_dist0/latest)" = v000001 ] && [ "$(cat ck_dist1/latest)" = v000001 ] &&
              cmp -s ck_dist0/v000001/model.safetensors ck_dist1/v000001/model.safetensors &&
              cmp -s ck_dist0/v000001/optimizer.safetensors ck_dist1/v000001/optimizer.safetensors &&
              [ "$(sed "s/,\"tokens_per_s.*//" m_dist0.jsonl)" = "$(sed "s/,\"tokens_per_s.*//" m_dist1.jsonl)" ]'
fi

name="rl-learn --device auto with a GPU: computes on the GPU"
if on_gpu "$name"; then
    expect "$name" 0 ' s on cuda$' -- rl-learn --init m --device auto --out ck_gauto --loss sft --batch 4 --max-steps 1 cpu.rlr
fi
finish
