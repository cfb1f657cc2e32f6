#!/bin/bash
# rl-ratio on bad records, bad models and bad usage: a bad record is one line
# "rl-ratio: error: <what>: <file> record <N>", exit 1, after the records before
# it have been weighted and written; usage errors exit 2; binary records are
# not written to a terminal. (doc/design.md §2, §4, §7; man/rl-ratio.1.)
# also-asan
. "$(dirname "$0")/../lib.sh"
cd "$T" || exit 1
export PYTHONPATH=$RLPIPE_ROOT/tests/py${PYTHONPATH:+:$PYTHONPATH}

# records FILE: data records in a (possibly trailer-less) stream, each carrying w and mask.
records() {
    "$PY" - "$1" "$RLPIPE_ROOT/tests/py" <<'EOF'
import sys, msgpack
sys.path.insert(0, sys.argv[2])
from rltest import decompress
raw = decompress(open(sys.argv[1], "rb").read(), allow_cut=True)
up = msgpack.Unpacker(raw=False)
up.feed(raw)
recs = [o for o in up if "rlpipe" not in o and "rlpipe_end" not in o]
assert all(len(r["w"]) == len(r["mask"]) == len(r["ids"]) for r in recs)
print(len(recs))
EOF
}

# ---- inputs: three good records, then the bad one as record 3 ------------------------
"$PY" - <<'EOF' || { fail setup "could not write the inputs"; finish; }
import json, math, os
import msgpack, zstandard
from rltest import *

def put(name, data):
    with open(name, "wb") as f:
        f.write(data)

def good(i, **kw):
    r = rollout(i, n_tokens=4)
    r["ids"] = [3 + i, 7, 11, 2]
    r["logp_learner"] = [x - 0.05 for x in r["logp"]]
    r.update(kw)
    return r

def with_bad(name, change):
    bad = good(3)
    change(bad)
    # plain msgpack for the bad record: its float32 fields may hold what float32 cannot
    objs = member_bytes([good(0), good(1), good(2), good(4)])
    objs.insert(4, msgpack.packb(bad))
    objs[-1] = msgpack.packb({"rlpipe_end": 1, "count": 5})
    c = zstandard.ZstdCompressor(write_checksum=True)
    put(name, b"".join(c.compress(o) for o in objs))

def drop(key): return lambda r: r.pop(key)
def setv(key, v): return lambda r: r.__setitem__(key, v)
def poke(key, t, v):
    def f(r):
        r[key] = list(r[key])
        r[key][t] = v
    return f

put("good.rlr", write_stream([good(i) for i in range(5)]))
objs = member_bytes([good(i) for i in range(5)])
objs[-1] = msgpack.packb({"rlpipe_end": 1, "count": 5, "partial": "s2 failed: 3 records lost"})
put("partial.rlr", b"".join(objs))
with_bad("no-ids.rlr", drop("ids"))
with_bad("no-logp.rlr", drop("logp"))
with_bad("no-learner.rlr", drop("logp_learner"))
with_bad("short-logp.rlr", setv("logp", [-0.1, -0.2, -0.3]))
with_bad("long-learner.rlr", setv("logp_learner", [-0.1] * 5))
with_bad("short-ver.rlr", setv("ver", [0, 0]))
with_bad("nan-logp.rlr", poke("logp", 2, math.nan))
with_bad("inf-logp.rlr", poke("logp", 1, math.inf))
with_bad("neginf-logp.rlr", poke("logp", 1, -math.inf))
with_bad("nan-learner.rlr", poke("logp_learner", 0, math.nan))
with_bad("inf-learner.rlr", poke("logp_learner", 3, math.inf))
with_bad("neginf-learner.rlr", poke("logp_learner", 3, -math.inf))
with_bad("str-ids.rlr", setv("ids", "1 2 3 4"))
with_bad("neg-ids.rlr", setv("ids", [1, -2, 3, 4]))
with_bad("str-logp.rlr", setv("logp", ["a", "b", "c", "d"]))
with_bad("map-learner.rlr", setv("logp_learner", {"a": 1}))
with_bad("str-ver-learner.rlr", setv("ver_learner", "7"))
with_bad("str-top-p.rlr", setv("top_p", "0.9"))
with_bad("float-top-k.rlr", setv("top_k", 1.5))
with_bad("str-temperature.rlr", setv("temperature", "hot"))
with_bad("vocab-ids.rlr", setv("ids", [3, 61, 5, 6]))
with_bad("vocab-prompt.rlr", setv("prompt_ids", [1, 5000, 2]))
with_bad("no-temperature.rlr", drop("temperature"))
with_bad("zero-temperature.rlr", setv("temperature", 0.0))
with_bad("neg-temperature.rlr", setv("temperature", -1.0))
with_bad("no-prompt.rlr", drop("prompt_ids"))
with_bad("empty-prompt.rlr", setv("prompt_ids", []))
with_bad("too-long.rlr", setv("prompt_ids", [1] * 300))
put("prompts.rlr", write_stream([{"id": 0, "prompt": "hi"}], hdr=header(kind="prompts")))
put("top-k.rlr", write_stream([good(i, top_k=40) for i in range(4)]))

# a tiny random Llama (vocabulary 61, 256 positions)
import numpy as np
from safetensors.numpy import save_file
C, F, L, NH, NKV, V = 16, 32, 1, 2, 1, 61
cfg = {"model_type": "llama", "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
       "num_attention_heads": NH, "num_key_value_heads": NKV, "vocab_size": V, "rms_norm_eps": 1e-5,
       "rope_theta": 10000.0, "max_position_embeddings": 256, "tie_word_embeddings": True,
       "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
rng = np.random.default_rng(0)
def r(*s): return (rng.standard_normal(s) * 0.3).astype(np.float32)
t = {"model.embed_tokens.weight": r(V, C), "model.norm.weight": np.ones(C, np.float32)}
for l in range(L):
    p = f"model.layers.{l}."
    t.update({p + "input_layernorm.weight": np.ones(C, np.float32),
              p + "post_attention_layernorm.weight": np.ones(C, np.float32),
              p + "self_attn.q_proj.weight": r(C, C), p + "self_attn.k_proj.weight": r(C // NH, C),
              p + "self_attn.v_proj.weight": r(C // NH, C), p + "self_attn.o_proj.weight": r(C, C),
              p + "mlp.gate_proj.weight": r(F, C), p + "mlp.up_proj.weight": r(F, C),
              p + "mlp.down_proj.weight": r(C, F)})
for d in ("m", "ck/v000002"):
    os.makedirs(d)
    json.dump(cfg, open(d + "/config.json", "w"))
    save_file(t, d + "/model.safetensors")
open("ck/latest", "w").write("v000002\n")
os.makedirs("badstate")
json.dump(cfg, open("badstate/config.json", "w"))
save_file(t, "badstate/model.safetensors")
json.dump({"version": "seven"}, open("badstate/state.json", "w"))
os.makedirs("ck-missing")
open("ck-missing/latest", "w").write("v000009\n")
os.makedirs("ck-escape")
open("ck-escape/latest", "w").write("../m\n")
EOF

# ---- bad records without a model (logp_learner from the record) ----------------------
bad() {  # bad NAME FILE REGEX [OPTION...]: exit 1, the message names FILE record 3, 3 records written
    local name=$1 file=$2 re=$3
    shift 3
    expect "$name: exit 1, message names the field and '$file record 3'" 1 \
        "^rl-ratio: error: $re.*: $file record 3\$" -- rl-ratio "$@" "$file" -o part.rlr
    check "$name: the 3 records before it are weighted and written" "$(records part.rlr) records written" \
        [ "$(records part.rlr)" = 3 ]
}
bad "ids missing" no-ids.rlr 'field "ids" is missing'
bad "logp missing" no-logp.rlr 'field "logp" is missing'
bad "logp_learner missing without --model: hint --model" no-learner.rlr 'field "logp_learner" is missing.*--model'
bad "logp shorter than ids" short-logp.rlr 'field "logp" has 3 elements but "ids" has 4'
bad "logp_learner longer than ids" long-learner.rlr 'field "logp_learner" has 5 elements but "ids" has 4'
bad "ver shorter than ids" short-ver.rlr 'field "ver" has 2 elements but "ids" has 4'
bad "NaN in logp" nan-logp.rlr 'field "logp" holds NaN at token 2'
bad "+inf in logp" inf-logp.rlr 'field "logp" holds \+inf at token 1'
bad "-inf in logp (the sampler drew it: not probability 0)" neginf-logp.rlr 'field "logp" holds -inf at token 1'
bad "NaN in logp_learner" nan-learner.rlr 'field "logp_learner" holds NaN at token 0'
bad "+inf in logp_learner" inf-learner.rlr 'field "logp_learner" holds \+inf at token 3'
bad "ids a string" str-ids.rlr 'field "ids" is not an array of unsigned 32-bit integers'
bad "ids with a negative id" neg-ids.rlr 'field "ids" is not an array of unsigned'
bad "logp of strings" str-logp.rlr 'field "logp" is not an array of numbers'
bad "logp_learner a map" map-learner.rlr 'field "logp_learner" is not an array of numbers'
bad "ver_learner a string" str-ver-learner.rlr 'field "ver_learner" is not an unsigned integer'
bad "top_p a string" str-top-p.rlr 'field "top_p" is not a number'
bad "top_k a float" float-top-k.rlr 'field "top_k" is not an integer'

expect "-inf in logp_learner (learner probability 0): accepted" 0 '' -- rl-ratio -q neginf-learner.rlr -o ok.rlr
check "-inf in logp_learner: weight 0 for that token" "$(rl-cat --json ok.rlr 2>&1 | sed -n 4p | head -c 300)" \
    eval "rl-cat --json ok.rlr | sed -n 4p | grep -q '\"w\":\[[^]]*,0\.0\]'"
bad "temperature a string, without --model too (every field is checked)" str-temperature.rlr 'field "temperature" is not a number'
expect "a partial stream: every record weighted, an error naming why, exit 1" 1 \
    '^rl-ratio: error: partial\.rlr: a partial member, its writer lost records \(s2 failed: 3 records lost\): its records are read, and the run ends with exit status 1 \(--allow-partial accepts it\)$' \
    -- rl-ratio partial.rlr -o part.rlr
check "a partial stream: the output holds its 5 records and is partial too" "$(records part.rlr) records" \
    eval '[ "$(records part.rlr)" = 5 ] && "$PY" -c "from rltest import read_stream; t = read_stream(open(\"part.rlr\", \"rb\").read())[0][2]; assert t[\"partial\"] == \"s2 failed: 3 records lost\", t"'
expect "a partial stream with --allow-partial: a warning, exit 0" 0 '^rl-ratio: warning: partial\.rlr: a partial member' \
    -- rl-ratio --allow-partial partial.rlr -o part.rlr
expect "member of kind prompts: refused" 1 '^rl-ratio: error: member of kind "prompts".*rollouts.*: prompts\.rlr$' \
    -- rl-ratio prompts.rlr -o x.rlr
expect "top_k > 0: one warning, not one per record" 0 '^rl-ratio: warning: .*top-k\.rlr record 0.*top_k 40' \
    -- rl-ratio -q top-k.rlr -o x.rlr
check "top_k > 0: exactly one warning line" "$(cat err)" [ "$(grep -c warning err)" = 1 ]
expect "bad record on a pipe: names (stdin) record 3" 1 '^rl-ratio: error: field "logp" is missing.*: \(stdin\) record 3$' \
    -- bash -c 'cat no-logp.rlr | rl-ratio -o part.rlr'
expect "nonexistent input: strerror" 1 '^rl-ratio: error: .*nope\.rlr.*No such file' -- rl-ratio nope.rlr -o x.rlr
expect "JSON lines input: not an rlpipe stream, hint rl-cat --pack" 1 'not an rlpipe stream.*rl-cat --pack' \
    -- bash -c 'echo "{\"ids\": [1]}" > l.jsonl; rl-ratio l.jsonl -o x.rlr'

# ---- with --model ---------------------------------------------------------------------
bad "token id >= vocab in ids (--model)" vocab-ids.rlr 'field "ids" holds token id 61 at position 1, not below the model.s vocabulary size 61' --model m
bad "token id >= vocab in prompt_ids (--model)" vocab-prompt.rlr 'field "prompt_ids" holds token id 5000 .*vocabulary size 61' --model m
bad "temperature missing (--model)" no-temperature.rlr 'field "temperature" is missing' --model m
bad "temperature 0 (--model)" zero-temperature.rlr 'field "temperature" is 0; scoring needs a positive temperature' --model m
bad "temperature -1 (--model)" neg-temperature.rlr 'field "temperature" is -1; scoring needs a positive' --model m
bad "temperature a string (--model)" str-temperature.rlr 'field "temperature" is not a number' --model m
bad "prompt_ids missing (--model)" no-prompt.rlr 'field "prompt_ids" is missing' --model m
bad "prompt_ids empty (--model)" empty-prompt.rlr 'field "prompt_ids" is empty' --model m
bad "longer than max_position_embeddings (--model)" too-long.rlr 'prompt and completion are 304 tokens.*max_position_embeddings 256' --model m
expect "--model: logp_learner in the record is not needed" 0 '' -- rl-ratio -q --model m no-learner.rlr -o ok.rlr
check "--model: every record gets logp_learner and ver_learner 0" "$(rl-cat --json ok.rlr | head -c 600)" \
    eval '[ "$(rl-cat --json ok.rlr | grep -c "\"logp_learner\":\[-[0-9.e-]*,-[0-9.e-]*,-[0-9.e-]*,-[0-9.e-]*\],\"ver_learner\":0,")" = 5 ]'
expect "--model checkpoint root: loads the version 'latest' names" 0 '' -- rl-ratio -q --model ck good.rlr -o ok.rlr
check "--model checkpoint root: ver_learner 2 from the name v000002 (no state.json)" "$(rl-cat --json ok.rlr | head -c 600)" \
    eval '[ "$(rl-cat --json ok.rlr | grep -c "\"ver_learner\":2,")" = 5 ]'
expect "--model nonexistent: cannot load, exit 1" 1 '^rl-ratio: error: cannot load the learner model: .*nomodel' \
    -- rl-ratio --model nomodel good.rlr -o x.rlr
expect "--model with latest naming a missing version: exit 1" 1 '^rl-ratio: error: cannot load the learner model: .*v000009' \
    -- rl-ratio --model ck-missing good.rlr -o x.rlr
expect "--model with latest naming ../m: refused" 1 '^rl-ratio: error: ck-escape/latest does not name a version directory' \
    -- rl-ratio --model ck-escape good.rlr -o x.rlr
expect "--model with state.json version not an integer: exit 1" 1 '^rl-ratio: error: badstate/state.json: "version" is not a non-negative integer' \
    -- rl-ratio --model badstate good.rlr -o x.rlr

# ---- usage errors (exit 2), help and version -------------------------------------------
expect "--adapter without --model: usage error" 2 '^rl-ratio: error: --adapter is merged into the weights of --model DIR' \
    -- rl-ratio --adapter lora good.rlr
expect "--adapter nonexistent: exit 1 naming its config" 1 '^rl-ratio: error: .*nolora/adapter_config.json' \
    -- rl-ratio --model m --adapter nolora good.rlr -o x.rlr
expect "--mode bogus: usage error" 2 '^rl-ratio: error: --mode: expected token, seq, geo or none' -- rl-ratio --mode bogus good.rlr
check "--mode bogus: nothing on stdout" "stdout: $(head -c 100 out)" [ ! -s out ]
expect "--clip 0: usage error" 2 '^rl-ratio: error: --clip: expected a number > 0' -- rl-ratio --clip 0 good.rlr
expect "--clip -1: usage error" 2 '^rl-ratio: error: --clip: expected a number > 0' -- rl-ratio --clip -1 good.rlr
expect "--clip abc: usage error" 2 '^rl-ratio: error: --clip' -- rl-ratio --clip abc good.rlr
expect "--clip nan: usage error" 2 '^rl-ratio: error: --clip' -- rl-ratio --clip nan good.rlr
expect "--mask 2,1: usage error (LO < HI)" 2 '^rl-ratio: error: --mask: expected 0 <= LO < HI' -- rl-ratio --mask 2,1 good.rlr
expect "--mask 1,1: usage error" 2 '^rl-ratio: error: --mask: expected 0 <= LO < HI' -- rl-ratio --mask 1,1 good.rlr
expect "--mask -1,2: usage error" 2 '^rl-ratio: error: --mask: expected 0 <= LO < HI' -- rl-ratio --mask -1,2 good.rlr
expect "--mask 1: usage error" 2 '^rl-ratio: error: --mask: expected LO,HI' -- rl-ratio --mask 1 good.rlr
expect "--mask a,b: usage error" 2 '^rl-ratio: error: --mask: expected LO,HI' -- rl-ratio --mask a,b good.rlr
expect "--mode none --clip 2: usage error" 2 '^rl-ratio: error: --mode none gives every token weight 1' -- rl-ratio --mode none --clip 2 good.rlr
expect "--mode none --mask: usage error" 2 '^rl-ratio: error: --mode none' -- rl-ratio --mode none --mask 0.5,2 good.rlr
expect "--batch 0: usage error" 2 '^rl-ratio: error: --batch' -- rl-ratio --batch 0 good.rlr
expect "--batch x: usage error" 2 '^rl-ratio: error: --batch' -- rl-ratio --batch x good.rlr
expect "--as w: usage error" 2 "^rl-ratio: error: --as 'w': use logp_learner or logp_ref" -- rl-ratio --as w good.rlr
expect "--as logp_ref without --model: usage error" 2 '^rl-ratio: error: --as logp_ref scores the records with the reference model: give --model DIR' -- \
    rl-ratio --as logp_ref good.rlr
expect "--as logp_ref with --listen: usage error (a reference takes no weights)" 2 \
    '^rl-ratio: error: --as logp_ref: the reference model is frozen, it takes no weights \(--listen\)' -- \
    rl-ratio --as logp_ref --model ref/ --listen unix:sock good.rlr
expect "--as logp_ref with --skip-uniform: usage error" 2 '^rl-ratio: error: --as logp_ref: every record needs logp_ref' -- \
    rl-ratio --as logp_ref --model ref/ --skip-uniform good.rlr
for opt in "--mode geo" "--clip 3" "--mask 0.5,2"; do
    expect "--as logp_ref with $opt: usage error (no weights)" 2 \
        '^rl-ratio: error: --as logp_ref writes no weights: --mode, --clip and --mask do not apply' -- \
        rl-ratio --as logp_ref --model ref/ $opt good.rlr
done
expect "unknown option: usage error naming it" 2 'bogus' -- rl-ratio --bogus good.rlr
expect "--model without a value: usage error" 2 'model' -- rl-ratio good.rlr --model
expect "--metrics - with records on stdout: usage error" 2 '^rl-ratio: error: --metrics -' -- rl-ratio --metrics - good.rlr
expect "--metrics - with -o FILE: metrics on stdout" 0 '' -- rl-ratio -q --metrics - -o x.rlr good.rlr
check "--metrics - with -o FILE: one JSON line with 5 records" "stdout: $(head -c 300 out)" \
    eval '[ "$(wc -l <out)" = 1 ] && grep -q "\"records\":5," out'
expect "output file is an input: usage error" 2 'also an input' -- rl-ratio good.rlr -o good.rlr
expect "metrics file is an input: usage error" 2 'also an input' -- rl-ratio good.rlr -o x.rlr --metrics good.rlr
expect "metrics file is the output: usage error" 2 'same file' -- rl-ratio good.rlr -o new.rlr --metrics new.rlr
expect "--help: exit 0" 0 '' -- rl-ratio --help
check "--help: usage on stdout naming every option" "stdout: $(head -c 300 out)" \
    eval 'grep -qiE "^usage: *rl-ratio" out && for o in --model --mode --clip --mask --batch --metrics --output --uncompressed --no-provenance --force --quiet --progress --help --version; do grep -q -- "$o" out || exit 1; done'
check "--help: stderr empty" "stderr: $(head -c 200 err)" [ ! -s err ]
help_matches_man rl-ratio 15
expect "--version: exit 0" 0 '' -- rl-ratio --version
check "--version: first line 'rl-ratio (rlpipe) 0.1.0'" "stdout: $(head -c 200 out)" \
    eval '[ "$(head -n 1 out)" = "rl-ratio (rlpipe) 0.1.0" ]'

# ---- terminals --------------------------------------------------------------------------
on_tty() { script -qec "$1" /dev/null </dev/null >&2; }
ratio="$RLPIPE_BIN/rl-ratio"
if command -v script >/dev/null; then
    expect "records to a terminal: refused with exit 2" 2 '^rl-ratio: .*terminal.*--force' -- on_tty "$ratio good.rlr"
    check "records to a terminal: no binary reaches it" "zstd bytes on the terminal" \
        eval '! LC_ALL=C grep -qaF $'"'"'\x28\xb5\x2f\xfd'"'"' err'
    expect "records to a terminal, refused before loading the model" 2 '^rl-ratio: .*terminal' -- \
        on_tty "$ratio --model nomodel good.rlr"
    expect "records to a terminal with --force: written, exit 0" 0 '' -- on_tty "$ratio -q --force good.rlr"
    expect "-o FILE while stdout is a terminal: allowed" 0 '' -- on_tty "$ratio -q good.rlr -o tty.rlr"
    check "-o FILE while stdout is a terminal: FILE holds the 5 records" "$(records tty.rlr) records" \
        [ "$(records tty.rlr)" = 5 ]
else
    skip "terminal" "script (util-linux) is not installed"
fi

finish
