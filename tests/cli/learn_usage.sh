#!/bin/bash
# rl-learn's help and version, its usage errors (exit 2, nothing written), and
# a short training run with resume and a bad record under the sanitizers.
# (man/rl-learn.1; doc/design.md §7.)
# also-asan
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py${PYTHONPATH:+:$PYTHONPATH}


"$PY" - <<'EOF2' || { fail setup "could not write the model and records"; finish; }
import rltest, llama_ref
llama_ref.random_model("m", hidden=32, inter=48, layers=1, heads=2, kv_heads=1, vocab=64, seed=2)
recs = [{"group": i // 2, "prompt_ids": [1 + i, 2], "ids": [3, 4 + i, 5], "reward": float(i % 2)} for i in range(12)]
open("r.rlr", "wb").write(rltest.write_stream(recs))
recs[9]["mask"] = [1, 0]
open("bad.rlr", "wb").write(rltest.write_stream(recs))
EOF2

# ---- help and version
expect "--help: exit 0" 0 '' -- rl-learn --help
check "--help: usage on stdout, nothing on stderr" "stdout: $(head -c 200 out); stderr: $(head -c 200 err)" \
    eval 'grep -qE "^Usage: rl-learn " out && [ ! -s err ]'
help_matches_man rl-learn 30
expect "--version: exit 0" 0 '' -- rl-learn --version
check "--version: 'rl-learn (rlpipe) 0.1.0', then the zstd and msgpack-c versions" "stdout: $(head -c 200 out)" \
    eval '[ "$(head -n 1 out)" = "rl-learn (rlpipe) 0.1.0" ] && sed -n 2p out | grep -qi zstd && sed -n 2p out | grep -qi msgpack'

# ---- usage errors: exit 2, the reason and the hint, and no checkpoint directory
usage() {  # usage NAME PATTERN ARGS...
    local name=$1 pattern=$2
    shift 2
    rm -rf ck
    expect "$name: usage error" 2 "^rl-learn: error: $pattern" -- rl-learn "$@" r.rlr
    check "$name: the hint to --help, nothing written" "stderr: $(head -c 300 err); ck: $(ls -d ck 2>&1)" \
        eval 'grep -qx "Try '\''rl-learn --help'\'' for more information." err && [ ! -e ck ] && [ ! -s out ]'
}
usage "no --out" '--out CKPT' --init m
usage "neither --init nor --config" 'give the initial model' --out ck
usage "both --init and --config" 'give the initial model' --init m --config m/config.json --out ck
usage "--resume with --init" '--resume takes the model from CKPT/latest: leave out --init' --resume --init m --out ck
usage "--resume with --config" '--resume takes the model from CKPT/latest: leave out --config' --resume --config m/config.json --out ck
usage "--no-skip without --resume" '--no-skip goes with --resume' --init m --no-skip --out ck
usage "--batch 0" '--batch' --init m --out ck --batch 0
usage "--batch -1" '--batch' --init m --out ck --batch -1
usage "--micro 0" '--micro' --init m --out ck --micro 0
usage "--epochs 2 with --loss pg" '--epochs: only the ppo, cispo and gspo losses take several steps per batch' \
    --init m --out ck --epochs 2
usage "--epochs 2 with --loss sft" '--epochs' --init m --out ck --loss sft --epochs 2
usage "--epochs 0" '--epochs' --init m --out ck --loss ppo --epochs 0
usage "--schedule cosine without --total-steps" '--schedule cosine needs --total-steps' \
    --init m --out ck --schedule cosine
usage "--schedule cosine with --total-steps = --warmup" '--schedule cosine needs --total-steps larger than --warmup' \
    --init m --out ck --schedule cosine --warmup 10 --total-steps 10
usage "--schedule linear" "--schedule 'linear': use constant or cosine" --init m --out ck --schedule linear
usage "--loss grpo" "--loss 'grpo': use pg, ppo, cispo, gspo or sft" --init m --out ck --loss grpo
usage "--adv ppo" "--adv 'ppo': use grpo, drgrpo or rloo" --init m --out ck --adv ppo
usage "--norm words" "--norm 'words': use seqs, tokens or const:N" --init m --out ck --norm words
usage "--norm const:0" "--norm 'const:0': const:N needs a positive number N" --init m --out ck --norm const:0
usage "--norm const:x" "--norm 'const:x'" --init m --out ck --norm const:x
usage "--lr -1" '--lr' --init m --out ck --lr -1
usage "--lr nan" '--lr' --init m --out ck --lr nan
usage "--beta1 1" '--beta1' --init m --out ck --beta1 1
usage "--eps 1" '--eps' --init m --out ck --eps 1
usage "--eps-low above 1" '--eps-low: 1.5 is outside \[0, 1\]' --init m --out ck --loss ppo --eps-low 1.5
usage "--eps-low negative" '--eps-low: -0.1 is outside \[0, 1\]' --init m --out ck --loss cispo --eps-low -0.1
usage "--eps-high negative" '--eps-high: -0.2 is outside \[0, ' --init m --out ck --loss ppo --eps-high -0.2
usage "--keep -1" '--keep' --init m --out ck --keep -1
usage "--state-every 0" '--state-every: must be at least 1' --init m --out ck --state-every 0
usage "--tis 0" '--tis: the cap C must be above 0' --init m --out ck --tis 0
usage "--tis with --loss sft" '--tis weighs the pg, ppo and cispo losses, not sft' --init m --out ck --tis 2 --loss sft
usage "--tis with --loss gspo" "--tis weighs each token, and gspo's ratio is the sequence's: weigh the sequences before rl-learn with rl-ratio --mode geo \(or seq\)" \
    --init m --out ck --loss gspo --tis 2
usage "--kl-coef -1" '--kl-coef' --init m --out ck --kl-coef -1
usage "--kl-coef with --loss sft" '--kl-coef penalizes a policy.s distance from a reference: not with --loss sft' \
    --init m --out ck --kl-coef 0.1 --loss sft
usage "--kl-est k4" "--kl-est 'k4': use k1, k2 or k3" --init m --out ck --kl-coef 0.1 --kl-est k4
usage "--kl-in logits" "--kl-in 'logits': use loss or reward" --init m --out ck --kl-coef 0.1 --kl-in logits
usage "--kl-est without --kl-coef" '--kl-est goes with --kl-coef B > 0' --init m --out ck --kl-est k2
usage "--kl-in without --kl-coef" '--kl-in goes with --kl-coef B > 0' --init m --out ck --kl-in reward
# LoRA (test_lora.py checks the adapters' arithmetic and the errors of their files)
usage "--lora-rank 0" '--lora-rank: at least 1' --init m --out ck --lora-rank 0
usage "--lora-alpha 0" '--lora-alpha: must be above 0' --init m --out ck --lora-rank 4 --lora-alpha 0
usage "--lora-targets with lm_head" \
    '--lora-targets: unknown LoRA target module "lm_head" in "q_proj,lm_head" \(known: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or all-linear\)' \
    --init m --out ck --lora-rank 4 --lora-targets q_proj,lm_head
usage "--lora-dropout 0.1" '--lora-dropout 0.1: adapters train without dropout \(0 only\)' \
    --init m --out ck --lora-rank 4 --lora-dropout 0.1
usage "--base-dtype f16" "--base-dtype: expected f32 or bf16, got 'f16'" --init m --out ck --lora-rank 4 --base-dtype f16
usage "--save both" "--save: expected adapter or merged, got 'both'" --init m --out ck --lora-rank 4 --save both
usage "--lora-alpha without --lora-rank" '--lora-alpha, --lora-targets, --lora-rslora, --lora-dropout, --base-dtype and --save are for LoRA: give --lora-rank R \(or --adapter DIR\)' \
    --init m --out ck --lora-alpha 2
usage "--save merged without --lora-rank" '--lora-alpha, .* are for LoRA' --init m --out ck --save merged
usage "--lora-dropout 0 without --lora-rank" '--lora-alpha, .* are for LoRA' --init m --out ck --lora-dropout 0
usage "--resume with --lora-rank" '--resume continues the LoRA adapter of CKPT/latest as its adapter_config.json says' \
    --resume --out ck --lora-rank 2
usage "--resume with --lora-targets" '--resume continues the LoRA adapter' --resume --out ck --lora-targets q_proj
usage "--adapter with --lora-rank" '--adapter continues an adapter of its own rank: leave out --lora-rank' \
    --init m --out ck --adapter m --lora-rank 4
usage "--kl-est with --kl-in reward" '--kl-in reward takes k1 of each sequence off its reward: --kl-est is for --kl-in loss' \
    --init m --out ck --kl-coef 0.1 --kl-in reward --kl-est k2
usage "--entropy-coef x" "--entropy-coef: expected a number, got 'x'" --init m --out ck --entropy-coef x
usage "--entropy-coef inf" "--entropy-coef: expected a number, got 'inf'" --init m --out ck --entropy-coef inf
usage "--entropy-coef nan" "--entropy-coef: expected a number, got 'nan'" --init m --out ck --entropy-coef nan
usage "--overlong with L_CACHE > L_MAX" "--overlong '4,8': needs 0 < L_CACHE <= L_MAX" --init m --out ck --overlong 4,8
usage "--overlong with L_CACHE 0" "--overlong '8,0': needs 0 < L_CACHE <= L_MAX" --init m --out ck --overlong 8,0
usage "--overlong with one number" "--overlong '8': expected L_MAX,L_CACHE" --init m --out ck --overlong 8
usage "--overlong 8,x" "--overlong '8,x': expected L_MAX,L_CACHE" --init m --out ck --overlong 8,x
usage "--seed x" '--seed' --config m/config.json --out ck --seed x
usage "--metrics naming an input" 'the metrics file r.rlr is also an input' --init m --out ck --metrics r.rlr
rm -rf ck
expect "an unknown option: usage error" 2 "Try 'rl-learn --help' for more information" -- \
    rl-learn --init m --out ck --bogus r.rlr
check "an unknown option: nothing written" "ck: $(ls -d ck 2>&1)" [ ! -e ck ]

# ---- a run (under the sanitizers in the ASan run): steps, resume, bad input
expect "2 steps of batch 4 then --max-steps: exit 0, the summary" 0 \
    '^rl-learn: 2 steps \(versions 0 to 2\), 24 tokens, [0-9]+ records left unused, ck/v000002, ' -- \
    rl-learn --init m --out ck --batch 4 --lr 1e-3 --max-steps 2 --metrics met.jsonl r.rlr
check "2 metrics lines, latest v000002" "$(cat ck/latest 2>&1); $(wc -l <met.jsonl) lines" \
    eval '[ "$(cat ck/latest)" = v000002 ] && [ "$(wc -l <met.jsonl)" = 2 ]'
expect "--resume: skips the 8 records consumed" 0 \
    '^rl-learn: resuming at version 2: skipping the 8 records its steps consumed \(--no-skip to train on them\)$' -- \
    rl-learn --resume --out ck --batch 4 --lr 1e-3 --metrics met.jsonl r.rlr
check "--resume: takes the last step" "stderr: $(tail -n 1 err)" \
    grep -qE '^rl-learn: 1 steps \(versions 2 to 3\), 12 tokens, 0 records left unused, ck/v000003, ' err
check "--resume appends to the metrics" "$(wc -l <met.jsonl) lines" eval '[ "$(wc -l <met.jsonl)" = 3 ]'
expect "without --resume, a used --out: exit 1 suggesting --resume" 1 \
    '^rl-learn: error: ck already holds checkpoints \(latest: ck/v000003\): continue with --resume' -- \
    rl-learn --init m --out ck r.rlr
expect "a bad record: exit 1 naming the field, the file and the record" 1 \
    '^rl-learn: error: field "mask" has 2 elements but "ids" has 3 \(one per completion token\): bad.rlr record 9$' -- \
    rl-learn --init m --out ck2 --batch 2 -q bad.rlr
check "a bad record: the steps before it are kept" "latest: $(cat ck2/latest 2>&1)" \
    eval '[ "$(cat ck2/latest)" = v000004 ]'

# ---- the ratio losses: several epochs (gspo's later ones score each micro-batch
# before its backward), and state.json says the clip range that trained them
expect "--loss gspo --epochs 2: 2 steps on one batch, exit 0" 0 '' -- \
    rl-learn --init m --out ckg --loss gspo --epochs 2 --batch 4 --lr 1e-3 --max-steps 2 -q r.rlr
check "--loss gspo: state.json has the paper's clip range 3e-4, 4e-4" "$(cat ckg/v000002/state.json 2>&1)" \
    grep -q '"epochs": 2, .*"eps_low": 0.0003, "eps_high": 0.0004,' ckg/v000002/state.json
expect "--loss cispo --eps-low 0.2 --epochs 2: exit 0" 0 '' -- \
    rl-learn --init m --out ckc --loss cispo --eps-low 0.2 --epochs 2 --batch 4 --lr 1e-3 --max-steps 2 -q r.rlr
check "--loss cispo --eps-low 0.2: state.json has eps_low 0.2 and the default eps_high 4" \
    "$(cat ckc/v000002/state.json 2>&1)" grep -q '"eps_low": 0.2, "eps_high": 4.0,' ckc/v000002/state.json
expect "--loss ppo --eps 0.1 --eps-high 0.3: exit 0" 0 '' -- \
    rl-learn --init m --out ckp --loss ppo --eps 0.1 --eps-high 0.3 --batch 4 --max-steps 1 -q r.rlr
check "--eps 0.1 --eps-high 0.3: eps_low 0.1 from --eps, eps_high 0.3" "$(cat ckp/v000001/state.json 2>&1)" \
    grep -q '"eps_low": 0.1, "eps_high": 0.3,' ckp/v000001/state.json

# ---- a chat template that does not load fails only what renders conversations
"$PY" - "$RLPIPE_ROOT" <<'EOF2'
import shutil, sys, llama_ref
llama_ref.random_model("hostile", hidden=32, inter=48, layers=1, heads=2, kv_heads=1, vocab=448, seed=2)
shutil.copy(sys.argv[1] + "/models/tiny/tokenizer.json", "hostile/")
open("hostile/chat_template.jinja", "w").write("{{ 1" + " + 1" * 100000 + " }}")
EOF2
expect "--loss pg with a template of 100,000 chained terms: it is not read, exit 0" 0 '' -- \
    rl-learn --init hostile --out ck3 --batch 4 -q --max-steps 1 r.rlr
expect "--loss sft with it: exit 1, the template's nesting named, no crash" 1 \
    '^rl-learn: error: the chat template: hostile/chat_template\.jinja line 1: nesting deeper than the parse limit \(256; each link of a chain' -- \
    rl-learn --init hostile --out ck4 --loss sft -q r.rlr
check "--loss sft with it: refused before any version is written" "$(ls -R ck4 2>&1)" eval '[ ! -e ck4/v000000 ]'
usage "--chat-arg with --loss pg" '--chat-arg: only --loss sft renders conversations' --init m --out ck --chat-arg x=1
finish
