#!/bin/bash
# What files may claim: a config.json with absurd sizes, a safetensors header
# that claims huge shapes or a huge header, a tokenizer.json with millions of
# tokens or merges, or one larger than any real one. Each fails fast with a
# clear error naming the file, and never allocates the claimed size first:
# the tools run here with 1 GB of address space (ulimit -v; ASan reserves
# terabytes, so under it the checks rely on time alone).
# also-asan
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py${PYTHONPATH:+:$PYTHONPATH}

asan=0
grep -qa __asan_init "$RLPIPE_BIN/rl-sample" 2>/dev/null && asan=1
# limited KB COMMAND...: at most 10 s and (without ASan) KB kilobytes of address space.
# Under ASan at most 60 s: its allocator makes parsing the millions of JSON
# nodes slower (on a 2-core Zen 3, 10.3 s for 5 million tokens and 16.2 s for
# 4.5 million merges, each refused; 2.1 and 2.4 s without ASan), and only
# time bounds it there.
limited() {
    local kb=$1; shift
    if [ "$asan" = 1 ]; then timeout 60 "$@"; else (ulimit -v "$kb"; exec timeout 10 "$@"); fi
}
sample() { limited 1000000 rl-sample --model "$1" --max-new-tokens 2 p.jsonl -o x.rlr; }

"$PY" - "$RLPIPE_ROOT" <<'EOF' || { fail setup "could not write the models"; finish; }
import json, os, shutil, struct, sys
import llama_ref
root = sys.argv[1]
llama_ref.random_model("m", hidden=64, inter=96, layers=2, heads=4, kv_heads=2, vocab=448, tie=True, seed=4)
shutil.copy(root + "/models/tiny/tokenizer.json", "m/")
with open("p.jsonl", "w") as f:
    f.write(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")

def variant(name, config=None, weights=None, tokenizer=None):
    """A copy of m with some of its files replaced (config: keys to change)."""
    shutil.copytree("m", name)
    if config:
        c = json.load(open("m/config.json"))
        c.update(config)
        json.dump(c, open(name + "/config.json", "w"))
    if weights is not None:
        open(name + "/model.safetensors", "wb").write(weights)
    if tokenizer is not None:
        with open(name + "/tokenizer.json", "w") as f:
            json.dump(tokenizer, f, separators=(",", ":"))

def safetensors(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data

# config.json
variant("c_hidden", config={"hidden_size": 1 << 40})
variant("c_params", config={"hidden_size": 1 << 16, "intermediate_size": 1 << 20, "num_hidden_layers": 4096,
                            "num_attention_heads": 512, "num_key_value_heads": 512, "vocab_size": 1 << 22})
# safetensors: a shape of 2^40 floats whose data is not there; one whose size overflows; a 2^50-byte header
variant("s_shape", weights=safetensors({"model.embed_tokens.weight": {
    "dtype": "F32", "shape": [1 << 20, 1 << 20], "data_offsets": [0, 1 << 42]}}))
variant("s_overflow", weights=safetensors({"model.embed_tokens.weight": {
    "dtype": "F32", "shape": [1 << 31, 1 << 31, 1 << 31], "data_offsets": [0, 0]}}))
variant("s_header", weights=struct.pack("<Q", 1 << 50) + b"{}")
# tokenizer.json: 5 million tokens; 4.5 million merges (the tiny model's first merge, repeated)
tok = json.load(open("m/tokenizer.json"))
big = dict(tok)
big["model"] = dict(tok["model"], vocab={**tok["model"]["vocab"],
                                         **{f"x{i}": 448 + i for i in range(5_000_000 - len(tok["model"]["vocab"]))}})
variant("t_vocab", tokenizer=big)
first = tok["model"]["merges"][0]
big["model"] = dict(tok["model"], merges=tok["model"]["merges"] + [first] * 4_500_000)
variant("t_merges", tokenizer=big)
variant("t_file")
os.truncate("t_file/tokenizer.json", 200 << 20)   # 200 MB (sparse): larger than any real tokenizer.json
EOF

expect "config.json: hidden_size 2^40: the size limit, naming the file" 1 \
    '^rl-sample: error: .*c_hidden/config\.json.*hidden_size' -- sample c_hidden
expect "config.json: 2^40 parameters in valid sizes: refused before allocating" 1 \
    '^rl-sample: error: .*c_params/config\.json: .* make more than 2\^40 parameters' -- sample c_params
expect "safetensors: a 2^40-float tensor whose data is not in the file: refused naming the tensor" 1 \
    "^rl-sample: error: .*s_shape/model\.safetensors: tensor 'model\.embed_tokens\.weight'.*beyond" -- sample s_shape
expect "safetensors: a shape whose size overflows 64 bits: refused naming the tensor" 1 \
    "^rl-sample: error: .*s_overflow/model\.safetensors.*model\.embed_tokens\.weight" -- sample s_overflow
expect "safetensors: a header of 2^50 bytes: the header limit" 1 \
    '^rl-sample: error: .*s_header/model\.safetensors: header length 1125899906842624 is larger than' -- sample s_header
expect "tokenizer.json: 5 million tokens: the vocabulary limit" 1 \
    '^rl-sample: error: t_vocab/tokenizer\.json: model\.vocab has 5000000 tokens, more than the 4194304 allowed' -- \
    sample t_vocab
# Parsed, 4.5 million merges take about 0.9 GB of JSON nodes: 2 GB here.
expect "tokenizer.json: 4.5 million merges: the merge limit" 1 \
    '^rl-sample: error: t_merges/tokenizer\.json: model\.merges has 4500189 merges, more than the 4194304 allowed' -- \
    limited 2000000 rl-sample --model t_merges --max-new-tokens 2 p.jsonl -o x.rlr
expect "tokenizer.json of 200 MB: the file limit, before reading it" 1 \
    '^rl-sample: error: t_file/tokenizer\.json: 209715200 bytes, more than the 134217728 allowed' -- sample t_file
if [ "$asan" = 0 ]; then
    expect "tokenizer.json that does not fit in memory: 'out of memory', not 'not valid JSON'" 1 \
        '^rl-sample: error: t_merges/tokenizer\.json: out of memory parsing [0-9]+ bytes of JSON' -- \
        limited 400000 rl-sample --model t_merges --max-new-tokens 2 p.jsonl -o x.rlr
else
    skip "tokenizer.json that does not fit in memory" "ASan reserves terabytes of address space: ulimit -v cannot bound it"
fi
finish
