#!/bin/bash
# same-outputs.sh — the outputs a change of structure must leave alone, from one
# build, as a list of digests; two lists compared tell whether a change kept
# every output byte for byte.
#
#   scripts/same-outputs.sh BIN OUT      writes OUT/digests (and the outputs)
#   diff OUT1/digests OUT2/digests       empty when the two builds agree
#
# On the tiny model, warmed up by a short SFT run (itself compared): records of
# a fixed seed at every sampler precision; rl-ratio in each of its modes;
# rl-cat --stats, --stats --json and --json; rl-learn's pg, ppo, sft and --tis
# runs (every file of every version, and the metrics without their timing
# fields). BIN is a folder of the tools (bin/ of a build); rl-learn's runs use
# one thread and the sampler two, so that the results do not depend on the
# machine's cores.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: same-outputs.sh BIN OUT" >&2; exit 2; }
BIN=$(cd "$1" && pwd)
OUT=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$OUT"; mkdir -p "$OUT"; cd "$OUT"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# records as JSON, the header without its time and command line
records() { "$BIN/rl-cat" --json --header "$1" | python3 -c '
import json, sys
for i, line in enumerate(sys.stdin):
    if i == 0:
        h = json.loads(line); h.pop("time", None); h.pop("argv", None); line = json.dumps(h) + "\n"
    sys.stdout.write(line)'; }

# metrics without the fields that measure time or memory
untimed() { python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({k: v for k, v in r.items()
                      if not any(w in k for w in ("second", "time", "rss", "per_s", "_s", "wall", "elapsed"))},
                     sort_keys=True))' "$1"; }

python3 "$ROOT/experiments/arith.py" --out data --seed 1 --test 20 >/dev/null
head -n 16 data/train.jsonl >prompts.jsonl
"$BIN/rl-learn" --loss sft --config "$ROOT/models/tiny/config.json" --seed 1 --out sft \
    --batch 32 --lr 3e-3 --warmup 5 --max-steps 150 --keep 1 --metrics sft.jsonl data/sft.jsonl 2>log.sft
untimed sft.jsonl >sft.metrics

for dt in f32 bf16 int8 fp8 bf16w f16 int8w; do
    "$BIN/rl-sample" --model sft --dtype "$dt" -n 4 --seed 7 --max-new-tokens 24 \
        --slots 2 -o "r.$dt.rlr" prompts.jsonl 2>"log.sample.$dt"
    records "r.$dt.rlr" >"r.$dt.json"
    "$BIN/rl-cat" --stats "r.$dt.rlr" >"r.$dt.stats"
    "$BIN/rl-cat" --stats --json "r.$dt.rlr" >"r.$dt.stats.json"
done
# rewards of 0 and 1 set by the record's place, so that the advantages are not all 0
python3 -c '
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i == 0 or "rlpipe_end" in line: continue
    r = json.loads(line); r["reward"] = float(i % 3 == 0); print(json.dumps(r))' r.bf16.json >rewarded.jsonl
"$BIN/rl-cat" --pack -o rewarded.rlr rewarded.jsonl
for mode in token seq geo; do
    "$BIN/rl-ratio" --model sft --mode "$mode" --clip 1.5 --metrics "ratio.$mode.jsonl" \
        -o "s.$mode.rlr" rewarded.rlr 2>"log.ratio.$mode"
    records "s.$mode.rlr" >"s.$mode.json"
    untimed "ratio.$mode.jsonl" >"ratio.$mode.metrics"
done
"$BIN/rl-ratio" --model sft --mask 0.5,2 -o s.mask.rlr r.int8.rlr 2>log.ratio.mask
records s.mask.rlr >s.mask.json

learn() {   # NAME INPUT OPTION...
    local name=$1 input=$2; shift 2
    "$BIN/rl-learn" --init sft --out "learn.$name" --batch 32 --lr 1e-4 --max-steps 2 --seed 3 \
        --metrics "learn.$name.jsonl" "$@" "$input" 2>"log.learn.$name"
    untimed "learn.$name.jsonl" >"learn.$name.metrics"
}
learn pg s.token.rlr
learn ppo s.token.rlr --loss ppo --adv rloo --epochs 2
learn drgrpo rewarded.rlr --adv drgrpo
learn tis rewarded.rlr --tis 2
learn sft data/sft.jsonl --loss sft

find . -type f ! -name 'log.*' ! -name '*.jsonl' ! -name digests ! -name .lock ! -name '*.rlr' -print0 | sort -z | xargs -0 sha256sum >digests
echo "same-outputs: $(wc -l <digests) files in $OUT/digests"
