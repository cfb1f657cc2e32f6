#!/bin/bash
# Evaluation while training (experiments/lib/rl-run.sh --eval-every N --eval
# FILE --tensorboard DIR) on the tiny model, in seconds: the evaluator
# evaluates every version that is a multiple of N and the last one, at nice
# 19, while the run goes on; each line of eval.jsonl has the version, the
# wall time of its publication, the records the learner had trained on, and
# pass@k; rl-learn kept every version evaluated; tb.py's event files hold
# learn.jsonl's and eval.jsonl's numbers; report.py draws them.
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
RUN=$RLPIPE_ROOT/experiments/lib/rl-run.sh
"$PY" "$RLPIPE_ROOT/experiments/arith.py" --out data --seed 1 --test 12 >/dev/null 2>&1
rl-learn -q --loss sft --config "$RLPIPE_ROOT/models/tiny/config.json" --seed 1 --out sft --batch 16 --lr 3e-3 \
    --max-steps 3 --keep 1 data/sft.jsonl 2>/dev/null
check "the SFT model to start from" "$(ls sft 2>&1)" test -d sft/v000003

# rl-sample through a wrapper that notes the niceness of each run without
# --listen (the evaluator's), and every other tool as it is
mkdir -p wbin
for t in rl-ratio rl-learn rl-sync rl-cat; do ln -sf "$RLPIPE_BIN/$t" wbin/; done
printf '#!/bin/sh\ncase "$*" in *--listen*) ;; *) nice >>"%s/nice.txt" ;; esac\nexec "%s/rl-sample" "$@"\n' \
    "$T" "$RLPIPE_BIN" >wbin/rl-sample && chmod +x wbin/rl-sample

expect "rl-run.sh --eval-every 2 --tensorboard: exit 0" 0 '' -- timeout 120 env RLPIPE_BIN="$T/wbin" PYTHON="$PY" \
    EVAL_GROUP=4 EVAL_TEMPERATURE=1 EVAL_PASS_AT=1,2,4 MAX_NEW=12 "$RUN" --init sft --prompts data/train.jsonl \
    --out run --group 4 --batch 16 --steps 6 --max-new-tokens 12 --eval data/test.jsonl --eval-every 2 --tensorboard tb
pycheck "eval.jsonl: versions 4, 6, 8 and the last, 9; wall time, records trained on and pass@k of each" <<'EOF'
import json, math, os
learn = [json.loads(x) for x in open("run/learn.jsonl")]
ev = [json.loads(x) for x in open("run/eval.jsonl")]
assert [x["version"] for x in learn] == list(range(4, 10)), [x["version"] for x in learn]
assert [e["version"] for e in ev] == [4, 6, 8, 9], [e["version"] for e in ev]
run = json.load(open("run/run.json"))
assert run["exit"]["evaluator"] == 0 and run["exit"]["tb.py"] == 0, run
for e in ev:
    assert e["learner_samples"] == sum(x["samples"] for x in learn if x["version"] <= e["version"]), e
    assert 0 < e["wall_s"] <= run["wall_s"], (e, run["wall_s"])
    assert e["samples"] == 48 and e["temperature"] == 1, e      # 12 problems x EVAL_GROUP 4
    # equal groups: pass@1, the mean of the groups' accuracies, is the accuracy
    assert abs(e["pass@1"] - e["accuracy"]) <= 1e-12, e
    assert e["pass@1"] <= e["pass@2"] <= e["pass@4"] <= 1, e
    assert os.path.isdir(f"run/ckpt/v{e['version']:06d}"), e    # rl-learn kept it (--keep-every 2; 9 the latest)
assert [e["wall_s"] for e in ev] == sorted(e["wall_s"] for e in ev), ev
print(f"# learner_samples {[e['learner_samples'] for e in ev]}, wall_s {[e['wall_s'] for e in ev]}")
EOF
check "every evaluation's sampler ran at nice 19" "$(cat nice.txt 2>&1)" \
    eval '[ "$(sort -u nice.txt)" = 19 ] && [ "$(wc -l <nice.txt)" = 4 ]'

pycheck "tb/learn and tb/eval: every number of learn.jsonl and eval.jsonl, at its version, as TensorBoard reads it" <<'EOF'
import json, numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
for name in ("learn", "eval", "ratio"):
    lines = [json.loads(x) for x in open(f"run/{name}.jsonl")]
    acc = EventAccumulator(f"tb/{name}", size_guidance={"scalars": 0})
    acc.Reload()
    exp = {}
    for i, o in enumerate(lines, 1):
        step = o.get("version", o.get("step", i))
        for k, v in o.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("version", "time"):
                exp.setdefault(k, []).append((step, float(np.float32(v))))
    got = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    assert got == exp, (name, sorted(got), sorted(exp))
    if name == "eval":
        walls = [e.wall_time for e in acc.Scalars("accuracy")]
        assert walls == [o["time"] for o in lines], walls
    print(f"# tb/{name}: {len(got)} tags, {sum(map(len, got.values()))} scalars")
EOF

expect "report.py run: the evaluations beside the training reward" 0 '' -- "$PY" \
    "$RLPIPE_ROOT/experiments/lib/report.py" run run rep
check "... eval.png is a PNG, eval.tsv has the 4 evaluations with pass@k" "$(cat rep/eval.tsv 2>&1)" \
    eval '[ "$(head -c 4 rep/eval.png | od -An -c | tr -d " ")" = "211PNG" ] &&
          head -n 1 rep/eval.tsv | grep -q "accuracy	pass@1	pass@2	pass@4" && [ "$(grep -vc "^#" rep/eval.tsv)" = 4 ]'

expect "--eval-every without --eval: usage error" 2 'needs --eval FILE' -- "$RUN" --init sft \
    --prompts data/train.jsonl --out bad --eval-every 2
expect "--eval-every 3 with --keep-every 2: usage error (version 3 would not be kept)" 2 'must be a multiple of --keep-every 2' \
    -- "$RUN" --init sft --prompts data/train.jsonl --out bad --eval data/test.jsonl --eval-every 3 --keep-every 2
expect "--eval-every 0: usage error" 2 'N > 0' -- "$RUN" --init sft --prompts data/train.jsonl --out bad \
    --eval data/test.jsonl --eval-every 0
finish
