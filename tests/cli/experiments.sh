#!/bin/bash
# make demo's machinery on a budget of seconds (experiments/demo/Makefile,
# lib/rl-run.sh, eval.sh, stage.sh, report.py): every stage runs and logs,
# the RL pipeline ends cleanly with its versions following the SFT model's,
# the last line is held-out accuracy before and after RL, RESULTS.md and the PNG are
# written, a second make redoes nothing, and a failing stage stops make
# naming its log. Whether RL learns is the full demo's business, not this.
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
demo() {
    make --no-print-directory -C "$RLPIPE_ROOT/experiments/demo" BIN="$RLPIPE_BIN" PYTHON="$PY" OUT="$T/d" \
        RESULTS="$T/res" TEST=20 SFT_STEPS=4 RL_STEPS=3 BATCH=16 KEEP_EVERY=1 "$@"
}

expect "make: exit 0" 0 '' -- demo
check "the last line: held-out accuracy: before RL X, after RL Y (20 problems)" "stdout: $(tail -n 3 out)" \
    eval 'tail -n 1 out | grep -qE "^held-out accuracy: before RL (0|1|0\.[0-9]+), after RL (0|1|0\.[0-9]+) \(20 problems\)$"'
check "one line per stage on stderr, each done" "stderr: $(head -c 600 err)" \
    eval '[ "$(grep -cE "^[1-6]-[a-z-]+ +\.\.\. done in [0-9.]+ s" err)" = 6 ]'
for s in 1-data 2-sft 3-eval-sft 4-rl 5-eval-rl 6-report; do
    check "stage $s: a log and a time" "$(ls d/log 2>&1)" test -s "d/log/$s.time" -a -e "d/log/$s.log"
done
check "the RL run: rl-learn and rl-sync exit 0, sampler and scorer 0 or SIGPIPE" "$(cat d/rl/run.json 2>&1)" \
    "$PY" -c '
import json, sys
e = json.load(open("d/rl/run.json"))["exit"]
sys.exit(not (e["rl-learn"] == 0 and e["rl-sync"] == 0 and e["rl-sample"] in (0, 141) and e["rl-ratio"] in (0, 141)))'
check "RL versions follow the SFT model's: 5, 6, 7 after version 4" "$(cat d/rl/learn.jsonl 2>&1 | head -c 300)" \
    "$PY" -c '
import json, sys
m = [json.loads(x) for x in open("d/rl/learn.jsonl")]
sys.exit(not ([(x["step"], x["version"]) for x in m] == [(1, 5), (2, 6), (3, 7)] and all(x["lag_mean"] >= 0 for x in m)))'
check "every kept RL version evaluated: 4 (the SFT model) to 7" "$(cat d/rl/eval.jsonl 2>&1)" \
    "$PY" -c '
import json, sys
sys.exit([json.loads(x)["version"] for x in open("d/rl/eval.jsonl")] != [4, 5, 6, 7])'
check "no socket file left" "$(ls d/rl)" eval '! ls d/rl | grep -q sock'
check "RESULTS.md: the before/after table and the plot" "$(head -c 400 res/RESULTS.md 2>&1)" \
    eval 'grep -q "^| after SFT (version 4) |" res/RESULTS.md && grep -q "(demo.png)" res/RESULTS.md'
check "demo.png is a PNG" "$(head -c 8 res/demo.png 2>&1 | od -c | head -1)" \
    eval '[ "$(head -c 4 res/demo.png | od -An -c | tr -d " ")" = "211PNG" ]'

last=$(tail -n 1 out)
expect "make again: exit 0" 0 '' -- demo
check "make again: no stage rerun, the same last line" "stderr: $(head -c 300 err); stdout: $(tail -n 1 out)" \
    eval '! grep -q "\.\.\. done" err && [ "$(tail -n 1 out)" = "$last" ]'

# --tis: no scorer in the pipe; the learner weighs the tokens (rl-learn --tis),
# in flight with its lag bound, and the pipeline ends as with rl-ratio.
# --learn and --sample pass more options to rl-learn and rl-sample.
expect "rl-run.sh --tis 2, in flight, --learn and --sample: exit 0" 0 '' -- timeout 300 \
    env RLPIPE_BIN="$RLPIPE_BIN" "$RLPIPE_ROOT/experiments/lib/rl-run.sh" --init d/sft --prompts d/data/train.jsonl \
    --out "$T/tis" --max-lag 1 --group 4 --batch 16 --steps 3 --tis 2 \
    --learn "--loss ppo --eps-high 0.28 --entropy-coef 0.01" --sample "--top-k 50"
# (the weights themselves are test_learn_run.py's: this SFT model earns no
# reward yet, so no step here has a sequence to weigh)
check "... 3 steps, lag <= 1, no rl-ratio, no ratio.jsonl, no socket left, the sampler's metrics" \
    "$(cat tis/run.json 2>&1); $(head -c 400 tis/learn.jsonl 2>&1); $(head -c 400 tis/sample.jsonl 2>&1)" "$PY" -c '
import json, os, sys
j = json.load(open("tis/run.json"))
assert j["exit"]["rl-learn"] == 0 and j["exit"]["rl-sync"] == 0 and j["ratio"] == "rl-learn --tis 2", j
assert j["learn"] == "--loss ppo --eps-high 0.28 --entropy-coef 0.01" and j["sample"] == "--top-k 50", j
assert j["machine"].endswith(" cores") and len(j["machine"]) > 8, j
st = json.load(open("tis/ckpt/" + open("tis/ckpt/latest").read().strip() + "/state.json"))
assert st["loss"] == "ppo" and st["eps_high"] == 0.28 and st["entropy_coef"] == 0.01, st
assert j["dtype"] == "bf16" and j["head"] == "dtype", j
s = [json.loads(x) for x in open("tis/sample.jsonl")]   # a line per version the sampler installed
assert s and all(x["version"] > x["from"] for x in s), s
assert all("sampled" in x and 0 <= x["changed"] <= x["moved"] + 1e-9 or x["moved"] == 0 for x in s[1:]), s
assert not os.path.exists("tis/ratio.jsonl") and not [f for f in os.listdir("tis") if "sock" in f]
m = [json.loads(x) for x in open("tis/learn.jsonl")]
assert [x["step"] for x in m] == [1, 2, 3] and all(x["lag_max"] <= 1 for x in m), m'

# A learner that fails leaves nothing waiting. Here one that reads the first
# batch and exits 1 without a version: the sampler (--sync) waits for weights
# that never come and the scorer for records, and nothing writes into the
# closed pipe, so no SIGPIPE would end them; rl-run.sh stops them.
mkdir -p failbin
for t in rl-sample rl-ratio rl-sync rl-cat; do ln -sf "$RLPIPE_BIN/$t" failbin/; done
printf '#!/bin/sh\ntimeout 3 cat >/dev/null\nexit 1\n' >failbin/rl-learn && chmod +x failbin/rl-learn
expect "rl-run.sh, a learner failing after its first batch: exit 1 within 60 s" 1 '' -- timeout 60 \
    env RLPIPE_BIN="$T/failbin" "$RLPIPE_ROOT/experiments/lib/rl-run.sh" --init d/sft --prompts d/data/train.jsonl \
    --out "$T/fail" --sync --group 4 --batch 16 --steps 2 --max-new-tokens 8
check "... rl-learn's exit status 1 in run.json, no rl-sample or rl-ratio left" "$(cat fail/run.json 2>&1)" \
    eval 'grep -q "\"rl-learn\": 1," fail/run.json && ! pgrep -f -- "--listen unix:$T/fail/" >/dev/null'
pkill -KILL -f -- "--listen unix:$T/fail/"   # (what a failure above left)

# experiments/scale on the same budget, from the demo's SFT model: one sampler
# and one learner, then 2 samplers merged and a learner of 2 ranks under mpirun.
if mpi_ready; then
    expect "experiments/scale: exit 0" 0 '' -- make --no-print-directory -C "$RLPIPE_ROOT/experiments/scale" \
        BIN="$RLPIPE_BIN" PYTHON="$PY" OUT="$T/d" RESULTS="$T/res_scale" TEST=20 SFT_STEPS=4 RL_STEPS=4 BATCH=32 \
        KEEP_EVERY=1 LAG=1
    check "experiments/scale: 2 samplers and 2 ranks, every process ending cleanly, 4 steps each, lag <= 1" \
        "$(cat d/runs/scale/run.json 2>&1); $(tail -n 2 d/runs/scale/log/learn.log 2>&1)" "$PY" -c '
import json, subprocess, sys
for run, samplers, ranks in (("one", 1, 1), ("scale", 2, 2)):
    j = json.load(open(f"d/runs/{run}/run.json"))
    e = j["exit"]
    assert (j["samplers"], j["ranks"]) == (samplers, ranks), j
    assert e["rl-learn"] == 0 and e["rl-sync"] == 0 and e["rl-sample"] in (0, 141) and e["rl-ratio"] in (0, 141), e
    m = [json.loads(x) for x in open(f"d/runs/{run}/learn.jsonl")]
    assert [x["step"] for x in m] == [1, 2, 3, 4] and all(x["lag_max"] <= 1 for x in m), m
assert ", 2 ranks" in open("d/runs/scale/log/learn.log").read()'
    check "experiments/scale: RESULTS.md has both runs" "$(head -c 600 res_scale/RESULTS.md 2>&1)" \
        eval 'grep -q "^| one | 1 | 1 |" res_scale/RESULTS.md && grep -q "^| scale | 2 | 2 |" res_scale/RESULTS.md'
else
    skip "experiments/scale" "$no_mpi"
fi

rm -f d/.rl d/.rl-eval d/.report
expect "a failing stage: make fails, saying which stage and where its log is" 2 '4-rl +\.\.\. FAILED \(exit 1\).*d/log/4-rl.log' \
    -- demo LR=-1
finish
