#!/bin/bash
# rl-sample's usage errors (exit 2), model and prompt errors (exit 1), help,
# version, and one generation with every option under the sanitizers.
# (man/rl-sample.1; doc/design.md §7.)
# also-asan
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py${PYTHONPATH:+:$PYTHONPATH}


"$PY" - "$RLPIPE_ROOT" <<'EOF2' || { fail setup "could not write the model"; finish; }
import json, shutil, sys
import llama_ref
llama_ref.random_model("m", hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True, seed=4)
c = json.load(open("m/config.json"))
c["bos_token_id"], c["eos_token_id"] = 445, 446
json.dump(c, open("m/config.json", "w"))
shutil.copy(sys.argv[1] + "/models/tiny/tokenizer.json", "m/")
with open("p.jsonl", "w") as f:
    for i in range(6):
        f.write(json.dumps({"prompt": f"{i}*3=", "answer": str(3 * i)}) + "\n")
EOF2

# ---- a generation with every option, under the sanitizers when this is the ASan run
expect "a run with groups, top-k/p, stops and int8: exit 0, summary" 0 \
    '^rl-sample: 12 prompts, 48 samples, [0-9]+ tokens, .* tokens/s, reward mean .*, accuracy .*; int8 on (cpu|cuda), 5 slots' -- \
    rl-sample --model m -n 4 --slots 5 --dtype int8 --temperature 0.8 --top-p 0.9 --top-k 50 --stop '\n' --stop 7 \
        --max-new-tokens 20 --epochs 2 --seed 3 --verifier boxed p.jsonl -o out.rlr
check "the run's output is a valid stream of 48 rollouts" "$(rl-cat --check out.rlr 2>&1 | head -c 300)" \
    eval 'rl-cat --check out.rlr 2>/dev/null && [ "$(rl-cat --json out.rlr | wc -l)" = 48 ]'
expect "--verifier-cmd under the sanitizers: exit 0" 0 'reward mean 1\.0000' -- \
    rl-sample --model m -n 2 --max-new-tokens 5 --verifier-cmd 'while read l; do echo 1; done' p.jsonl -o out2.rlr
expect "two named verifiers, an object reply and --reward-weights under the sanitizers: exit 0" 0 'reward mean 2\.5000' -- \
    rl-sample --model m -n 2 --max-new-tokens 5 --reward-weights b=3 \
        --verifier-cmd 'a=while read l; do echo "{\"reward\": 1, \"rewards\": {\"x\": 2}, \"pred\": \"7\"}"; done' \
        --verifier-cmd 'b=while read l; do echo 0.5; done' p.jsonl -o out4.rlr
check "their records hold reward 1 + 3 x 0.5, rewards and pred" "$(rl-cat --json out4.rlr 2>&1 | head -c 400)" \
    eval '[ "$(rl-cat --json out4.rlr | grep -c "\"reward\":2.5,.*\"rewards\":{\"a\":1.0,\"a.x\":2.0,\"b\":0.5},\"pred\":\"7\"")" = 12 ]'
expect "-q: exit 0" 0 '' -- rl-sample -q --model m --max-new-tokens 2 p.jsonl -o out3.rlr
check "-q: nothing on stderr" "stderr: $(head -c 200 err)" [ ! -s err ]

# ---- --head f32: the header's model says head_dtype f32 (only then); at f32 it changes nothing
for a in "bf16 --head f32" "bf16" "f32 --head f32" "f32 --head dtype" "f32"; do
    rl-sample -q --no-provenance -u --model m --dtype $a --max-new-tokens 4 --seed 1 p.jsonl -o "head $a.rlr"
done
check "--dtype bf16 --head f32: the header's model has head_dtype f32; without --head none" \
    "$(rl-cat --json --header 'head bf16 --head f32.rlr' | head -n 1 | head -c 300)" \
    eval 'rl-cat --json --header "head bf16 --head f32.rlr" | head -n 1 | grep -q "\"dtype\":\"bf16\",\"head_dtype\":\"f32\"" &&
          ! rl-cat --json --header "head bf16.rlr" | grep -q head_dtype'
check "--dtype f32 with --head f32 or dtype: the same bytes as without" "$(cmp 'head f32.rlr' 'head f32 --head f32.rlr' 2>&1)" \
    eval 'cmp -s "head f32.rlr" "head f32 --head f32.rlr" && cmp -s "head f32.rlr" "head f32 --head dtype.rlr"'

# ---- --ignore-eos: an eos id no longer ends a completion; --max-new-tokens and
# --stop strings still do. Model me is m whose eos is a token that greedy
# decoding of eos.jsonl picks (the first one after the first token that is new).
printf '{"prompt": "2*5="}\n' > eos.jsonl
rl-sample -q --model m --temperature 0 --max-new-tokens 8 eos.jsonl -o greedy.rlr && rl-cat --json greedy.rlr > greedy.json 2>/dev/null &&
"$PY" - <<'EOF' || fail setup "could not write the model with a sampled eos"
import json, shutil
g = json.loads(open("greedy.json").read())
k = next(i for i in range(1, len(g["ids"])) if g["ids"][i] not in g["ids"][:i])
shutil.copytree("m", "me")
c = json.load(open("me/config.json"))
c["eos_token_id"] = g["ids"][k]
json.dump(c, open("me/config.json", "w"))
EOF
expect "without --ignore-eos the model's eos ends the greedy completion: exit 0" 0 '' -- \
    rl-sample --model me --temperature 0 --max-new-tokens 8 eos.jsonl -o eos.rlr
expect "--ignore-eos: exit 0, 8 tokens" 0 ', 8 tokens, ' -- \
    rl-sample --model me --ignore-eos --temperature 0 --max-new-tokens 8 eos.jsonl -o noeos.rlr
rl-cat --json eos.rlr > eos.json 2>/dev/null; rl-cat --json noeos.rlr > noeos.json 2>/dev/null
# The stop string: a character of the greedy text that the text up to the eos lacks.
"$PY" - > stopstr <<'EOF'
import json
g, e = (json.loads(open(f).read()) for f in ("greedy.json", "eos.json"))
print(next(ch for ch in reversed(g["text"]) if ch.isalnum() and ch not in e["text"]))
EOF
expect "--ignore-eos with --stop: exit 0" 0 '' -- \
    rl-sample --model me --ignore-eos --stop "$(cat stopstr)" --temperature 0 --max-new-tokens 8 eos.jsonl -o stop.rlr
rl-cat --json stop.rlr > stop.json 2>/dev/null
pycheck "--ignore-eos: the eos id is sampled and kept, the completion runs to --max-new-tokens; --stop still ends it" \
    "$(cat stopstr)" <<'EOF'
import json, sys
g, e, n, s = (json.loads(open(f).read()) for f in ("greedy.json", "eos.json", "noeos.json", "stop.json"))
eos = json.load(open("me/config.json"))["eos_token_id"]
k = g["ids"].index(eos)
assert e["finish"] == "stop" and e["ids"] == g["ids"][:k + 1], ("without --ignore-eos", e["finish"], e["ids"])
assert n["finish"] == "length" and n["ids"] == g["ids"] and len(n["ids"]) == 8, ("--ignore-eos", n["finish"], n["ids"])
assert s["finish"] == "stop" and s["stop_reason"] == sys.argv[1], ("--stop", s["finish"], s.get("stop_reason"))
assert k + 1 < len(s["ids"]) <= 8 and s["ids"] == g["ids"][:len(s["ids"])], ("--stop", s["ids"])
print(f"# eos id {eos} sampled as token {k + 1}; with --ignore-eos 8 tokens; with --stop {sys.argv[1]!r} {len(s['ids'])}")
EOF

# ---- model and input errors (exit 1)
expect "--model nonexistent: exit 1 naming it" 1 '^rl-sample: error: cannot load the model: .*nomodel' -- \
    rl-sample --model nomodel p.jsonl -o x.rlr
expect "--adapter nonexistent: exit 1 naming its config" 1 '^rl-sample: error: .*nolora/adapter_config.json' -- \
    rl-sample --model m --adapter nolora p.jsonl -o x.rlr
mkdir -p notok && cp m/config.json m/model.safetensors notok/
expect "model without tokenizer.json: exit 1 naming it" 1 '^rl-sample: error: .*notok/tokenizer.json' -- \
    rl-sample --model notok p.jsonl -o x.rlr
expect "nonexistent prompt file: exit 1" 1 '^rl-sample: error: .*nope.jsonl.*No such file' -- \
    rl-sample --model m nope.jsonl -o x.rlr
printf '{"prompt": "1+1=", "answer": "2"}\n' > one.jsonl
expect "--verifier exact without an answer: exit 1 naming the line" 1 'no "answer".*exact.*noans.jsonl line 1' -- \
    sh -c 'printf "{\"prompt\": \"x\"}\n" > noans.jsonl; rl-sample --model m --verifier exact noans.jsonl -o x.rlr'
expect "a verifier command that is not found: exit 1" 1 'verifier' -- \
    rl-sample --model m --max-new-tokens 2 --verifier-cmd ./no-such-verifier one.jsonl -o x.rlr

# ---- bytes that are not UTF-8 never reach the stream: the argument, or the file, is named
expect "--stop not UTF-8: exit 2 showing the argument" 2 \
    '^rl-sample: error: the argument .\\xff\\xfe. is not valid UTF-8: the stream.s header and records carry' -- \
    rl-sample --model m --stop $'\xff\xfe' p.jsonl -o x.rlr
cp p.jsonl $'p\xe9.jsonl'
expect "a prompt file whose name is not UTF-8: exit 2 naming it" 2 '^rl-sample: error: the argument .p\\xe9\.jsonl. is not valid UTF-8' -- \
    rl-sample --model m $'p\xe9.jsonl' -o x.rlr
expect "--chat-arg not UTF-8: exit 2" 2 '^rl-sample: error: the argument .x=\\xc3. is not valid UTF-8' -- \
    rl-sample --model m --chat-arg $'x=\xc3' p.jsonl -o x.rlr
cp -r m badtpl && printf '{{ "caf\xe9" }}{%% for m in messages %%}{{ m.content }}{%% endfor %%}' >badtpl/chat_template.jinja
expect "a chat_template.jinja that is not UTF-8: exit 1 naming the file and byte" 1 \
    '^rl-sample: error: the chat template: badtpl/chat_template\.jinja: not UTF-8 at byte 7 \(0xe9\)$' -- \
    rl-sample --model badtpl p.jsonl -o x.rlr
expect "rl-ratio, an output whose name is not UTF-8: exit 2" 2 '^rl-ratio: error: the argument .x\\xff\.rlr. is not valid UTF-8' -- \
    rl-ratio -o $'x\xff.rlr' out.rlr
expect "rl-cat --pack of a file whose name is not UTF-8: exit 2" 2 '^rl-cat: error: the argument .p\\xe9\.jsonl. is not valid UTF-8' -- \
    rl-cat --pack $'p\xe9.jsonl' -o x.rlr
expect "rl-cat --check of it: read, no stream written: exit 1 (a JSON lines file is no stream)" 1 'not an rlpipe stream' -- \
    rl-cat --check $'p\xe9.jsonl'

# ---- usage errors (exit 2), help and version
expect "no --model: usage error" 2 '^rl-sample: error: --model DIR is required' -- rl-sample p.jsonl
check "no --model: nothing on stdout" "stdout: $(head -c 100 out)" [ ! -s out ]
expect "--dtype f64: usage error" 2 '^rl-sample: error: --dtype: expected one of f32, bf16, int8, fp8, bf16w, f16, int8w' -- rl-sample --model m --dtype f64 p.jsonl
expect "--head bf16: usage error" 2 "^rl-sample: error: --head: expected f32 or dtype, got 'bf16'" -- \
    rl-sample --model m --dtype bf16 --head bf16 p.jsonl
check "--head bf16: nothing on stdout" "stdout: $(head -c 100 out)" [ ! -s out ]
expect "--group 0: usage error" 2 '^rl-sample: error: --group' -- rl-sample --model m -n 0 p.jsonl
expect "--slots 0: usage error" 2 '^rl-sample: error: --slots' -- rl-sample --model m --slots 0 p.jsonl
expect "--temperature -1: usage error" 2 '^rl-sample: error: --temperature' -- rl-sample --model m --temperature -1 p.jsonl
expect "--temperature nan: usage error" 2 '^rl-sample: error: --temperature' -- rl-sample --model m --temperature nan p.jsonl
expect "--top-p 0: usage error" 2 '^rl-sample: error: --top-p' -- rl-sample --model m --top-p 0 p.jsonl
expect "--top-p 1.5: usage error" 2 '^rl-sample: error: --top-p' -- rl-sample --model m --top-p 1.5 p.jsonl
expect "--top-k -3: usage error" 2 '^rl-sample: error: --top-k' -- rl-sample --model m --top-k -3 p.jsonl
expect "--max-new-tokens 0: usage error" 2 '^rl-sample: error: --max-new-tokens' -- rl-sample --model m --max-new-tokens 0 p.jsonl
expect "--stop '': usage error" 2 '^rl-sample: error: --stop' -- rl-sample --model m --stop '' p.jsonl
expect "--verifier bogus: usage error" 2 '^rl-sample: error: --verifier: expected exact, number, boxed or none' -- \
    rl-sample --model m --verifier bogus p.jsonl
expect "--verifier with --verifier-cmd: usage error" 2 'exclude each other' -- \
    rl-sample --model m --verifier exact --verifier-cmd cat p.jsonl
expect "--max-records below the group: usage error" 2 '^rl-sample: error: --max-records 3 holds no whole group of 4' -- \
    rl-sample --model m -n 4 --max-records 3 p.jsonl
expect "--max-lag without --listen: usage error" 2 'give --listen' -- rl-sample --model m --max-lag 1 --batch 4 p.jsonl
expect "--sync without --batch: usage error" 2 'need --batch N' -- rl-sample --model m --listen s.sock --sync p.jsonl
expect "--sync with --max-lag 2: usage error" 2 '--sync is --max-lag 0' -- \
    rl-sample --model m --listen s.sock --max-lag 2 --sync --batch 4 p.jsonl
expect "--batch alone: usage error" 2 'for --max-lag or --sync' -- rl-sample --model m --batch 4 p.jsonl
expect "--listen tcp without --token-file: usage error" 2 'tcp needs --token-file' -- \
    rl-sample --model m --listen tcp:127.0.0.1:0 p.jsonl
expect "--listen with a bad address: usage error" 2 '^rl-sample: error: --listen tcp:x:' -- \
    rl-sample --model m --listen tcp:x:99999 p.jsonl
expect "--token-file without --listen: usage error" 2 'is for --listen' -- rl-sample --model m --token-file t p.jsonl
expect "--metrics without --listen: usage error" 2 "^rl-sample: error: --metrics tells of the weights installed: give --listen ADDR" -- \
    rl-sample --model m --metrics met.jsonl p.jsonl
expect "--metrics -: usage error" 2 "^rl-sample: error: --metrics: name a file of its own" -- \
    rl-sample --model m --listen unix:s.sock --metrics - p.jsonl
expect "--listen on a path that is not a socket: exit 1 naming it" 1 'p.jsonl' -- \
    rl-sample --model m --listen unix:p.jsonl p.jsonl
expect "output file is an input: usage error" 2 'also an input' -- rl-sample --model m p.jsonl -o p.jsonl
expect "--help: exit 0" 0 '' -- rl-sample --help
check "--help: usage on stdout naming every option" "stdout: $(head -c 300 out)" \
    eval 'grep -qiE "^usage: *rl-sample" out && for o in --model --dtype --head --group --temperature --top-p --top-k --max-new-tokens --stop --slots --seed --epochs --max-prompts --max-records --verifier --verifier-cmd --reward-weights --verifier-timeout --ignore-eos --output --uncompressed --no-provenance --force --quiet --progress --help --version; do grep -q -- "$o" out || exit 1; done'
help_matches_man rl-sample 20
expect "--version: exit 0" 0 '' -- rl-sample --version
check "--version: first line 'rl-sample (rlpipe) 0.1.0'" "stdout: $(head -c 200 out)" \
    eval '[ "$(head -n 1 out)" = "rl-sample (rlpipe) 0.1.0" ]'
finish
