#!/bin/bash
# tests/fuzz/seeds.sh OUTDIR — the seed corpora of the libFuzzer harnesses:
# OUTDIR/<name>/ per harness (fuzz_<name>), and OUTDIR/tokenizers.list, the
# fixed tokenizers of fuzz_tokenizer (FUZZ_TOKENIZERS, ':'-separated).
# Made from the repository and its tools: a tiny model with random weights
# (rl-learn), records sampled from it (rl-sample), converted by rl-cat (raw,
# zstd, several members, JSON lines); the rest (safetensors files, configs,
# tokenizers, push messages, LoRA adapter configs, chat templates from $JINJA_TEMPLATES or
# .deps/templates) by tests/fuzz/seeds.py with the venv's packages; an
# environment's answer lines (rlpipe-env(5)) and a verifier's replies
# (rl-sample(1), VERIFIER COMMANDS) written here.
# BIN names the tools' folder (default bin), PY the Python (.deps/venv).
set -eu
[ $# -eq 1 ] || { echo "usage: tests/fuzz/seeds.sh OUTDIR" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
bin=$(cd "$root" && cd "${BIN:-bin}" && pwd)
PY=${PY:-$root/.deps/venv/bin/python}
PATH=$bin:$PATH
work=$(mktemp -d "${TMPDIR:-/tmp}/rlpipe-seeds.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"/{records,jsonl,safetensors,config,tokenizer,push,chat,env,vreply,lora}
cd "$work"

# ---- records and JSON lines from the tools
rl-learn -q --config "$root/models/tiny/config.json" --seed 3 --init-std 0.08 --device cpu --out m </dev/null
for i in 0 1 2; do
    printf '{"prompt": "%d+%d=", "answer": "%d"}\n' $((i * 7)) $((i * 3)) $((i * 10))
done >p.jsonl
rl-sample -q --model m --device cpu -n 2 --seed 1 --max-new-tokens 6 p.jsonl -o s.rlr
printf '{"prompt": "2+2=", "completion": "4"}\n{"prompt_ids": [445, 50, 51], "ids": [52, 446]}\n' >ex.jsonl
rl-cat -q --pack --kind examples ex.jsonl -o ex.rlr
rl-cat -q --pack --kind prompts p.jsonl -o p.rlr
rl-cat -q -u s.rlr -o s.raw
rl-cat -q --frame 1 s.rlr -o s1.rlr                      # a zstd frame per record
r=$out/records
cp s.rlr "$r/rollouts.zst.rlr"; cp s.raw "$r/rollouts.raw.rlr"; cp s1.rlr "$r/frames.rlr"
cp ex.rlr "$r/examples.rlr"; cp p.rlr "$r/prompts.rlr"
cat s.rlr s.raw ex.rlr >"$r/members.rlr"                  # three members, zstd then raw then zstd
head -c $(($(stat -c %s s.raw) / 2)) s.raw >"$r/truncated.raw.rlr"
head -c $(($(stat -c %s s.rlr) - 9)) s.rlr >"$r/truncated.zst.rlr"
j=$out/jsonl
cp p.jsonl "$j/prompts.jsonl"; cp ex.jsonl "$j/examples.jsonl"; cp p.rlr "$j/prompts.rlr"
rl-cat -q --json --header s.rlr -o "$j/rollouts-header.jsonl"
rl-cat -q --json ex.rlr -o "$j/examples-roundtrip.jsonl"

# ---- the rest, and the tiny model's safetensors header
"$PY" "$root/tests/fuzz/seeds.py" "$out" "m/$(cat m/latest)/model.safetensors"   # latest names the version folder

# ---- an environment's answers: each kind rlpipe-env(5) names, good and bad
e=$out/env
printf '%s' '{"id": 3, "messages": [{"role": "tool", "content": "10063"}]}' >"$e/tool"
printf '%s' '{"id": 3, "messages": [{"role": "user", "content": "That is not right. Try again."}, {"role": "system", "content": "x"}]}' >"$e/user"
printf '%s' '{"id": 7, "done": true, "reward": 1.0, "info": {"calls": 1, "right": 1}}' >"$e/done"
printf '%s' '{"id": 7, "done": true}' >"$e/done-no-reward"
printf '%s' '{"id": 1, "error": "the sandbox crashed"}' >"$e/error"
printf '%s' '{"id": 1, "messages": [{"role": "assistant", "content": "I am the model"}]}' >"$e/assistant"
printf '%s' '{"id": 1, "messages": [{"role": "tool", "content": {"result": [1, 2.5, null]}}], "extra": "kept"}' >"$e/object"
printf '%s' '{"id": 2, "messages": []}' >"$e/empty"

# ---- a verifier's replies: numbers, booleans, objects, good and bad
v=$out/vreply
printf '%s' '0.75' >"$v/number"
printf '%s' ' -1e-3 ' >"$v/spaces"
printf '%s' 'true' >"$v/true"
printf '%s' '{"reward": 1.5, "rewards": {"acc": 1, "format.tags": 0.5}, "pred": "42"}' >"$v/object"
printf '%s' '{"reward": 0, "pred": null, "rewards": {}}' >"$v/null-pred"
printf '%s' '{"rewards": {"a": 1}}' >"$v/no-reward"
printf '%s' '{"reward": 1, "score": 2}' >"$v/unknown-key"
printf '%s' '{"reward": 1, "rewards": {"a": "x", "": 2}}' >"$v/bad-parts"
printf '%s' 'nan' >"$v/nan"
